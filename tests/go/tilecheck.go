// tilecheck: Go's golang.org/x/mod/sumdb/tlog authenticates a C2SP tlog-tiles directory.
//
// Usage: tilecheck DIR INDEX...
// Reads DIR/checkpoint (size and root), serves tlog's TileReader from DIR through a path
// adapter (Go's tile/8/L/N and tile/8/data/N are tlog-tiles' tile/L/N and tile/entries/N),
// checks that the tree hash from the tiles is the checkpoint's root, and for each INDEX that
// its entry (from the entry bundle) is in the tree by a proof built from the tiles.
// Prints "ok" and exits 0, or prints the error and exits 1.
package main

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/tlog"
)

type dirTiles struct{ dir string }

func (d dirTiles) Height() int { return 8 }

func ourPath(t tlog.Tile) string {
	p := strings.Replace(t.Path(), "tile/8/", "tile/", 1)
	return strings.Replace(p, "tile/data/", "tile/entries/", 1)
}

func (d dirTiles) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, t := range tiles {
		data, err := os.ReadFile(filepath.Join(d.dir, ourPath(t)))
		if err != nil {
			return nil, err
		}
		out[i] = data
	}
	return out, nil
}

func (d dirTiles) SaveTiles(tiles []tlog.Tile, data [][]byte) {}

func fail(err error) {
	fmt.Println(err)
	os.Exit(1)
}

func entry(dir string, size, index int64) []byte {
	tile := tlog.Tile{H: 8, L: -1, N: index / 256, W: 256}
	if (tile.N+1)*256 > size {
		tile.W = int(size % 256) // the partial bundle of this size
	}
	data, err := os.ReadFile(filepath.Join(dir, ourPath(tile)))
	if err != nil {
		fail(err)
	}
	at := index - tile.N*256
	for i := int64(0); ; i++ {
		n := int64(binary.BigEndian.Uint16(data[:2]))
		if i == at {
			return data[2 : 2+n]
		}
		data = data[2+n:]
	}
}

func main() {
	dir := os.Args[1]
	note, err := os.ReadFile(filepath.Join(dir, "checkpoint"))
	if err != nil {
		fail(err)
	}
	lines := strings.Split(string(note), "\n")
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		fail(err)
	}
	raw, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil {
		fail(err)
	}
	var root tlog.Hash
	copy(root[:], raw)
	tree := tlog.Tree{N: size, Hash: root}
	reader := tlog.TileHashReader(tree, dirTiles{dir})
	got, err := tlog.TreeHash(size, reader)
	if err != nil {
		fail(err)
	}
	if got != root {
		fail(fmt.Errorf("tree hash %v from the tiles is not the checkpoint's root %v", got, root))
	}
	for _, arg := range os.Args[2:] {
		index, err := strconv.ParseInt(arg, 10, 64)
		if err != nil {
			fail(err)
		}
		proof, err := tlog.ProveRecord(size, index, reader)
		if err != nil {
			fail(err)
		}
		if err := tlog.CheckRecord(proof, size, root, index, tlog.RecordHash(entry(dir, size, index))); err != nil {
			fail(err)
		}
	}
	fmt.Println("ok")
}
