"""The stored Merkle tree, on both dialects: every answer equals the pure ``merkle`` functions'.

The tree is built through the very code a seal runs (``TenantLog.append``), in bulk, so logs
of thousands of leaves take seconds; the proofs are then asked through the same statements
``checkpoint()``, ``inclusion_proof()`` and ``consistency_proof()`` run. The pure tree
arithmetic is checked exhaustively against ``merkle`` in ``test_tree.py``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from agentplane_journal import (
    CorruptLogError,
    Digest,
    RunId,
    SqlJournalStore,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root,
)
from agentplane_journal.tlog.merkle import EMPTY_ROOT

from support.helpers import admitted
from support.logs import bulk_seal


def heads(n: int, salt: int = 0) -> list[bytes]:
    return [bytes(Digest.of(f"{salt}/{i}".encode())) for i in range(n)]


def sealed(batch: list[bytes], at: int = 1_700_000_000) -> list[tuple[str, bytes, int, str]]:
    return [(str(RunId.generate()), head, at, "succeeded") for head in batch]


async def in_one_unit(store: SqlJournalStore, fn: Callable[[Any], Any]) -> Any:
    """Run ``fn(session)`` in one of the store's units of work (committed)."""
    return await store._unit(fn)


def _sample(n: int, rng: random.Random) -> list[int]:
    """Positions 0..n to ask about at size n: the edges and a random one."""
    return sorted({0, 1, n - 1, n, rng.randrange(n + 1)} & set(range(n + 1)))


#: Sizes at which every inclusion and every consistency proof is asked (at the others, a
#: sample): all the small trees, and both sides of the first few powers of two.
EVERY = {*range(1, 33), 63, 64, 65, 127, 128, 129, 255, 256, 257, 300}


