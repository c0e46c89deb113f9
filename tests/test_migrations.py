"""The schema is Alembic's: the CLI, the programmatic API, the partial indexes, the check.

On both SQLite and PostgreSQL: ``alembic upgrade head`` from a clean database, ``alembic
check`` finding nothing, a full downgrade and upgrade again, a single labelled head, and
our own version table. Then the partial-index predicates and the descending index, read
back from the database (Alembic does not compare WHERE clauses, so ``check`` cannot see a
drift there), the programmatic ``upgrade``/``current_revision``, and the store refusing a
database that is not at head without touching it. Nothing in the package calls
``create_all``.
"""

from __future__ import annotations

import ast
import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool
from sqlalchemy.ext.asyncio import create_async_engine

from agentplane_journal import RunId, SchemaOutOfDateError, SqlJournalStore
from agentplane_journal.db.models import TABLE_NAMES, VERSION_TABLE, Journal, RunActivity, metadata
from agentplane_journal.db.revision import HEAD_REVISION, KNOWN_REVISIONS
from agentplane_journal.migrations import commands as migrate
from agentplane_journal.migrations.commands import current_revision, known_revisions, upgrade

from support.helpers import admitted
from support.migration_tools import (
    REPO,
    alembic_ok,
    catalog,
    execute,
    output,
    query,
    run_alembic,
    table_contents,
    table_names,
)

OUR_TABLES = set(metadata.tables)
SEQUENCES = {"run_log_position", "run_conclusion_ordinal"}

# What we declare, word for word as agentplane 0.4.0's DDL spells it.
EFFECT_STARTED_WHERE = "kind = 'EffectStarted' AND effect_key IS NOT NULL"
BY_CASE_WHERE = "case_id IS NOT NULL"


@pytest.fixture
def empty_url(
    dialect: str, request: pytest.FixtureRequest, sqlite_database: Callable[..., str]
) -> str:
    """A fresh, never-migrated database of this test's dialect."""
    if dialect == "sqlite":
        return sqlite_database(migrated=False)
    return request.getfixturevalue("pg_database")(migrated=False)


@pytest.fixture
def migrated_url(
    dialect: str, request: pytest.FixtureRequest, sqlite_database: Callable[..., str]
) -> str:
    """A fresh database of this test's dialect, at head."""
    if dialect == "sqlite":
        return sqlite_database()
    return request.getfixturevalue("pg_database")()


@pytest.fixture
def pg_empty_url(pg_database: Callable[..., str]) -> str:
    """A fresh, never-migrated PostgreSQL database (made outside the test's event loop)."""
    return pg_database(migrated=False)


async def _sequences(url: str) -> set[str]:
    if url.startswith("sqlite"):
        return set()
    rows = await query(url, "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'")
    return {r[0] for r in rows}


async def _version_rows(url: str) -> list[str]:
    return [r[0] for r in await query(url, f"SELECT version_num FROM {VERSION_TABLE}")]


# -- the CLI -------------------------------------------------------------------------------


@pytest.mark.slow
async def test_cli_upgrade_head_creates_the_schema_and_check_finds_no_difference(
    empty_url: str,
) -> None:
    alembic_ok("upgrade", "head", url=empty_url)

    assert await table_names(empty_url) == OUR_TABLES | {VERSION_TABLE}
    if not empty_url.startswith("sqlite"):
        assert await _sequences(empty_url) == SEQUENCES
    assert await _version_rows(empty_url) == [HEAD_REVISION]
    assert HEAD_REVISION in alembic_ok("current", url=empty_url)

    checked = alembic_ok("check", url=empty_url)
    assert "No new upgrade operations detected" in checked


@pytest.mark.slow
async def test_cli_uses_its_own_version_table_and_never_creates_alembic_version(
    empty_url: str,
) -> None:
    alembic_ok("upgrade", "head", url=empty_url)
    alembic_ok("check", url=empty_url)
    alembic_ok("downgrade", "base", url=empty_url)
    tables = await table_names(empty_url)
    assert "alembic_version" not in tables
    assert VERSION_TABLE in tables


