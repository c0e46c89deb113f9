"""Compatibility with agentplane 0.22.0's PostgreSQL schema, and adopting a 0.22.0 database.

As ``test_schema_compat.py`` does for 0.4.0: the DDL is read from the reference source
(``../shared/reference/agentplane-0.22.0/src_store_postgres.rs.txt``, its ``SCHEMA``
constant) and run as agentplane runs it on connect; a fresh clone, without ``../shared``,
uses the committed catalog of a database that DDL made
(``tests/data/agentplane-0.22.0-catalog.json``), and the checks that need the DDL text skip
(and fail under ``CI``). Then:

(a) a database made by that DDL and one made by our migrations agree on every 0.22.0 table,
    column, key, index, predicate, sequence and CHECK constraint, names included, except
    two CHECK floors: ours are ``journal.epoch >= 0`` and ``run_seal.log_index >= 0``
    (0.22.0: ``>= 1``), because this store writes epoch-0 appends and each tenant's log
    from 0; everything else we add is additional tables;
(b) running 0.22.0's DDL on our migrated database (rows at epoch 0 and log position 0
    included) changes nothing, not even a relation's oid or file, and fails on nothing;
(c) a database 0.22.0 created and wrote to (its SQL and its sequences: sparse log
    positions, a released lease, an admission key, a parked push) is adopted by
    ``upgrade`` (``_refuse_collisions`` takes its tables as ours) without changing a row or
    rewriting a relation; its two stricter CHECKs are replaced by ours under the same
    names, so the store then works on it (an epoch-0 append, a new tenant's first seal at
    position 0) and ``alembic check`` is clean; downgrading to ``0003_contract_0_22``
    removes every CHECK and keeps every row, and upgrading again restores them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg
import pytest

from agentplane_journal import (
    Append,
    Ed25519Signer,
    Ed25519Verifier,
    Record,
    RunId,
    SqlJournalStore,
    leaf_hash,
    root,
)
from agentplane_journal.db.models import COLUMN_FLOORS, VERSION_TABLE, metadata
from agentplane_journal.db.revision import HEAD_REVISION
from agentplane_journal.migrations.commands import current_revision, upgrade

from support.admissions import admitted_under
from support.agentplane040 import Agentplane040, dsn040
from support.helpers import admitted, concluded, note
from support.migration_tools import alembic_ok, catalog, execute, only_tables, query, table_contents
from support.reference import load_catalog_022, reference_dir, schema_022

pytestmark = pytest.mark.postgres

TABLES_022 = {
    "journal",
    "run_activity",
    "run_lease",
    "run_seal",
    "run_outcome",
    "run_admission",
    "run_cancel",
    "push_delivery",
}
SEQUENCES_022 = {"run_log_position", "run_conclusion_ordinal"}
#: 0.22.0's two CHECKs that are stricter than ours: name -> (theirs, ours).
STRICTER = {
    "journal_epoch_check": ("CHECK ((epoch >= 1))", "CHECK ((epoch >= 0))"),
    "run_seal_log_index_check": ("CHECK ((log_index >= 1))", "CHECK ((log_index >= 0))"),
}


async def run_022_ddl(url: str) -> None:
    """Apply 0.22.0's schema the way its store does on connect: one simple-query batch."""
    conn = await asyncpg.connect(dsn040(url))
    try:
        await conn.execute(schema_022())
    finally:
        await conn.close()


async def make_022_database(url: str) -> None:
    """An empty database with 0.22.0's schema: by its DDL when the source is beside us.

    Without it (a fresh clone): our head less what we add, with 0.22.0's two stricter
    floors, checked to be catalog-identical to the committed snapshot of its DDL's database.
    """
    if reference_dir("agentplane-0.22.0/src_store_postgres.rs.txt") is not None:
        await run_022_ddl(url)
        return
    await upgrade(url)
    ours = sorted(set(metadata.tables) - TABLES_022)
    await execute(
        url,
        *(f"DROP TABLE {t}" for t in [*ours, VERSION_TABLE]),
        # 0007's append functions: 0.22.0's DDL has none
        "DROP FUNCTION agentplane_journal_append_one, agentplane_journal_append_many",
        "ALTER TABLE journal DROP CONSTRAINT journal_epoch_check, "
        "ADD CONSTRAINT journal_epoch_check CHECK (epoch >= 1)",
        "ALTER TABLE run_seal DROP CONSTRAINT run_seal_log_index_check, "
        "ADD CONSTRAINT run_seal_log_index_check CHECK (log_index >= 1)",
    )
    assert await catalog(url) == load_catalog_022()


def test_the_022_reference_schema_is_found_and_parsed() -> None:  # needs ../shared
    ddl = schema_022()
    for table in TABLES_022:
        assert f"CREATE TABLE IF NOT EXISTS {table} (" in ddl
    for sequence in SEQUENCES_022:
        assert f"CREATE SEQUENCE IF NOT EXISTS {sequence};" in ddl
    assert ddl.rstrip().endswith("WHERE NOT parked;")
    # Its thirteen inline CHECKs: our floors, but for the two stricter ones.
    found = [line for line in ddl.split("\n") if " CHECK (" in line]
    assert len(found) == 13
    for table, floors in COLUMN_FLOORS.items():
        for column, floor in floors.items():
            theirs = 1 if f"{table}_{column}_check" in STRICTER else floor
            assert any(
                line.split()[0] == column and f"CHECK ({column} >= {theirs})" in line
                for line in found
            ), (table, column)


