"""Compatibility with agentplane 0.4.0's PostgreSQL schema, and adopting a 0.4.0 database.

The 0.4.0 DDL is not copied here: it is read from the reference source
(``../shared/reference/seed-postgres-store-0.4.0.rs.txt``, its ``SCHEMA`` constant) and run
as agentplane runs it on connect. A fresh clone has no ``../shared``: the repository carries
the catalog of a database that DDL created (``tests/data/agentplane-0.4.0-catalog.json``,
see ``reference.py``), so (a) and (c) run anyway, on a database built to that very catalog;
the checks that need the DDL text itself skip there (and fail under ``CI``). Then:

(a) a database made by that DDL and one made by our migrations agree on every 0.4.0 table,
    column (type, nullability, default), key, constraint, index (columns, uniqueness,
    predicate) and sequence, read back from PostgreSQL's catalogs;
(b) running the 0.4.0 DDL on our migrated database changes nothing (not even a relation's
    oid or file) and fails on nothing;
(c) a database agentplane 0.4.0 created and wrote to (rows written with its SQL and its
    sequences: sparse log positions, sequence ordinals, a released lease, a cancellation,
    push registrations) is adopted by the documented upgrade without changing a row, and the
    store then works on those rows: reads and verifies them, continues an unsealed run's
    chain, seals into the existing log so that old proofs and old checkpoints still verify.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest

from agentplane_journal import (
    Cancellation,
    CaseId,
    DuplicateEffectError,
    Ed25519Signer,
    Ed25519Verifier,
    LeaseHeldError,
    RunId,
    RunSealedError,
    SqlJournalStore,
    leaf_hash,
    root,
    verify_consistency,
)
from agentplane_journal.db.models import COLUMN_FLOORS, VERSION_TABLE
from agentplane_journal.db.revision import HEAD_REVISION
from agentplane_journal.migrations.commands import current_revision, upgrade

from support.agentplane040 import Agentplane040, dsn040
from support.helpers import admitted, concluded, key, note, started
from support.migration_tools import (
    alembic_ok,
    catalog,
    execute,
    only_tables,
    query,
    table_contents,
    table_names,
)
from support.reference import load_catalog_040, reference_dir, schema_040

pytestmark = pytest.mark.postgres

TABLES_040 = {
    "journal",
    "run_activity",
    "run_lease",
    "run_seal",
    "run_outcome",
    "run_cancel",
    "push_delivery",
}
SEQUENCES_040 = {"run_log_position", "run_conclusion_ordinal"}


async def run_040_ddl(url: str) -> None:
    """Apply 0.4.0's schema the way its store does on connect: one simple-query batch."""
    conn = await asyncpg.connect(dsn040(url))
    try:
        await conn.execute(schema_040())
    finally:
        await conn.close()


async def make_040_database(url: str) -> None:
    """An empty database with 0.4.0's schema: by its DDL when the source is beside us.

    Without it (a fresh clone), our own first revision minus what it adds, checked to be
    catalog-identical (tables, columns, defaults, keys, indexes and predicates, sequences)
    to the committed snapshot of a database 0.4.0's DDL made.
    """
    if reference_dir() is not None:
        await run_040_ddl(url)
        return
    # The first revision only: the later ones change 0.4.0's tables (0003, 0004).
    await upgrade(url, "0001_journal_schema")
    await execute(url, "DROP TABLE journal_counter", f"DROP TABLE {VERSION_TABLE}")
    assert await catalog(url) == load_catalog_040()