@pytest.mark.slow
async def test_cli_downgrade_to_base_removes_everything_and_upgrade_again_works(
    empty_url: str,
) -> None:
    alembic_ok("upgrade", "head", url=empty_url)
    alembic_ok("downgrade", "base", url=empty_url)

    # Only the (now empty) version table is left: every table and sequence is gone.
    assert await table_names(empty_url) == {VERSION_TABLE}
    assert await _sequences(empty_url) == set()
    assert await _version_rows(empty_url) == []
    assert await current_revision(empty_url) is None

    alembic_ok("upgrade", "head", url=empty_url)
    assert await table_names(empty_url) == OUR_TABLES | {VERSION_TABLE}
    assert await _version_rows(empty_url) == [HEAD_REVISION]
    assert "No new upgrade operations detected" in alembic_ok("check", url=empty_url)


async def test_cli_upgrade_head_twice_is_a_no_op(migrated_url: str) -> None:
    before = await catalog(migrated_url)
    alembic_ok("upgrade", "head", url=migrated_url)
    assert await catalog(migrated_url) == before
    assert await _version_rows(migrated_url) == [HEAD_REVISION]


@pytest.mark.slow
def test_cli_url_from_x_argument_when_the_environment_names_none(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    alembic_ok("-x", f"url={url}", "upgrade", "head")
    assert HEAD_REVISION in alembic_ok("-x", f"url={url}", "current")


def test_script_directory_has_a_single_head_equal_to_head_revision_and_labelled() -> None:
    for cfg in (Config(str(REPO / "alembic.ini")), migrate.alembic_config()):
        script = ScriptDirectory.from_config(cfg)
        assert script.get_heads() == [HEAD_REVISION]
        assert script.get_revision("agentplane_journal@head").revision == HEAD_REVISION
        # Every revision of the history belongs to the agentplane_journal branch.
        for rev in script.walk_revisions():
            assert "agentplane_journal" in rev.branch_labels, rev.revision
        base = script.get_revision(script.get_bases()[0])
        assert base.down_revision is None
        assert "agentplane_journal" in base._orig_branch_labels
    assert migrate.script_heads() == (HEAD_REVISION,)
    # The runtime's own list (it reads the version table without Alembic) is the scripts'.
    assert frozenset(KNOWN_REVISIONS) == migrate.known_revisions()
    assert KNOWN_REVISIONS[-1] == HEAD_REVISION

    heads = run_alembic("heads")
    assert heads.returncode == 0, output(heads)
    assert heads.stdout.split() == [f"{HEAD_REVISION}", "(agentplane_journal)", "(head)"]


# -- indexes: what Alembic cannot compare ------------------------------------------------


def _declared_where(table: str, index: str) -> dict[str, str]:
    idx = next(i for i in metadata.tables[table].indexes if i.name == index)
    return {d: str(idx.dialect_options[d]["where"]) for d in ("postgresql", "sqlite")}


def test_models_declare_the_partial_index_predicates_for_both_dialects() -> None:
    assert _declared_where("journal", "journal_effect_started") == {
        "postgresql": EFFECT_STARTED_WHERE,
        "sqlite": EFFECT_STARTED_WHERE,
    }
    assert _declared_where("journal", "journal_by_case") == {
        "postgresql": BY_CASE_WHERE,
        "sqlite": BY_CASE_WHERE,
    }
    by_name = {i.name: i for i in Journal.__table__.indexes}
    assert by_name["journal_effect_started"].unique
    assert not by_name["journal_by_case"].unique
    recent = next(iter(RunActivity.__table__.indexes))
    assert recent.name == "run_activity_recent"
    assert [str(e) for e in recent.expressions] == [
        "run_activity.tenant",
        "run_activity.updated_at DESC",
        "run_activity.run_id DESC",
    ]


async def test_sqlite_partial_and_descending_indexes_are_as_declared(
    sqlite_database: Callable[..., str],
) -> None:
    url = sqlite_database(migrated=False)
    await upgrade(url)
    sql = dict(await query(url, "SELECT name, sql FROM sqlite_master WHERE type = 'index'"))
    assert sql["journal_effect_started"] == (
        "CREATE UNIQUE INDEX journal_effect_started ON journal (tenant, run_id, effect_key) "
        f"WHERE {_declared_where('journal', 'journal_effect_started')['sqlite']}"
    )
    assert sql["journal_by_case"] == (
        "CREATE INDEX journal_by_case ON journal (tenant, case_id, run_id, seq) "
        f"WHERE {_declared_where('journal', 'journal_by_case')['sqlite']}"
    )
    assert sql["run_activity_recent"] == (
        "CREATE INDEX run_activity_recent ON run_activity (tenant, updated_at DESC, run_id DESC)"
    )

    # And as SQLite itself understands them: partial flag, uniqueness, key columns, order.
    index_list = {
        r[1]: (bool(r[2]), bool(r[4]))
        for r in await query(url, "SELECT * FROM pragma_index_list('journal')")
    }
    assert index_list["journal_effect_started"] == (True, True)  # (unique, partial)
    assert index_list["journal_by_case"] == (False, True)
    xinfo = await query(
        url,
        "SELECT name, desc FROM pragma_index_xinfo('run_activity_recent') WHERE key = 1 "
        "ORDER BY seqno",
    )
    assert xinfo == [("tenant", 0), ("updated_at", 1), ("run_id", 1)]


@pytest.mark.postgres
async def test_postgres_partial_and_descending_indexes_are_as_declared(pg_empty_url: str) -> None:
    url = pg_empty_url
    await upgrade(url)

    def index_sql(name: str) -> str:
        return (
            "SELECT x.indisunique, pg_get_expr(x.indpred, x.indrelid), "
            "pg_get_indexdef(x.indexrelid) FROM pg_index x "
            f"JOIN pg_class i ON i.oid = x.indexrelid WHERE i.relname = '{name}'"
        )

    [(unique, pred, indexdef)] = await query(url, index_sql("journal_effect_started"))
    assert unique is True
    assert pred == "((kind = 'EffectStarted'::text) AND (effect_key IS NOT NULL))"
    assert indexdef == (
        "CREATE UNIQUE INDEX journal_effect_started ON public.journal USING btree "
        "(tenant, run_id, effect_key) "
        "WHERE ((kind = 'EffectStarted'::text) AND (effect_key IS NOT NULL))"
    )
    [(unique, pred, indexdef)] = await query(url, index_sql("journal_by_case"))
    assert unique is False
    assert pred == "(case_id IS NOT NULL)"
    assert indexdef == (
        "CREATE INDEX journal_by_case ON public.journal USING btree "
        "(tenant, case_id, run_id, seq) WHERE (case_id IS NOT NULL)"
    )
    [(unique, pred, indexdef)] = await query(url, index_sql("run_activity_recent"))
    assert (unique, pred) == (False, None)
    assert indexdef == (
        "CREATE INDEX run_activity_recent ON public.run_activity USING btree "
        "(tenant, updated_at DESC, run_id DESC)"
    )

    # The stored predicates are what PostgreSQL makes of the models' declared text: build
    # the same indexes from the models' predicates on a scratch copy and compare.
    effect = _declared_where("journal", "journal_effect_started")["postgresql"]
    case = _declared_where("journal", "journal_by_case")["postgresql"]
    await execute(
        url,
        "CREATE TABLE scratch (LIKE journal)",
        f"CREATE UNIQUE INDEX scratch_effect ON scratch (tenant, run_id, effect_key) "
        f"WHERE {effect}",
        f"CREATE INDEX scratch_case ON scratch (tenant, case_id, run_id, seq) WHERE {case}",
    )
    preds = dict(
        await query(
            url,
            "SELECT i.relname, pg_get_expr(x.indpred, x.indrelid) FROM pg_index x "
            "JOIN pg_class i ON i.oid = x.indexrelid WHERE i.relname IN "
            "('journal_effect_started', 'journal_by_case', 'scratch_effect', 'scratch_case')",
        )
    )
    assert preds["journal_effect_started"] == preds["scratch_effect"]
    assert preds["journal_by_case"] == preds["scratch_case"]


# -- programmatic upgrade and current_revision -------------------------------------------


async def test_current_revision_of_an_empty_database_is_none_and_creates_nothing(
    empty_url: str,
) -> None:
    before = await catalog(empty_url)
    assert await current_revision(empty_url) is None
    assert await catalog(empty_url) == before
    assert VERSION_TABLE not in await table_names(empty_url)


async def test_upgrade_with_a_url_brings_an_empty_database_to_head(empty_url: str) -> None:
    await upgrade(empty_url)
    assert await current_revision(empty_url) == HEAD_REVISION
    assert await table_names(empty_url) == OUR_TABLES | {VERSION_TABLE}
    assert "alembic_version" not in await table_names(empty_url)

    # Upgrading again (or to the named head) changes nothing.
    before = await catalog(empty_url)
    await upgrade(empty_url, HEAD_REVISION)
    assert await catalog(empty_url) == before
    assert await _version_rows(empty_url) == [HEAD_REVISION]


async def test_upgrade_with_an_async_engine_leaves_the_engine_usable(empty_url: str) -> None:
    engine = create_async_engine(empty_url)
    try:
        assert await current_revision(engine) is None
        await upgrade(engine)
        assert await current_revision(engine) == HEAD_REVISION
        # The caller's engine is not disposed of: it still opens connections.
        async with engine.connect() as conn:
            assert (await conn.exec_driver_sql("SELECT count(*) FROM journal")).scalar() == 0
    finally:
        await engine.dispose()
    assert await table_names(empty_url) == OUR_TABLES | {VERSION_TABLE}


async def test_upgrade_refuses_what_is_neither_a_url_nor_an_async_engine() -> None:
    engine = create_engine("sqlite://", poolclass=pool.StaticPool)
    try:
        with pytest.raises(TypeError, match="AsyncEngine"):
            await upgrade(engine)  # type: ignore[arg-type]
    finally:
        engine.dispose()


# -- the store refuses an out-of-date database, touching nothing -------------------------


async def _schema_and_rows(url: str) -> tuple[object, object]:
    tables = await table_names(url)
    return await catalog(url, identity=True), await table_contents(url, tables)


async def test_store_refuses_an_unmigrated_database_and_creates_nothing(empty_url: str) -> None:
    before = await _schema_and_rows(empty_url)
    assert before[1] == {}  # truly empty

    with pytest.raises(SchemaOutOfDateError) as caught:
        await SqlJournalStore.connect(empty_url)

    err = caught.value
    assert err.current is None
    assert err.expected == HEAD_REVISION
    assert "never been migrated" in str(err)
    assert HEAD_REVISION in str(err)
    assert "agentplane-journal upgrade" in str(err)
    assert "alembic upgrade head" in str(err)
    assert await _schema_and_rows(empty_url) == before
    assert await table_names(empty_url) == set()


NEWER = "0099_from_a_newer_package"


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["version_table_only", "migrated_then_moved_on"])
async def test_a_database_newer_than_the_package_is_told_to_upgrade_the_package(
    shape: str, empty_url: str
) -> None:
    if shape == "version_table_only":
        await execute(
            empty_url,
            f"CREATE TABLE {VERSION_TABLE} (version_num VARCHAR(32) NOT NULL PRIMARY KEY)",
            f"INSERT INTO {VERSION_TABLE} (version_num) VALUES ('{NEWER}')",
        )
    else:
        await upgrade(empty_url)
        await execute(
            empty_url,
            "INSERT INTO journal_counter (name, value) VALUES ('log_position/t', 4)",
            f"UPDATE {VERSION_TABLE} SET version_num = '{NEWER}'",
        )
    before = await _schema_and_rows(empty_url)

    with pytest.raises(SchemaOutOfDateError) as caught:
        await SqlJournalStore.connect(empty_url)
    err = caught.value
    assert (err.current, err.expected, err.newer) == (NEWER, HEAD_REVISION, True)
    assert NEWER in str(err) and HEAD_REVISION in str(err)
    assert "upgrade the package" in str(err)
    assert "`agentplane-journal upgrade" not in str(err)

    # Upgrading the database cannot help, and says so the same way (not "Can't locate").
    with pytest.raises(SchemaOutOfDateError, match="upgrade the package"):
        await upgrade(empty_url)
    cli = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agentplane_journal", "upgrade", "--url", empty_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 2, cli.stderr
    assert "upgrade the package" in cli.stderr and NEWER in cli.stderr, cli.stderr
    assert await _schema_and_rows(empty_url) == before
    assert await _version_rows(empty_url) == [NEWER]


