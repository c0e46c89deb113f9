"""C2SP tlog-tiles arithmetic: which tiles a log of ``n`` leaves has, their paths, entry bundles.

Pure (no I/O); the SQL that fills a tile is :mod:`agentplane_journal.journal.tiles`'s, the
files and the HTTP server are the command line's. The spec is c2sp.org/tlog-tiles.

Why tiles map straight onto the stored tree: hash tile ``N`` at tile level ``L`` holds the
Merkle Tree Hashes ``MTH(D[(N*256+i) * 256**L : (N*256+i+1) * 256**L])`` for ``i`` in
0..255, and each is the root of a *perfect* subtree of height ``8L``: exactly the stored
node ``(level 8L, index N*256+i)`` of :mod:`agentplane_journal.tlog.tree`. So a tile is one
range read of stored nodes, never a recomputation; and because stored nodes never change
once complete, a full tile (256 hashes) never changes either (files are written once,
served ``immutable``). The rightmost tile of each level is *partial* (``.p/W``, 1..255
hashes) and belongs to one tree size.

What an *entry* is: leaf ``i`` of a tenant's log is ``SHA-256(0x00 || chain_head)`` where
``chain_head`` is the 32-byte head the run was sealed at (``run_seal.chain_head``, what
``verify RUN`` prints as ``head``). The tlog-tiles entry is therefore those 32 raw bytes,
and an entry bundle is their sequence, each prefixed by its big-endian uint16 length (32):
whoever holds a run's records recomputes its head, and finds it, byte for byte, in the
bundle at the run's position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "ENTRY_SIZE",
    "HASH_SIZE",
    "TILE_HEIGHT",
    "TILE_WIDTH",
    "Tile",
    "TilePath",
    "decode_bundle",
    "encode_bundle",
    "index_path",
    "new_tiles",
    "parse_tile_path",
    "tiles_for_size",
]

TILE_HEIGHT = 8
"""A tile is a subtree of height 8: tile level ``L`` holds stored-tree level ``8 * L``."""
TILE_WIDTH = 1 << TILE_HEIGHT
"""Hashes in a full tile (and entries in a full bundle): 256."""
HASH_SIZE = 32
ENTRY_SIZE = 32
"""Every entry of our logs is a 32-byte sealed chain head."""
MAX_TILE_LEVEL = 63  # the spec's bound on <L>


@dataclass(frozen=True, slots=True)
class Tile:
    """Tile ``index`` of tile ``level``, ``width`` hashes wide (256: full, else partial)."""

    level: int
    index: int
    width: int

    @property
    def full(self) -> bool:
        return self.width == TILE_WIDTH

    @property
    def node_level(self) -> int:
        """The stored tree's level whose nodes this tile holds."""
        return self.level * TILE_HEIGHT

    @property
    def first_node(self) -> int:
        """The stored-tree index of the tile's first hash."""
        return self.index * TILE_WIDTH

    def path(self) -> str:
        """``tile/<L>/<N>[.p/<W>]``."""
        return f"tile/{self.level}/{index_path(self.index)}{self._suffix()}"

    def entries_path(self) -> str:
        """``tile/entries/<N>[.p/<W>]`` (level-0 tiles only: one bundle per leaf tile)."""
        if self.level != 0:
            raise ValueError("entry bundles go with level-0 tiles only")
        return f"tile/entries/{index_path(self.index)}{self._suffix()}"

    def _suffix(self) -> str:
        return "" if self.full else f".p/{self.width}"


def index_path(index: int) -> str:
    """``<N>`` as the spec spells it: 3-digit groups, all but the last prefixed by ``x``.

    1234067 is ``x001/x234/067``; 5 is ``005``. (No file and directory of one name, so
    a directory of tiles can be served as it is.)
    """
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"a tile index is a non-negative int, not {index!r}")
    groups = [f"{index % 1000:03d}"]
    index //= 1000
    while index:
        groups.append(f"x{index % 1000:03d}")
        index //= 1000
    return "/".join(reversed(groups))


def _level_counts(size: int) -> list[int]:
    """Hashes at each tile level of a tree of ``size`` leaves (nonzero levels only)."""
    counts, level = [], 0
    while level <= MAX_TILE_LEVEL and size >> (TILE_HEIGHT * level):
        counts.append(size >> (TILE_HEIGHT * level))
        level += 1
    return counts