def _journal_cli(*args: str) -> str:
    """``agentplane-journal ARGS`` (as ``python -m agentplane_journal``); stdout."""
    result = subprocess.run(
        [sys.executable, "-m", "agentplane_journal", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return result.stdout


def test_the_reference_schema_is_found_and_parsed() -> None:  # needs ../shared
    ddl = schema_040()
    assert ddl.lstrip().startswith("CREATE TABLE IF NOT EXISTS journal (")
    assert ddl.rstrip().endswith("ON push_delivery (tenant, next_attempt_at, task_id, config_id);")
    for table in TABLES_040:
        assert f"CREATE TABLE IF NOT EXISTS {table} (" in ddl
    for sequence in SEQUENCES_040:
        assert f"CREATE SEQUENCE IF NOT EXISTS {sequence};" in ddl


# -- (a) the same schema ---------------------------------------------------------------


async def test_the_committed_040_catalog_is_what_040s_ddl_creates(  # needs ../shared
    new_pg: Callable[..., Any],
) -> None:
    theirs = await new_pg()
    await run_040_ddl(theirs)
    assert await catalog(theirs) == load_catalog_040()


async def test_every_040_table_column_key_index_and_sequence_is_identical_after_our_upgrade(
    new_pg: Callable[..., Any],
) -> None:
    ours = await new_pg()
    await upgrade(ours)

    cat_040 = load_catalog_040()  # 0.4.0's DDL, as its catalog (no source needed)
    cat_ours = await catalog(ours)

    # The reference is what we think it is (so the comparison below is not vacuous).
    assert {t for t, _ in cat_040["tables"]} == TABLES_040
    assert {s[0] for s in cat_040["sequences"]} == SEQUENCES_040
    assert len(cat_040["columns"]) == 12 + 3 + 5 + 6 + 4 + 5 + 11
    assert {i[1] for i in cat_040["indexes"]} == {
        *(f"{t}_pkey" for t in TABLES_040),
        "run_seal_tenant_log_index_key",
        "journal_by_case",
        "journal_effect_started",
        "run_activity_recent",
        "run_outcome_by_outcome",
        "push_delivery_due",
    }

    # Identical, field by field: names, types, nullability, defaults, keys, index columns,
    # orderings, uniqueness and predicates, sequence definitions; except what agentplane
    # 0.22.0 itself changed in these tables (revision 0003), stated here one by one.
    mine = only_tables(cat_ours, TABLES_040, SEQUENCES_040)
    changed = {r[0:2] for r in mine["columns"]} - {r[0:2] for r in cat_040["columns"]}
    assert changed == {("push_delivery", 12)}
    [parked] = [r for r in mine["columns"] if r[0:2] == ("push_delivery", 12)]
    assert parked[2:6] == ("parked", "boolean", "NO", "false")
    mine["columns"].remove(parked)
    indexes = {r[1]: r for r in mine["indexes"]}
    assert indexes["run_lease_abandoned"][6] == "(owner <> ''::text)"
    assert indexes["push_delivery_due"][6] == "(NOT parked)"
    due_040 = next(r for r in cat_040["indexes"] if r[1] == "push_delivery_due")
    assert indexes["push_delivery_due"][:6] == due_040[:6]
    mine["indexes"] = [r for r in mine["indexes"] if r[1] not in TOUCHED_BY_022]
    # Revision 0004: a CHECK on every counter and instant (0.4.0 declared none), named as
    # 0.22.0's inline ones are; two floors are lower than 0.22.0's (see 0004_checks).
    checks = {r[1]: r[3] for r in mine["constraints"] if r[2] == "c"}
    assert checks == {
        f"{table}_{column}_check": f"CHECK (({column} >= {floor}))"
        for table, floors in COLUMN_FLOORS.items()
        if table in TABLES_040
        for column, floor in floors.items()
    }
    assert not [r for r in cat_040["constraints"] if r[2] == "c"]
    mine["constraints"] = [r for r in mine["constraints"] if r[2] != "c"]
    for section, rows in only_tables(cat_040, TABLES_040, SEQUENCES_040).items():
        if section == "indexes":
            rows = [r for r in rows if r[1] not in TOUCHED_BY_022]
        assert mine[section] == rows, section

    # What we add otherwise is additional tables.
    assert {t for t, _ in cat_ours["tables"]} - TABLES_040 == {
        "journal_counter",
        "log_tree",
        "run_admission",
        "journal_profile",
        "log_cosignature",
        VERSION_TABLE,
    }
    assert {s[0] for s in cat_ours["sequences"]} == SEQUENCES_040


# -- (b) 0.4.0's DDL on our database ---------------------------------------------------


async def test_running_040_ddl_on_our_migrated_database_changes_nothing_and_fails_on_nothing(
    new_pg: Callable[..., Any],
) -> None:  # needs ../shared
    schema_040()  # skips (fails under CI) before any work when the source is absent
    url = await new_pg(migrated=True)
    # Some rows, so "nothing changed" covers data and sequence positions too.
    store = await SqlJournalStore.connect(url, tenant="acme")
    try:
        run = RunId.generate()
        lease = await store.acquire(run, "w", 60)
        await store.append(lease.epoch, [admitted(run), concluded(run, "succeeded")])
        await store.seal(run, lease.epoch, "succeeded")
    finally:
        await store.close()

    tables = await table_names(url)
    before = await catalog(url, identity=True), await table_contents(url, tables)

    await run_040_ddl(url)  # raises on any failure
    await run_040_ddl(url)  # and again: a second instance starting up

    assert (await catalog(url, identity=True), await table_contents(url, tables)) == before
    assert await current_revision(url) == HEAD_REVISION
    store = await SqlJournalStore.connect(url, tenant="acme")
    try:
        assert (await store.checkpoint()).size == 1
    finally:
        await store.close()


# -- (c) adopting a 0.4.0 database -----------------------------------------------------


async def test_adopting_an_empty_040_database_with_alembic_cli_yields_exactly_our_schema(
    new_pg: Callable[..., Any],
) -> None:
    adopted, fresh = await new_pg(), await new_pg()
    await make_040_database(adopted)
    await upgrade(fresh)
    before = await catalog(adopted, identity=True)

    alembic_ok("upgrade", "head", url=adopted)

    assert await current_revision(adopted) == HEAD_REVISION
    assert await catalog(adopted) == await catalog(fresh)
    # The 0.4.0 relations are the very same ones (adopted, not dropped and recreated).
    after = await catalog(adopted, identity=True)
    # (push_delivery_due is rebuilt with 0.22.0's predicate, so it is a new relation.)
    old_relations = {r for r in before["relations"] if r[0] != "push_delivery_due"}
    assert old_relations <= set(after["relations"])
    assert "No new upgrade operations detected" in alembic_ok("check", url=adopted)


#: Indexes of 0.4.0's tables that revision 0003 adds or changes (agentplane 0.22.0's).
TOUCHED_BY_022 = frozenset({"push_delivery_due", "run_lease_abandoned"})


@pytest.mark.parametrize("how", ["migrate.upgrade", "agentplane-journal upgrade"])
async def test_adopting_a_040_database_keeps_every_row_and_the_store_works_on_them(
    how: str, new_pg: Callable[..., Any]
) -> None:
    url = await new_pg()
    await make_040_database(url)

    # -- agentplane 0.4.0 at work ------------------------------------------------------
    signer = Ed25519Signer("plane-key-1", bytes(range(32)))
    case = CaseId.generate()
    run_a, run_b, run_c, run_x = (RunId.generate() for _ in range(4))
    conn = await asyncpg.connect(dsn040(url))
    try:
        acme, other = Agentplane040(conn, "acme"), Agentplane040(conn, "other")
        # run A: signed, with a case and an effect; concluded, released, sealed at 7.
        await acme.acquire(run_a, "worker-1", 1, 60)
        a_records = await acme.append(
            1,
            [admitted(run_a, case), started(run_a, key(1)), note(run_a, "done")],
            signer,
        )
        a_records += await acme.append(1, [concluded(run_a, "succeeded")], signer)
        await acme.release(run_a, 1)
        await acme.burn_log_positions(6)
        head_a = await acme.seal(run_a, "succeeded")
        # another tenant seals at 9 (its own log; acme's log just sees a gap)
        await other.acquire(run_x, "worker-9", 1, 60)
        await other.append(1, [admitted(run_x), concluded(run_x, "failed")])
        await other.burn_log_positions(1)
        await other.seal(run_x, "failed")
        # run B: unsigned, failed, sealed at 12
        await acme.acquire(run_b, "worker-2", 1, 60)
        await acme.append(1, [admitted(run_b), concluded(run_b, "failed")])
        await acme.burn_log_positions(2)
        head_b = await acme.seal(run_b, "failed")
        # run C: in flight, taken over once (epoch 2, live), with a pending effect and a
        # stop request from an operator
        await acme.acquire(run_c, "worker-1", 1, 60)
        await acme.append(1, [admitted(run_c, case)])
        await acme.acquire(run_c, "worker-3", 2, 3600)
        c_records = await acme.append(2, [started(run_c, key(1)), note(run_c, "halfway")])
        await acme.request_cancel(run_c, "ops@example", "customer asked to stop")
        # push registrations: one mid-retry, one using the column defaults
        await conn.execute(
            "INSERT INTO push_delivery (tenant, task_id, config_id, url, token, auth_scheme, "
            "auth_credentials, next_seq, attempts, next_attempt_at, last_error) "
            "VALUES ('acme', 'task-1', 'cfg-1', 'https://hooks.example/a', 'tok', 'Bearer', "
            "'secret-cred', 3, 2, 1700000000, 'HTTP 503')"
        )
        await conn.execute(
            "INSERT INTO push_delivery (tenant, task_id, config_id, url, next_seq) "
            "VALUES ('acme', 'task-2', 'cfg-1', 'https://hooks.example/b', 1)"
        )
        positions = await conn.fetch(
            "SELECT tenant, run_id, log_index FROM run_seal ORDER BY log_index"
        )
    finally:
        await conn.close()
    assert [(r["tenant"], r["log_index"]) for r in positions] == [
        ("acme", 7),
        ("other", 9),
        ("acme", 12),
    ]

    rows_before = await table_contents(url, TABLES_040)
    sequences_before = await query(
        url, "SELECT sequencename, last_value FROM pg_sequences ORDER BY 1"
    )
    assert await current_revision(url) is None

    # -- adoption: the documented upgrade ----------------------------------------------
    if how == "migrate.upgrade":
        await upgrade(url)
    else:
        said = await asyncio.to_thread(_journal_cli, "upgrade", "--url", url)
        assert f"revision {HEAD_REVISION}" in said, said

    assert await current_revision(url) == HEAD_REVISION
    rows_after = await table_contents(url, TABLES_040)
    # Revision 0003 adds push_delivery.parked (last column), false for every adopted row.
    assert {r[-1] for r in rows_after["push_delivery"]} == {False}
    rows_after["push_delivery"] = [r[:-1] for r in rows_after["push_delivery"]]
    assert rows_after == rows_before
    assert (
        await query(url, "SELECT sequencename, last_value FROM pg_sequences ORDER BY 1")
        == sequences_before
    )
    assert await query(url, "SELECT count(*) FROM journal_counter") == [(0,)]

    # -- the store on the adopted rows -------------------------------------------------
    store = await SqlJournalStore.connect(url, tenant="acme")
    try:
        # Old runs read back byte for byte, and verify (signatures included).
        assert await store.read(run_a) == a_records
        verifier = Ed25519Verifier().trust("plane-key-1", signer.public_key)
        assert await store.verify(run_a, verifier, require_signature=True) == head_a
        assert await store.verify(run_b) == head_b
        assert [r.seq for r in await store.case_history(case, 10)] == [1, 1]
        assert await store.runs_by_outcome("succeeded", 10) == [run_a]
        assert await store.runs_by_outcome("failed", 10) == [run_b]
        assert await store.cancellation(run_c) == Cancellation(
            "ops@example", "customer asked to stop"
        )
        assert not await store.request_cancel(run_c, "someone-else", "again")
        assert {r for r, _ in await store.recent_runs()} == {run_a, run_b, run_c}
        # The old log, as the store sees it: dense positions over 0.4.0's sparse ones.
        old = await store.checkpoint()
        assert old.size == 2
        assert old.root == root([leaf_hash(head_a), leaf_hash(head_b)])
        for run, index in ((run_a, 0), (run_b, 1)):
            inclusion = await store.inclusion_proof(run)
            assert inclusion is not None and inclusion.index == index
            assert inclusion.verify(old.root)

        # The exactly-once index 0.4.0 created holds for the store.
        with pytest.raises(DuplicateEffectError):
            await store.append(2, [started(run_c, key(1))])

        # The unsealed run's chain continues where 0.4.0 left it, under its live lease
        # (renewed: acquire never renews, and refuses the live lease even to its holder).
        with pytest.raises(LeaseHeldError):
            await store.acquire(run_c, "worker-3", 600)
        lease = await store.renew(run_c, "worker-3", 2, 600)
        assert lease.epoch == 2
        more = await store.append(2, [note(run_c, "resumed"), concluded(run_c, "succeeded")])
        assert [r.seq for r in more] == [4, 5]
        assert more[0].prev_hash == c_records[-1].hash
        head_c = await store.verify(run_c)
        assert head_c == more[-1].hash
        assert await store.runs_by_outcome("succeeded", 10) == [run_c, run_a]

        # Sealing extends the existing log: old + 1, after 0.4.0's positions.
        assert await store.seal(run_c, 2, "succeeded") == head_c
        new = await store.checkpoint()
        assert new.size == old.size + 1
        assert new.root == root([leaf_hash(head_a), leaf_hash(head_b), leaf_hash(head_c)])
        for run, index in ((run_a, 0), (run_b, 1), (run_c, 2)):
            inclusion = await store.inclusion_proof(run)
            assert inclusion is not None and (inclusion.index, inclusion.size) == (index, 3)
            assert inclusion.verify(new.root)
        proof = await store.consistency_proof(old.size)
        assert verify_consistency(old.size, old.root, new.size, new.root, proof)
        with pytest.raises(RunSealedError):
            await store.append(2, [note(run_c, "too late")])

        # A brand-new run on the adopted database, end to end.
        run_d = RunId.generate()
        lease_d = await store.acquire(run_d, "worker-4", 60)
        await store.append(lease_d.epoch, [admitted(run_d), concluded(run_d, "succeeded")])
        head_d = await store.seal(run_d, lease_d.epoch, "succeeded")
        assert (await store.checkpoint()).size == 4
        inclusion_d = await store.inclusion_proof(run_d)
        assert inclusion_d is not None and inclusion_d.seal == head_d

        # The other tenant's log is untouched by all of this.
        assert (await store.for_tenant("other").checkpoint()).size == 1
    finally:
        await store.close()

    indexes = await query(
        url, "SELECT run_id, log_index FROM run_seal WHERE tenant = 'acme' ORDER BY log_index"
    )
    assert [i for _, i in indexes] == [7, 12, 13, 14]
    # The 0.4.0 rows the store did not write to are still exactly as 0.4.0 wrote them.
    after = await table_contents(url, TABLES_040)
    after["push_delivery"] = [r[:-1] for r in after["push_delivery"]]  # 0003's `parked`
    for table in ("run_cancel", "push_delivery"):
        assert after[table] == rows_before[table]
    assert set(rows_before["journal"]) <= set(after["journal"])
    assert set(rows_before["run_seal"]) <= set(after["run_seal"])


async def test_a_040_database_upgrades_to_the_checks_and_downgrades_from_them(
    new_pg: Callable[..., Any],
) -> None:
    """0.4.0's rows (epoch-1 leases, released, sequence positions and ordinals, pushes) are
    within every floor: adopted with the CHECKs, and back to ``0003`` without them."""
    url, at_0003 = await new_pg(), await new_pg()
    await make_040_database(url)
    await make_040_database(at_0003)
    await upgrade(at_0003, "0003_contract_0_22")
    conn = await asyncpg.connect(dsn040(url))
    try:
        plane = Agentplane040(conn, "acme")
        run = RunId.generate()
        await plane.acquire(run, "worker-1", 1, 60)
        await plane.append(1, [admitted(run), concluded(run, "succeeded")])
        await plane.release(run, 1)
        await plane.seal(run, "succeeded")
        await plane.request_cancel(run, "ops", "late")
        await conn.execute(
            "INSERT INTO push_delivery (tenant, task_id, config_id, url, next_seq) "
            "VALUES ('acme', 'task-1', 'cfg-1', 'https://hooks.example/a', 0)"
        )
    finally:
        await conn.close()
    rows = await table_contents(url, TABLES_040)

    def checks(cat: dict[str, list[tuple[Any, ...]]]) -> set[str]:
        return {r[1] for r in cat["constraints"] if r[2] == "c"}

    await upgrade(url)
    adopted = await catalog(url)
    assert len(checks(adopted)) == 13
    after = await table_contents(url, TABLES_040)
    after["push_delivery"] = [r[:-1] for r in after["push_delivery"]]  # 0003's `parked`
    assert after == rows

    # The alembic CLI, as an operator would.
    await asyncio.to_thread(alembic_ok, "downgrade", "0003_contract_0_22", url=url)
    assert await current_revision(url) == "0003_contract_0_22"
    assert await catalog(url) == await catalog(at_0003)
    assert checks(await catalog(url)) == set()
    back = await table_contents(url, TABLES_040)
    back["push_delivery"] = [r[:-1] for r in back["push_delivery"]]
    assert back == rows

    await upgrade(url)
    assert await catalog(url) == adopted
    assert "No new upgrade operations detected" in alembic_ok("check", url=url)
