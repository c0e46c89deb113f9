"""tlog-tiles arithmetic (tlog/tiles.py) without a database: the spec's examples, the one
spelling of a path, the tiles an export adds, entry bundles.

The fast tests of the module (tools/mutation.py runs these against its mutants; the
database-backed tiles tests in tests/test_tiles.py check the served bytes).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentplane_journal.tlog.tiles import (
    MAX_TILE_LEVEL,
    TILE_WIDTH,
    Tile,
    TilePath,
    _level_counts,
    decode_bundle,
    encode_bundle,
    index_path,
    new_tiles,
    parse_tile_path,
    tiles_for_size,
)


@pytest.mark.parametrize(
    ("index", "path"),
    [
        (0, "000"),
        (5, "005"),
        (999, "999"),
        (1000, "x001/000"),
        (1234067, "x001/x234/067"),
        (10**9, "x001/x000/x000/000"),
    ],
)
def test_index_path_is_the_specs_spelling(index: int, path: str) -> None:
    assert index_path(index) == path
    assert parse_tile_path(f"tile/0/{path}") == TilePath(False, Tile(0, index, TILE_WIDTH))


@pytest.mark.parametrize("index", [-1, True, 1.0, "1"])
def test_index_path_refuses_anything_but_a_non_negative_int(index: object) -> None:
    with pytest.raises(ValueError, match="a tile index is a non-negative int"):
        index_path(index)  # type: ignore[arg-type]


def test_a_tile_knows_its_stored_nodes_and_paths() -> None:
    full, partial = Tile(2, 3, TILE_WIDTH), Tile(0, 1234067, 7)
    assert (full.full, full.node_level, full.first_node) == (True, 16, 768)
    assert (partial.full, partial.node_level, partial.first_node) == (False, 0, 1234067 * 256)
    assert full.path() == "tile/2/003"
    assert partial.path() == "tile/0/x001/x234/067.p/7"
    assert partial.entries_path() == "tile/entries/x001/x234/067.p/7"
    assert Tile(0, 0, 256).entries_path() == "tile/entries/000"
    with pytest.raises(ValueError, match="entry bundles go with level-0 tiles only"):
        full.entries_path()


@pytest.mark.parametrize(
    ("size", "tiles"),
    [
        (0, []),
        (1, [Tile(0, 0, 1)]),
        (255, [Tile(0, 0, 255)]),
        (256, [Tile(0, 0, 256), Tile(1, 0, 1)]),
        (257, [Tile(0, 0, 256), Tile(0, 1, 1), Tile(1, 0, 1)]),
        (512, [Tile(0, 0, 256), Tile(0, 1, 256), Tile(1, 0, 2)]),
        (
            65536 + 256 + 3,
            [Tile(0, n, 256) for n in range(257)]
            + [Tile(0, 257, 3), Tile(1, 0, 256), Tile(1, 1, 1), Tile(2, 0, 1)],
        ),
    ],
)
def test_tiles_for_size_known_answers(size: int, tiles: list[Tile]) -> None:
    assert tiles_for_size(size) == tiles
    assert new_tiles(0, size) == tiles
    assert new_tiles(size, size) == []


def test_level_counts_stop_at_the_specs_highest_level() -> None:
    assert _level_counts(0) == []
    assert _level_counts(256) == [256, 1]
    top = 1 << (8 * MAX_TILE_LEVEL)
    assert len(_level_counts(top)) == MAX_TILE_LEVEL + 1
    assert _level_counts(top)[-1] == 1
    assert len(_level_counts(top << 8)) == MAX_TILE_LEVEL + 1


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 70_000), st.integers(0, 70_000))
def test_new_tiles_are_exactly_those_an_earlier_size_did_not_have(a: int, b: int) -> None:
    old, size = min(a, b), max(a, b)
    before = set(tiles_for_size(old))
    assert new_tiles(old, size) == [t for t in tiles_for_size(size) if t not in before]


@pytest.mark.parametrize(("old", "size"), [(-1, 5), (6, 5)])
def test_new_tiles_refuses_an_old_size_outside_the_new_one(old: int, size: int) -> None:
    with pytest.raises(ValueError, match=f"old size {old} is not within 0..{size}"):
        new_tiles(old, size)


@pytest.mark.parametrize(
    ("path", "parsed"),
    [
        ("tile/0/000", TilePath(False, Tile(0, 0, 256))),
        ("tile/1/005.p/1", TilePath(False, Tile(1, 5, 1))),
        ("tile/63/000.p/255", TilePath(False, Tile(63, 0, 255))),
        ("tile/10/x001/234", TilePath(False, Tile(10, 1234, 256))),
        ("tile/entries/005", TilePath(True, Tile(0, 5, 256))),
        ("tile/entries/x001/000.p/17", TilePath(True, Tile(0, 1000, 17))),
    ],
)
def test_a_tile_path_parses_in_its_one_spelling(path: str, parsed: TilePath) -> None:
    assert parse_tile_path(path) == parsed
    tile = parsed.tile
    assert (tile.entries_path() if parsed.entries else tile.path()) == path


@pytest.mark.parametrize(
    "path",
    [
        "tile/64/000",
        "tile/01/000",
        "tile/100/000",
        "tile/-1/000",
        "tile/a/000",
        "tile/0/0",
        "tile/0/0000",
        "tile/0/x001",
        "tile/0/001/002",
        "tile/0/000.p/0",
        "tile/0/000.p/256",
        "tile/0/000.p/007",
        "tile/0/000.p/",
        "tile/entries/000.p/256",
        "tile/entries/5",
        "tiles/0/000",
        "/tile/0/000",
        "tile/0/000/",
        "checkpoint",
    ],
)
def test_any_other_spelling_is_not_a_tile(path: str) -> None:
    assert parse_tile_path(path) is None


def test_bundles_round_trip_and_refuse_an_entry_too_long_for_its_prefix() -> None:
    entries = [bytes([i]) * 32 for i in range(3)] + [b"", b"x" * 0xFFFF]
    data = encode_bundle(entries)
    assert data[:2] == b"\x00\x20" and data[2:34] == entries[0]
    assert decode_bundle(data) == entries
    assert encode_bundle([]) == b"" and decode_bundle(b"") == []
    with pytest.raises(ValueError, match="an entry of 65536 bytes does not fit"):
        encode_bundle([b"x" * 0x10000])


def test_a_truncated_bundle_is_refused_saying_where() -> None:
    data = encode_bundle([b"a" * 32, b"b" * 32])
    with pytest.raises(ValueError, match="a length prefix is cut at byte 34"):
        decode_bundle(data[:35])
    with pytest.raises(ValueError, match=r"entry 1 is cut \(32 bytes announced\)"):
        decode_bundle(data[:-1])
    assert decode_bundle(data[:34]) == [b"a" * 32]
    assert decode_bundle(encode_bundle([b""])) == [b""]