def tiles_for_size(size: int) -> list[Tile]:
    """Every tile a tree of ``size`` leaves is served as: full ones, and one partial per
    level whose count is not a multiple of 256 (a tree of 256 has a full level-0 tile and a
    level-1 tile of width 1, as the spec's example says)."""
    out: list[Tile] = []
    for level, count in enumerate(_level_counts(size)):
        out.extend(Tile(level, n, TILE_WIDTH) for n in range(count // TILE_WIDTH))
        if count % TILE_WIDTH:
            out.append(Tile(level, count // TILE_WIDTH, count % TILE_WIDTH))
    return out


def new_tiles(old_size: int, size: int) -> list[Tile]:
    """The tiles a tree of ``size`` has that one of ``old_size`` (an earlier export) did not.

    Full tiles completed since ``old_size``, and the partial tiles of ``size`` whose width
    changed: O(k / 256 + log n) tiles for ``k = size - old_size``, level by level, in order.
    """
    if not 0 <= old_size <= size:
        raise ValueError(f"old size {old_size} is not within 0..{size}")
    old = _level_counts(old_size)
    out: list[Tile] = []
    for level, count in enumerate(_level_counts(size)):
        before = old[level] if level < len(old) else 0
        if before == count:
            continue
        out.extend(
            Tile(level, n, TILE_WIDTH) for n in range(before // TILE_WIDTH, count // TILE_WIDTH)
        )
        if count % TILE_WIDTH:
            out.append(Tile(level, count // TILE_WIDTH, count % TILE_WIDTH))
    return out


@dataclass(frozen=True, slots=True)
class TilePath:
    """A parsed request path: a hash tile, or (``entries``) an entry bundle."""

    entries: bool
    tile: Tile


_INDEX = re.compile(r"(?:x\d{3}/)*\d{3}")
_LEVEL = re.compile(r"0|[1-9]\d?")
_WIDTH = re.compile(r"[1-9]\d{0,2}")
# A log of at most 2**63 leaves has tile indexes below 2**55 (17 digits, six groups of
# three); seven groups is ample, and anything longer is no tile of any log.
_MAX_INDEX_TEXT = 7 * 4 - 1
_MAX_INDEX = 1 << 55


def parse_tile_path(path: str) -> TilePath | None:
    """``tile/<L>/<N>[.p/<W>]`` or ``tile/entries/<N>[.p/<W>]`` in the spec's one spelling;
    ``None`` for anything else (a leading zero, a width of 0 or 256, a level above 63)."""
    if not path.startswith("tile/"):
        return None
    head, _, rest = path[len("tile/") :].partition("/")
    width = TILE_WIDTH
    if ".p/" in rest:
        rest, _, w = rest.partition(".p/")
        if not _WIDTH.fullmatch(w) or not 1 <= int(w) < TILE_WIDTH:
            return None
        width = int(w)
    if len(rest) > _MAX_INDEX_TEXT or not _INDEX.fullmatch(rest):
        return None  # bounded before int(): 4,300 digits would be a ValueError there
    index = int(rest.replace("x", "").replace("/", ""))
    if index >= _MAX_INDEX:
        return None
    if head == "entries":
        return TilePath(True, Tile(0, index, width))
    if not _LEVEL.fullmatch(head) or int(head) > MAX_TILE_LEVEL:
        return None
    return TilePath(False, Tile(int(head), index, width))


def encode_bundle(entries: list[bytes]) -> bytes:
    """An entry bundle: each entry prefixed by its length as a big-endian uint16."""
    out = bytearray()
    for entry in entries:
        if len(entry) > 0xFFFF:
            raise ValueError(f"an entry of {len(entry)} bytes does not fit a uint16 length")
        out += len(entry).to_bytes(2, "big") + entry
    return bytes(out)


def decode_bundle(data: bytes) -> list[bytes]:
    """The entries of a bundle; ``ValueError`` on a truncated one."""
    out: list[bytes] = []
    at = 0
    while at < len(data):
        if at + 2 > len(data):
            raise ValueError(f"entry bundle: a length prefix is cut at byte {at}")
        n = int.from_bytes(data[at : at + 2], "big")
        if at + 2 + n > len(data):
            raise ValueError(f"entry bundle: entry {len(out)} is cut ({n} bytes announced)")
        out.append(data[at + 2 : at + 2 + n])
        at += 2 + n
    return out