def test_a_database_at_an_older_revision_is_told_to_run_upgrade() -> None:
    older = sorted(known_revisions() - {HEAD_REVISION}) or ["0000_older"]
    err = SchemaOutOfDateError(older[0], HEAD_REVISION)
    assert not err.newer
    assert f"is at revision {older[0]}" in str(err) and HEAD_REVISION in str(err)
    assert "`agentplane-journal upgrade --url URL` (URL: the database's)" in str(err)
    assert "alembic upgrade head" in str(err)


async def test_store_refuses_before_its_first_statement_on_a_caller_engine(
    empty_url: str,
) -> None:
    before = await _schema_and_rows(empty_url)
    engine = create_async_engine(empty_url)
    try:
        store = SqlJournalStore(engine)
        with pytest.raises(SchemaOutOfDateError):
            await store.checkpoint()
        with pytest.raises(SchemaOutOfDateError):
            await store.request_cancel(RunId.generate(), "ops", "stop")
    finally:
        await engine.dispose()
    assert await _schema_and_rows(empty_url) == before


async def test_store_connects_to_a_database_at_head(migrated_url: str) -> None:
    store = await SqlJournalStore.connect(migrated_url)
    try:
        assert (await store.checkpoint()).size == 0
    finally:
        await store.close()


# -- nothing calls create_all ------------------------------------------------------------