async def test_the_committed_022_catalog_is_what_022s_ddl_creates(  # needs ../shared
    new_pg: Callable[..., Any],
) -> None:
    theirs = await new_pg()
    await run_022_ddl(theirs)
    assert await catalog(theirs) == load_catalog_022()


# -- (a) the same schema -------------------------------------------------------------------


async def test_our_schema_is_022s_table_for_table_but_for_two_floors(
    new_pg: Callable[..., Any],
) -> None:
    ours = await new_pg()
    await upgrade(ours)
    cat_022 = load_catalog_022()  # no source needed
    cat_ours = await catalog(ours)

    assert {t for t, _ in cat_022["tables"]} == TABLES_022
    checks_022 = {r[1]: r[3] for r in cat_022["constraints"] if r[2] == "c"}
    assert len(checks_022) == 13  # the comparison below is not vacuous

    mine = only_tables(cat_ours, TABLES_022, SEQUENCES_022)
    for name, (theirs, ours_def) in STRICTER.items():
        assert checks_022[name] == theirs
        [row] = [r for r in mine["constraints"] if r[1] == name]
        assert row[3] == ours_def
        mine["constraints"][mine["constraints"].index(row)] = (*row[:3], theirs)
    for section, rows in only_tables(cat_022, TABLES_022, SEQUENCES_022).items():
        assert mine[section] == rows, section
    assert {t for t, _ in cat_ours["tables"]} - TABLES_022 == {
        "journal_counter",
        "log_tree",
        "journal_profile",
        "log_cosignature",
        VERSION_TABLE,
    }


# -- (b) 0.22.0's DDL on our database -------------------------------------------------------


async def test_running_022_ddl_on_our_migrated_database_changes_nothing_and_fails_on_nothing(
    new_pg: Callable[..., Any],
) -> None:  # needs ../shared
    schema_022()  # skips (fails under CI) before any work when the source is absent
    url = await new_pg(migrated=True)
    store = await SqlJournalStore.connect(url, tenant="acme")
    try:
        run = RunId.generate()
        await store.append(0, [admitted(run), concluded(run, "succeeded")])  # epoch 0
        await store.seal(run, 0, "succeeded")  # log position 0
        leased = RunId.generate()
        lease = await store.acquire(leased, "w", 60)
        await store.append(lease.epoch, [admitted(leased)])
    finally:
        await store.close()

    tables = set(metadata.tables)
    before = await catalog(url, identity=True), await table_contents(url, tables)
    await run_022_ddl(url)  # raises on any failure
    await run_022_ddl(url)  # and again: a second instance starting up
    assert (await catalog(url, identity=True), await table_contents(url, tables)) == before
    assert await current_revision(url) == HEAD_REVISION


# -- (c) adopting a 0.22.0 database -------------------------------------------------------


class Agentplane022(Agentplane040):
    """Writes rows the way agentplane 0.22.0's ``PostgresStore`` does: its guarded acquire,
    its admission claim, its park; the rest (append, release, seal) is 0.4.0's SQL, which
    0.22.0 kept."""

    async def claim(self, run: RunId, owner: str, ttl: int) -> int | None:
        now = int(time.time())
        return await self.conn.fetchval(
            "INSERT INTO run_lease (tenant, run_id, owner, epoch, expires_at) "
            "VALUES ($1, $2, $3, 1, $4) ON CONFLICT (tenant, run_id) DO UPDATE SET "
            "owner = EXCLUDED.owner, epoch = run_lease.epoch + 1, "
            "expires_at = EXCLUDED.expires_at WHERE run_lease.expires_at <= $5 "
            "RETURNING epoch",
            self.tenant,
            str(run),
            owner,
            now + ttl,
            now,
        )

    async def append(
        self, epoch: int, batch: Sequence[Append], signer: Ed25519Signer | None = None
    ) -> list[Record]:
        records = await super().append(epoch, batch, signer)
        for item in batch:
            key = item.payload.get("idempotency_key") if item.kind == "RunAdmitted" else None
            if key is not None:
                await self.conn.execute(
                    "INSERT INTO run_admission (tenant, key, run_id, admitted_at) "
                    "VALUES ($1, $2, $3, $4) ON CONFLICT (tenant, key) DO NOTHING",
                    self.tenant,
                    key,
                    str(item.run),
                    int(time.time()),
                )
        return records

    async def park(self, task: str, id: str, error: str) -> None:
        await self.conn.execute(
            "UPDATE push_delivery SET attempts = LEAST(attempts + 1, 2147483647), "
            "last_error = $4, parked = TRUE "
            "WHERE tenant = $1 AND task_id = $2 AND config_id = $3",
            self.tenant,
            task,
            id,
            error,
        )


