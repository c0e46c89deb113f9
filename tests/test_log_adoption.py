"""Adopting logs sealed before the stored tree existed (revision 0002's data migration).

On both dialects, a database at revision 0001 holding two kinds of logs, written row by row
as their writers wrote them: ours (dense ``log_index`` 0, 1, 2... and a ``journal_counter``
row) and agentplane 0.4.0's (sparse positions from one global sequence, interleaved between
tenants: leaf order is ``log_index`` ascending). After ``upgrade`` the stored tree gives
exactly the pure ``merkle`` functions' roots and proofs, and sealing carries on from it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import pool, text
from sqlalchemy.ext.asyncio import create_async_engine

from agentplane_journal import (
    Digest,
    RunId,
    SqlJournalStore,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root,
)
from agentplane_journal.db.revision import HEAD_REVISION
from agentplane_journal.migrations.commands import current_revision, upgrade

from support.helpers import admitted
from support.migration_tools import alembic_ok, query

PREVIOUS = "0001_journal_schema"


@pytest.fixture
def empty_url(
    dialect: str, request: pytest.FixtureRequest, sqlite_database: Callable[..., str]
) -> str:
    if dialect == "sqlite":
        return sqlite_database(migrated=False)
    return request.getfixturevalue("pg_database")(migrated=False)


async def _insert_seals(url: str, rows: list[dict[str, Any]], counters: dict[str, int]) -> None:
    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.begin() as conn:
            for start in range(0, len(rows), 1000):
                await conn.execute(
                    text(
                        "INSERT INTO run_seal (tenant, run_id, chain_head, log_index, "
                        "sealed_at, outcome) VALUES (:tenant, :run_id, :chain_head, "
                        ":log_index, 1700000000, 'succeeded')"
                    ),
                    rows[start : start + 1000],
                )
            for name, value in counters.items():
                await conn.execute(
                    text("INSERT INTO journal_counter (name, value) VALUES (:n, :v)"),
                    {"n": name, "v": value},
                )
    finally:
        await engine.dispose()


def _seal(tenant: str, index: int, salt: str) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "run_id": str(RunId.generate()),
        "chain_head": bytes(Digest.of(f"{salt}/{index}".encode())),
        "log_index": index,
    }


@pytest.mark.slow
async def test_logs_sealed_before_the_stored_tree_are_adopted_with_the_same_roots(
    empty_url: str,
) -> None:
    await upgrade(empty_url, PREVIOUS)
    rng = random.Random(2)
    # ours: dense from 0, more than one page of the migration (5000 rows)
    ours = [_seal("ours", i, "ours") for i in range(5003)]
    # agentplane 0.4.0: one global sequence shared by two tenants, with rolled-back gaps
    sparse: dict[str, list[dict[str, Any]]] = {"acme": [], "other": []}
    position = 6
    for _ in range(70):
        position += rng.choice((1, 1, 2, 5))
        tenant = rng.choice(("acme", "acme", "other"))
        sparse[tenant].append(_seal(tenant, position, tenant))
    rows = ours + sparse["acme"] + sparse["other"]
    rng.shuffle(rows)  # the order rows were written in is not the log's order
    await _insert_seals(empty_url, rows, {"log_position/ours": 5002})
    assert sparse["acme"][0]["log_index"] > 6 and len(sparse["acme"]) > 30

    await upgrade(empty_url)
    assert await current_revision(empty_url) == HEAD_REVISION

    for tenant, seals in (("ours", ours), *sparse.items()):
        store = await SqlJournalStore.connect(empty_url, tenant=tenant)
        try:
            leaves = [leaf_hash(Digest(s["chain_head"])) for s in seals]
            cp = await store.checkpoint()
            assert (cp.size, cp.root) == (len(leaves), root(leaves)), tenant
            for m in {0, len(leaves) - 1, *(rng.randrange(len(leaves)) for _ in range(5))}:
                inc = await store.inclusion_proof(RunId.parse(seals[m]["run_id"]))
                assert inc is not None and (inc.index, inc.size) == (m, len(leaves))
                assert list(inc.proof) == inclusion_proof(leaves, m)
                assert inc.verify(cp.root)
            for m in {0, 1, len(leaves) // 3, len(leaves)}:
                assert await store.consistency_proof(m) == consistency_proof(leaves, m)

            # sealing continues the adopted log: the next dense position, same tree
            run = RunId.generate()
            lease = await store.acquire(run, "w", 60)
            await store.append(lease.epoch, [admitted(run)])
            head = await store.seal(run, lease.epoch, "succeeded")
            leaves.append(leaf_hash(head))
            new = await store.checkpoint()
            assert (new.size, new.root) == (len(leaves), root(leaves))
            inc = await store.inclusion_proof(run)
            assert inc is not None and inc.index == len(leaves) - 1 and inc.verify(new.root)
            assert await store.consistency_proof(cp.size) == consistency_proof(leaves, cp.size)
        finally:
            await store.close()


@pytest.mark.slow
async def test_downgrading_to_the_previous_revision_drops_only_the_stored_tree(
    empty_url: str,
) -> None:
    await upgrade(empty_url)
    store = await SqlJournalStore.connect(empty_url)
    try:
        run = RunId.generate()
        await store.append(1, [admitted(run)])
        head = await store.seal(run, 1, "succeeded")
    finally:
        await store.close()
    alembic_ok("downgrade", PREVIOUS, url=empty_url)
    assert await query(empty_url, "SELECT count(*) FROM run_seal") == [(1,)]
    alembic_ok("upgrade", "head", url=empty_url)  # and the tree is rebuilt from the seals
    store = await SqlJournalStore.connect(empty_url)
    try:
        assert (await store.checkpoint()).root == root([leaf_hash(head)])
    finally:
        await store.close()
