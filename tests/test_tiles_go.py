"""Go's ``golang.org/x/mod/sumdb/tlog`` authenticates our exported hash tiles.

An independent tiled-log client (the Go checksum database's, from Debian's
``golang-golang-x-mod-dev``, built in GOPATH mode with no network as in
``test_note_go.py``) reads ``tiles export``'s directory through a small path adapter
(``tests/go/tilecheck.go``: Go names tiles ``tile/8/L/N``, tlog-tiles ``tile/L/N``): the
tree hash it computes from our tiles is our checkpoint's root, every entry asked for is in
the tree by a proof built from the tiles, and a tile changed by one byte is refused.

Skips when ``go`` or the x/mod sources are absent, unless ``CI`` is set (then it fails).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from agentplane_journal import NoteSigner, SqlJournalStore
from agentplane_journal.cli.tiles import export_tiles

from support.logs import SEED, bulk_seal, sealed_leaves

pytestmark = pytest.mark.slow

GOCODE = Path("/usr/share/gocode")
TLOG_SRC = GOCODE / "src/golang.org/x/mod/sumdb/tlog/tile.go"
PROGRAM = Path(__file__).parent / "go" / "tilecheck.go"


@pytest.fixture(scope="module")
def tilecheck(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None or not TLOG_SRC.is_file():
        missing = "go" if go is None else str(TLOG_SRC)
        message = f"{missing} is not installed (apt-get install golang-go golang-golang-x-mod-dev)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Go tiles test: {message}")
        pytest.skip(message)
    tmp = tmp_path_factory.mktemp("gotiles")
    (tmp / "src" / "apjtiles").mkdir(parents=True)
    shutil.copy(PROGRAM, tmp / "src" / "apjtiles" / "main.go")
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{GOCODE}:{tmp}",
        "GOFLAGS": "",
        "GOCACHE": str(tmp / "cache"),
        "GOPROXY": "off",
        "HOME": str(tmp),
    }
    binary = tmp / "apjtiles"
    built = subprocess.run(
        [go, "build", "-o", str(binary), "apjtiles"],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    return binary


def check(binary: Path, directory: Path, *indexes: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), str(directory), *map(str, indexes)],
        capture_output=True,
        text=True,
        timeout=120,
    )


# The tiles' reads run on both dialects in test_tiles.py; Go reads files, once.
@pytest.mark.parametrize("dialect", ["sqlite"])
async def test_go_tlog_authenticates_our_tiles(
    tilecheck: Path, store: SqlJournalStore, tmp_path: Path
) -> None:
    directory = tmp_path / "log"
    signer = NoteSigner(store.origin, SEED)
    await bulk_seal(store, sealed_leaves(520))
    await export_tiles(store, directory, signer)
    done = check(tilecheck, directory, 0, 255, 256, 511, 519)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stdout + done.stderr
    await bulk_seal(store, sealed_leaves(250, "more"))  # 770: two full tiles, then 2.p/2
    await export_tiles(store, directory, signer)
    done = check(tilecheck, directory, 3, 600, 769)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stdout + done.stderr
    # One byte of a full tile changed: Go's reader refuses to authenticate it.
    tile = directory / "tile/0/001"
    data = bytearray(tile.read_bytes())
    data[100] ^= 1
    tile.write_bytes(bytes(data))
    done = check(tilecheck, directory, 300)
    assert done.returncode == 1, done.stdout
    assert "ok" not in done.stdout
