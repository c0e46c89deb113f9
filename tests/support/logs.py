"""Sealed logs built in bulk and their leaves, and the tlog-tiles checks (``check_with_scales``),
for the log, tiles and serve tests."""

from __future__ import annotations

import os
from typing import Any

import pytest

from agentplane_journal import (
    Digest,
    NoteSigner,
    RunId,
    SqlJournalStore,
)
from agentplane_journal.tlog.merkle import raw_leaf


async def bulk_seal(store: SqlJournalStore, leaves: list[tuple[str, bytes, int, str]]) -> None:
    """Seal many runs at once through the log's own append (no records, no run mutex)."""
    for start in range(0, len(leaves), 2000):
        chunk = leaves[start : start + 2000]

        async def unit(session: Any, chunk: Any = chunk) -> None:
            await store._log.append(session, chunk)

        await store._unit(unit)


SEED = bytes(range(1, 33))


def _scales() -> object:
    try:
        from tlog_scales import backend, reader
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("CI must run the tlog-scales interop test (pip install -e '.[test]')")
        pytest.skip("tlog-scales is not installed (pip install tlog-scales)")
    return backend, reader


def sealed_leaves(n: int, salt: str = "") -> list[tuple[str, bytes, int, str]]:
    return [
        (str(RunId.generate()), bytes(Digest.of(f"{salt}{i}".encode())), 1_700_000_000, "ok")
        for i in range(n)
    ]


async def check_with_scales(
    location: str, store: SqlJournalStore, leaves: list[tuple[str, bytes, int, str]]
) -> None:
    """tlog-scales reads the log at ``location``: same root, entries, inclusion proofs."""
    backend, reader = _scales()  # type: ignore[misc]
    from tlog_scales import signing, tiles

    tr = reader.TilesReader(backend.make_backend(location))
    cp = tr.get_checkpoint()
    ours = await store.checkpoint()
    assert (cp.origin, cp.size) == (ours.origin, ours.size) == (store.origin, len(leaves))
    assert tr.calculate_root_hash() == bytes(ours.root)
    cp.verify(signing.Vkey.from_string(NoteSigner(store.origin, SEED).verifier_key))
    for index in sorted({0, 255, 256, 257, len(leaves) // 2, len(leaves) - 1}):
        run, head = leaves[index][0], leaves[index][1]
        assert tr.get_entry(index) == head
        proof = tr.get_inclusion_proof(index, cp.size)
        inc = await store.inclusion_proof(RunId.parse(run))
        assert inc is not None and inc.index == index
        assert proof.node_hashes == [bytes(p) for p in inc.proof]
        proof.check(tiles.leaf_hash(head), cp.root_hash)
        assert tiles.leaf_hash(head) == raw_leaf(head)