def _python_sources() -> list[Path]:
    files = sorted((REPO / "agentplane_journal").rglob("*.py"))
    files += sorted((REPO / "alembic").rglob("*.py"))
    assert len(files) > 5
    return files


def test_nothing_in_the_package_or_its_migrations_calls_create_all() -> None:
    # By syntax, not by text: the docstrings say "nothing calls create_all", and that is fine.
    offenders = []
    for path in _python_sources():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(
                node, ast.Attribute
            ):  # metadata.create_all(...), run_sync(....create_all)
                name = node.attr
            elif isinstance(node, ast.Name):  # a bare create_all imported from somewhere
                name = node.id
            elif isinstance(node, ast.alias):  # from ... import create_all
                name = node.name
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                name = node.value  # getattr(metadata, "create_all")
            else:
                continue
            if name in {"create_all", "drop_all"}:
                offenders.append(f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')} {name}")
    assert offenders == []


def test_every_table_the_package_owns_is_named_for_host_filters() -> None:
    assert TABLE_NAMES == frozenset(OUR_TABLES | {VERSION_TABLE})
    assert OUR_TABLES == {
        "journal",
        "run_activity",
        "run_lease",
        "run_seal",
        "run_outcome",
        "run_cancel",
        "push_delivery",
        "journal_counter",
        "log_tree",
        "run_admission",
        "journal_profile",
        "log_cosignature",
    }


@pytest.mark.slow
async def test_downgrade_base_refuses_to_drop_a_journal_that_holds_records(
    empty_url: str,
) -> None:
    alembic_ok("upgrade", "head", url=empty_url)
    store = await SqlJournalStore.connect(empty_url)
    try:
        await store.append(1, [admitted(RunId.generate())])
    finally:
        await store.close()
    refused = run_alembic("downgrade", "base", url=empty_url)
    assert refused.returncode != 0 and "the journal holds records" in refused.stderr
    assert "-x drop_records=yes" in refused.stderr
    assert await table_names(empty_url) == OUR_TABLES | {VERSION_TABLE}
    assert await _version_rows(empty_url) == [HEAD_REVISION]
    alembic_ok("-x", "drop_records=yes", "downgrade", "base", url=empty_url)
    assert await table_names(empty_url) == {VERSION_TABLE}