@pytest.mark.slow
async def test_every_log_size_up_to_300_answers_as_the_pure_functions(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    rng = random.Random(300)
    leaves: list[Digest] = []
    runs: list[str] = []
    assert (await store.checkpoint()).root == EMPTY_ROOT

    async def grow_and_check(session: Any) -> int:
        checked = 0
        log = store._log
        for n, head in enumerate(heads(300), start=1):
            (item,) = sealed([head])
            await log.append(session, [item])
            runs.append(item[0])
            leaves.append(leaf_hash(Digest(head)))
            cp = await log.checkpoint(session)
            assert (cp.size, cp.root) == (n, root(leaves)), n
            every = n in EVERY
            for m in range(n) if every else _sample(n - 1, rng):
                inc = await log.inclusion_proof(session, RunId.parse(runs[m]))
                assert (inc.index, inc.size, inc.seal) == (m, n, Digest(heads(300)[m]))
                assert list(inc.proof) == inclusion_proof(leaves, m), (n, m)
                checked += 1
            for m in range(n + 1) if every else _sample(n, rng):
                proof = await log.consistency_proof(session, m)
                assert proof == consistency_proof(leaves, m), (n, m)
                checked += 1
        return checked

    assert await in_one_unit(store, grow_and_check) > 5_000
    # and through the public methods, each its own transaction
    cp = await store.checkpoint()
    assert (cp.size, cp.root) == (300, root(leaves))
    inc = await store.inclusion_proof(RunId.parse(runs[200]))
    assert inc is not None and inc.verify(cp.root)
    assert await store.consistency_proof(255) == consistency_proof(leaves, 255)


@pytest.mark.slow
async def test_a_sample_of_logs_up_to_10000_answers_as_the_pure_functions(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    rng = random.Random(10_000)
    items = sealed(heads(10_000, salt=1))
    leaves = [leaf_hash(Digest(h)) for _, h, _, _ in items]
    at = 0
    for size in (1000, 4095, 4096, 4097, 8191, 8192, 8193, 10_000):
        await bulk_seal(store, items[at:size])
        at = size
        prefix = leaves[:size]
        cp = await store.checkpoint()
        assert (cp.size, cp.root) == (size, root(prefix)), size
        for m in {0, size - 1, *(rng.randrange(size) for _ in range(6))}:
            inc = await store.inclusion_proof(RunId.parse(items[m][0]))
            assert inc is not None and (inc.index, inc.size) == (m, size)
            assert list(inc.proof) == inclusion_proof(prefix, m), (size, m)
        for m in {0, 1, size - 1, size, *(rng.randrange(size + 1) for _ in range(6))}:
            assert await store.consistency_proof(m) == consistency_proof(prefix, m), (size, m)


async def test_a_seal_stores_the_leaf_and_the_subtrees_it_completes(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    await bulk_seal(store, sealed(heads(7)))  # leaves 0..6; leaf 7 completes 3 subtrees
    run = RunId.generate()
    lease = await store.acquire(run, "w", 60)
    await store.append(lease.epoch, [admitted(run)])
    head = await store.seal(run, lease.epoch, "succeeded")
    rows = await _tree_rows(store)
    mine = sorted((lvl, idx) for lvl, idx, _, rid in rows if idx == 7 >> lvl and lvl <= 3)
    assert mine == [(0, 7), (1, 3), (2, 1), (3, 0)]
    assert len(rows) == 8 + 4 + 2 + 1
    leaf_row = next(r for r in rows if r[0] == 0 and r[1] == 7)
    assert (leaf_row[2], leaf_row[3]) == (bytes(leaf_hash(head)), str(run))
    # a re-seal adds nothing
    assert await store.seal(run, lease.epoch, "succeeded") == head
    assert len(await _tree_rows(store)) == 15


async def _tree_rows(store: SqlJournalStore) -> list[tuple[int, int, bytes, str | None]]:
    async def unit(session: Any) -> list[tuple[int, int, bytes, str | None]]:
        result = await session.execute(
            text("SELECT level, idx, hash, run_id FROM log_tree WHERE tenant = :t"),
            {"t": store.tenant},
        )
        return [(int(a), int(b), bytes(c), d) for a, b, c, d in result]

    return await store._unit(unit)


async def _tamper(store: SqlJournalStore, sql: str, **params: Any) -> None:
    async def unit(session: Any) -> None:
        await session.execute(text(sql), {"t": store.tenant, **params})

    await store._unit(unit)


async def test_a_tampered_leaf_row_is_refused_by_its_inclusion_proof(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    items = sealed(heads(5))
    await bulk_seal(store, items)
    await _tamper(
        store,
        "UPDATE log_tree SET hash = :h WHERE tenant = :t AND level = 0 AND idx = 3",
        h=bytes(32),
    )
    with pytest.raises(CorruptLogError) as caught:
        await store.inclusion_proof(RunId.parse(items[3][0]))
    assert caught.value.position == 3
    await _tamper(
        store,
        "UPDATE log_tree SET hash = :h WHERE tenant = :t AND level = 2 AND idx = 0",
        h=b"short",
    )
    with pytest.raises(CorruptLogError) as caught:
        await store.checkpoint()
    assert caught.value.position == 0 and "5 bytes" in str(caught.value)
    await _tamper(store, "DELETE FROM log_tree WHERE tenant = :t AND level = 2")
    with pytest.raises(CorruptLogError, match="lacks node"):
        await store.checkpoint()


@pytest.mark.slow
async def test_audit_names_the_first_position_where_the_stored_tree_lies_and_reindex_repairs(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    items = sealed(heads(5000, salt=2))  # more than one audit page (4096 leaves)
    await bulk_seal(store, items)
    leaves = [leaf_hash(Digest(h)) for _, h, _, _ in items]
    good = await store.checkpoint()
    assert good.root == root(leaves)
    seen: list[tuple[int, int]] = []
    audit = await store.audit_log(lambda done, total: seen.append((done, total)))
    assert audit.ok and audit.size == 5000 and seen[-1] == (5000, 5000) and len(seen) == 2
    rows = await store.reindex_log()
    assert rows.ok and rows.repaired == 0

    cases = [
        ("UPDATE log_tree SET hash = :h WHERE tenant = :t AND level = 0 AND idx = 4500", 4500),
        ("UPDATE log_tree SET hash = :h WHERE tenant = :t AND level = 3 AND idx = 100", 800),
        ("DELETE FROM log_tree WHERE tenant = :t AND level = 5 AND idx = 140", 140 * 32),
        ("UPDATE log_tree SET run_id = NULL WHERE tenant = :t AND level = 0 AND idx = 4097", 4097),
        (
            "INSERT INTO log_tree (tenant, level, idx, hash) VALUES (:t, 2, 1250, :h)",
            5000,
        ),
        ("DELETE FROM log_tree WHERE tenant = :t AND level = 0 AND idx = 4999", 4999),
        (
            "INSERT INTO run_seal (tenant, run_id, chain_head, log_index, sealed_at, outcome) "
            "VALUES (:t, :r, :h, 100000, 0, 'x')",
            5000,
        ),
    ]
    for sql, position in cases:
        extra = RunId.generate()
        await _tamper(store, sql, h=bytes(32), r=str(extra))
        audit = await store.audit_log()
        assert (audit.ok, audit.first_bad) == (False, position), (sql, audit)
        repaired = await store.reindex_log()
        assert repaired.first_bad == position and repaired.repaired >= 1, (sql, repaired)
        assert (await store.audit_log()).ok, sql
        if "run_seal" in sql:  # a seal the tree missed is in the log now
            leaves.append(leaf_hash(Digest(bytes(32))))
            inc = await store.inclusion_proof(extra)
            assert inc is not None and inc.index == 5000
        cp = await store.checkpoint()
        assert (cp.size, cp.root) == (len(leaves), root(leaves)), sql
        # and the log goes on: a seal after the repair lands at the next position
    run = RunId.generate()
    lease = await store.acquire(run, "w", 60)
    await store.append(lease.epoch, [admitted(run)])
    leaves.append(leaf_hash(await store.seal(run, lease.epoch, "succeeded")))
    assert (await store.checkpoint()).root == root(leaves)
    assert (await store.audit_log()).ok