async def test_adopting_a_022_database_keeps_every_row_and_the_store_works_on_them(
    new_pg: Callable[..., Any],
) -> None:
    url, fresh = await new_pg(), await new_pg()
    await make_022_database(url)
    await upgrade(fresh)

    # -- agentplane 0.22.0 at work ------------------------------------------------------
    signer = Ed25519Signer("plane-key-1", bytes(range(32)))
    run_a, run_b, run_x = (RunId.generate() for _ in range(3))
    conn = await asyncpg.connect(dsn040(url))
    try:
        acme, other = Agentplane022(conn, "acme"), Agentplane022(conn, "other")
        # run A: admitted under a key, concluded, released, sealed at position 3
        assert await acme.claim(run_a, "worker-1", 60) == 1
        a_records = await acme.append(
            1, [admitted_under(run_a, "order-7"), concluded(run_a, "succeeded")], signer
        )
        await acme.release(run_a, 1)
        await acme.burn_log_positions(2)
        head_a = await acme.seal(run_a, "succeeded")
        # another tenant seals at 4
        assert await other.claim(run_x, "worker-9", 60) == 1
        await other.append(1, [admitted(run_x), concluded(run_x, "failed")])
        await other.seal(run_x, "failed")
        # run B: in flight under a live lease, with a stop request
        assert await acme.claim(run_b, "worker-2", 3600) == 1
        b_records = await acme.append(1, [admitted(run_b), note(run_b, "halfway")])
        assert await acme.claim(run_b, "worker-3", 60) is None  # held: refused, not renewed
        await acme.request_cancel(run_b, "ops@example", "customer asked to stop")
        # a push registration the receiver refused for good: parked, its cursor kept
        await conn.execute(
            "INSERT INTO push_delivery (tenant, task_id, config_id, url, next_seq, "
            "attempts, next_attempt_at, last_error) VALUES ('acme', $1, 'cfg-1', "
            "'https://hooks.example/a', 3, 0, 0, NULL)",
            str(run_b),
        )
        await acme.park(str(run_b), "cfg-1", "HTTP 410")
    finally:
        await conn.close()

    tables = TABLES_022
    rows_before = await table_contents(url, tables)
    assert rows_before["run_admission"][0][1:3] == ("order-7", str(run_a))
    assert [r[-1] for r in rows_before["push_delivery"]] == [True]
    sequences = "SELECT sequencename, last_value FROM pg_sequences ORDER BY 1"
    sequences_before = await query(url, sequences)
    relations_before = (await catalog(url, identity=True))["relations"]

    # -- adoption ----------------------------------------------------------------------
    await upgrade(url)
    assert await current_revision(url) == HEAD_REVISION
    assert await table_contents(url, tables) == rows_before
    assert await query(url, sequences) == sequences_before
    assert await catalog(url) == await catalog(fresh)  # its two stricter floors are ours now
    after = await catalog(url, identity=True)
    assert set(relations_before) <= set(after["relations"])  # no relation rebuilt
    assert "No new upgrade operations detected" in alembic_ok("check", url=url)

    # -- the store on the adopted rows -------------------------------------------------
    store = await SqlJournalStore.connect(url, tenant="acme")
    try:
        assert await store.read(run_a) == a_records
        verifier = Ed25519Verifier().trust("plane-key-1", signer.public_key)
        assert await store.verify(run_a, verifier, require_signature=True) == head_a
        assert await store.verify(run_b) == b_records[-1].hash
        old = await store.checkpoint()
        assert old.size == 1 and old.root == root([leaf_hash(head_a)])
        # The unsealed run continues under its live lease, and seals after 0.22.0's seal.
        more = await store.append(1, [concluded(run_b, "succeeded")])
        head_b = await store.seal(run_b, 1, "succeeded")
        assert head_b == more[-1].hash
        assert (await store.checkpoint()).size == 2
        # What 0.22.0's floors refused and ours allow: an epoch-0 append, and a new
        # tenant's first seal at log position 0.
        loose = RunId.generate()
        first = store.for_tenant("fresh")
        await first.append(0, [admitted(loose), concluded(loose, "succeeded")])
        await first.seal(loose, 0, "succeeded")
        inclusion = await first.inclusion_proof(loose)
        assert inclusion is not None and inclusion.index == 0
        assert await store.audit_bounds() == []
        assert await first.audit_bounds() == []
        # 0.22.0's admission key, as our store reads and audits it.
        assert await store.admitted_as("order-7") == run_a
        assert (await store.audit_admissions()).ok
    finally:
        await store.close()
    positions = await query(url, "SELECT tenant, log_index FROM run_seal ORDER BY 1, 2")
    assert positions == [("acme", 3), ("acme", 4), ("fresh", 0), ("other", 4)]

    # -- down to 0003 and up again -------------------------------------------------------
    rows = await table_contents(url, tables)
    alembic_ok("downgrade", "0003_contract_0_22", url=url)
    assert await current_revision(url) == "0003_contract_0_22"
    assert not [r for r in (await catalog(url))["constraints"] if r[2] == "c"]
    assert await table_contents(url, tables) == rows
    await upgrade(url)
    assert await catalog(url) == await catalog(fresh)
    assert await table_contents(url, tables) == rows
