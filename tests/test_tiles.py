"""The log as C2SP tlog-tiles: the tile arithmetic, and ``tiles export`` checked by others.

The export is read back by ``tlog-scales`` (PyPI, an independent tlog-tiles client): it
must compute our checkpoint's root from our tiles, find every run's sealed head as its
entry, and give the same inclusion proofs as the store. Logs of 300..900 leaves cross the
256-leaf tile boundary and leave partial tiles at two levels. Incremental: a second export
writes only the new tiles (counted), never rewrites a full one, and refuses a directory
whose full tile differs from the log's.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from agentplane_journal import NoteSigner, SqlJournalStore
from agentplane_journal.cli.tiles import TileConflictError, export_tiles
from agentplane_journal.tlog.tiles import (
    Tile,
    decode_bundle,
    encode_bundle,
    index_path,
    new_tiles,
    parse_tile_path,
    tiles_for_size,
)

from support.logs import SEED, _scales, bulk_seal, check_with_scales, sealed_leaves

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def test_index_paths_are_the_specs() -> None:
    assert index_path(0) == "000"
    assert index_path(5) == "005"
    assert index_path(1000) == "x001/000"
    assert index_path(1234067) == "x001/x234/067"
    assert Tile(0, 1234067, 256).path() == "tile/0/x001/x234/067"
    assert Tile(2, 3, 17).path() == "tile/2/003.p/17"
    assert Tile(0, 3, 17).entries_path() == "tile/entries/003.p/17"


def test_tiles_for_size_is_the_specs_example() -> None:
    tiles = tiles_for_size(70_000)
    full0 = [t for t in tiles if t.level == 0 and t.full]
    assert len(full0) == 273
    partial = sorted((t.level, t.width) for t in tiles if not t.full)
    assert partial == [(0, 112), (1, 17), (2, 1)]
    assert [t for t in tiles if t.level == 1 and t.full] == [Tile(1, 0, 256)]
    assert tiles_for_size(256) == [Tile(0, 0, 256), Tile(1, 0, 1)]
    assert tiles_for_size(0) == []


def test_new_tiles_are_what_grew() -> None:
    assert new_tiles(0, 300) == tiles_for_size(300)
    assert new_tiles(300, 300) == []
    # 300 -> 600: level 0 gains full tile 1 and the partial 2/88; level 1 gains width 2.
    assert new_tiles(300, 600) == [Tile(0, 1, 256), Tile(0, 2, 88), Tile(1, 0, 2)]
    # Small appends: one partial per level whose count changed.
    assert new_tiles(600, 601) == [Tile(0, 2, 89)]
    k, n = 2560, 1_000_000
    assert len(new_tiles(n, n + k)) <= k // 256 + 1 + 3


@pytest.mark.parametrize("tile", [Tile(0, 0, 256), Tile(3, 1234067, 5), Tile(63, 0, 255)])
def test_tile_paths_parse_back(tile: Tile) -> None:
    assert parse_tile_path(tile.path()) == parse_tile_path(tile.path())
    parsed = parse_tile_path(tile.path())
    assert parsed is not None and parsed.tile == tile and not parsed.entries
    if tile.level == 0:
        parsed = parse_tile_path(tile.entries_path())
        assert parsed is not None and parsed.tile == tile and parsed.entries


@pytest.mark.parametrize(
    "path",
    [
        "tile/00/000",
        "tile/64/000",
        "tile/0/1",
        "tile/0/001.p/0",
        "tile/0/001.p/256",
        "tile/0/001.p/07",
        "tile/0/001/002",
        "tile/0/x001",
        "tile/entries/x1/000",
        "checkpoint",
        "tile/0/000.p/",
    ],
)
def test_other_spellings_are_refused(path: str) -> None:
    assert parse_tile_path(path) is None


def test_bundles_round_trip() -> None:
    entries = [bytes([i]) * 32 for i in range(3)]
    data = encode_bundle(entries)
    assert len(data) == 3 * 34 and data[:2] == b"\x00\x20"
    assert decode_bundle(data) == entries
    with pytest.raises(ValueError):
        decode_bundle(data[:-1])


# -- the export, read back by tlog-scales -------------------------------------------------


def tree_files(directory: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(directory)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in directory.rglob("*")
        if p.is_file()
    }


async def test_export_is_read_back_by_tlog_scales_and_grows_incrementally(
    store: SqlJournalStore, tmp_path: Path
) -> None:
    tmp_path = tmp_path / "log"
    _scales()
    signer = NoteSigner(store.origin, SEED)
    leaves = sealed_leaves(300)
    await bulk_seal(store, leaves)
    first = await export_tiles(store, tmp_path, signer)
    # Level 0: one full tile and 0.p/44 (and their bundles); level 1: 000.p/1; checkpoint.
    assert (first.size, first.written) == (300, 6)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        "checkpoint",
        "tile/0/000",
        "tile/0/001.p/44",
        "tile/1/000.p/1",
        "tile/entries/000",
        "tile/entries/001.p/44",
    ]
    await check_with_scales(str(tmp_path), store, leaves)
    before = tree_files(tmp_path)

    more = sealed_leaves(600, "more")
    await bulk_seal(store, more)
    leaves += more
    second = await export_tiles(store, tmp_path, signer)
    expected = new_tiles(300, 900)
    assert second.written == len(expected) + sum(t.level == 0 for t in expected) + 1
    after = tree_files(tmp_path)
    for name in ("tile/0/000", "tile/entries/000"):
        assert after[name] == before[name]  # the full tiles were not rewritten
    await check_with_scales(str(tmp_path), store, leaves)
    again = await export_tiles(store, tmp_path, signer)
    assert again.written == 1  # nothing new: only the checkpoint


async def test_export_refuses_a_directory_whose_full_tile_differs(
    store: SqlJournalStore, tmp_path: Path
) -> None:
    tmp_path = tmp_path / "log"
    signer = NoteSigner(store.origin, SEED)
    await bulk_seal(store, sealed_leaves(200))
    await export_tiles(store, tmp_path, signer)
    # Someone plants a different full tile where the log's next one will go.
    (tmp_path / "tile/0/000").write_bytes(b"\x00" * 8192)
    await bulk_seal(store, sealed_leaves(100, "x"))
    with pytest.raises(TileConflictError, match="never rewritten"):
        await export_tiles(store, tmp_path, signer)
    assert (tmp_path / "tile/0/000").read_bytes() == b"\x00" * 8192
    assert "\n200\n" in (tmp_path / "checkpoint").read_text()


async def test_export_refuses_a_checkpoint_the_log_is_not_consistent_with(
    store: SqlJournalStore, tmp_path: Path
) -> None:
    tmp_path = tmp_path / "log"
    signer = NoteSigner(store.origin, SEED)
    await bulk_seal(store, sealed_leaves(10))
    await export_tiles(store, tmp_path, signer)
    forged = (tmp_path / "checkpoint").read_text().split("\n")
    forged[2] = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
    (tmp_path / "checkpoint").write_text("\n".join(forged))
    await bulk_seal(store, sealed_leaves(5, "y"))
    with pytest.raises(TileConflictError, match="NOT consistent"):
        await export_tiles(store, tmp_path, signer)


@pytest.mark.parametrize("dialect", ["sqlite"])
async def test_the_tiles_export_command(
    store: SqlJournalStore, database_url: str, tmp_path: Path
) -> None:
    """``agentplane-journal tiles export`` as an operator runs it: JSON report, exit 1 on a
    planted tile."""
    import json
    import subprocess
    import sys

    key = tmp_path / "log.key"
    key.write_text(SEED.hex())
    key.chmod(0o600)
    await bulk_seal(store, sealed_leaves(260))
    directory = tmp_path / "log"
    argv = [sys.executable, "-m", "agentplane_journal", "tiles", "export", str(directory)]
    argv += ["--url", database_url, "--sign-key-file", str(key), "--json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)

    done = await asyncio.to_thread(run)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["size"] == 260 and report["files_written"] == 6
    assert report["verifier_key"] == NoteSigner(store.origin, SEED).verifier_key
    # Someone plants the full tile the log's next export will complete.
    (directory / "tile/0/001").write_bytes(bytes(8192))
    await bulk_seal(store, sealed_leaves(300, "z"))
    done = await asyncio.to_thread(run)
    assert done.returncode == 1 and "FAILED" in done.stderr and "never rewritten" in done.stderr
