"""Shared fixtures: real databases only.

* ``pg_server``: a throwaway PostgreSQL cluster for the session (see ``pgcluster.py``).
* ``pg_database()``: a fresh PostgreSQL database, migrated by Alembic unless asked not to
  (copied from a migrated template database, so each costs one ``CREATE DATABASE``).
* ``sqlite_database()``: a fresh SQLite file, migrated by Alembic (copied from a migrated
  template file).
* ``make_store(**kw)`` / ``store``: the behaviour battery's store, parametrized over
  ``sqlite`` and ``postgresql``. PostgreSQL stores share one migrated database and each test
  gets its own tenant (as agentplane's own harness does), which also exercises isolation.
* ``clock``: a settable clock, so leases lapse without sleeping.

Every test that reaches PostgreSQL carries the ``postgres`` marker (added at collection, see
``pytest_collection_modifyitems``), so ``pytest -m "not postgres"`` is the quick SQLite-only
loop. The cluster is started lazily, by the first test that asks for ``pg_server``; in a run
that deselects ``postgres``, asking for it is an error naming the unmarked test.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from agentplane_journal import RunId, SqlJournalStore
from agentplane_journal.migrations.commands import upgrade

from pgcluster import Cluster

DIALECTS = ["sqlite", "postgresql"]

# Fixtures that reach the test cluster: a test depending on one (directly or through other
# fixtures) is a PostgreSQL test.
PG_FIXTURES = frozenset({"pg_server", "pg_template", "pg_database", "pg_battery_url"})
# Files whose tests start clusters (standbys, failover) or a PgBouncer of their own.
PG_FILES = frozenset(
    {
        "test_failover.py",
        "test_replica.py",
        "test_pgbouncer.py",
        "test_patroni.py",
        "test_pooler.py",
        "test_libpq_urls.py",
    }
)


def _reaches_postgres(item: pytest.Item) -> bool:
    if item.path.name in PG_FILES:
        return True
    if PG_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    # A dialect chosen by parameter (``dialect``, ``database_url``'s, a harness's own):
    # its PostgreSQL fixture is taken with request.getfixturevalue, so it is not in
    # fixturenames; the parameter says which database the case runs on.
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "postgresql" in [
        v for v in callspec.params.values() if isinstance(v, str)
    ]


# The ``slow`` ones: files that run tools in subprocesses (the CLI, Alembic's CLI, mypy, the
# docs build, a wheel build, a pytester suite, several processes on one file), and single
# tests that take seconds (large logs and runs, Hypothesis equivalence runs, CLI-driven
# migrations). ``-m "not postgres and not slow"`` is the quick loop (docs/tests.md).
SLOW_FILES = frozenset(
    {
        "test_admissions_cli.py",
        "test_backup_cli.py",
        "test_canon_fastpath.py",
        "test_cli.py",
        "test_cli_log.py",
        "test_docs.py",
        "test_export_format1.py",
        "test_extras.py",
        "test_advice.py",
        "test_host_alembic.py",
        "test_host_app.py",
        "test_langgraph.py",
        "test_langgraph_conformance.py",
        "test_readme.py",
        "test_sqlite_processes.py",
        "test_tiles.py",
        "test_tiles_go.py",
        "test_tiles_serve.py",
        "test_steps.py",
        "test_steps_crash.py",
        "test_steps_races.py",
        "test_steps_spans.py",
        "test_steps_profiles.py",
        "test_testing_plugin.py",
        "test_pooler.py",
        "test_replica.py",
        "test_types.py",
        "test_witness_aics.py",
        "test_wheel.py",
        "test_patroni.py",
        "test_restore_batches.py",
        "test_restore_judged.py",
        "test_bulk_race.py",
    }
)
SLOW_TESTS = frozenset(
    {
        "test_eight_processes_upgrading_one_fresh_database_at_once_all_succeed",
        # tests/test_docs_examples.py: its checks of the markers stay in the quick loop
        "test_the_runnable_block_runs_twice_in_one_fresh_directory",
        "test_the_runnable_python_blocks_pass_mypy_strict",
        "test_verify_and_export_all_hold_a_page_not_a_run_of_large_records",
        "test_a_sample_of_logs_up_to_10000_answers_as_the_pure_functions",
        "test_audit_names_the_first_position_where_the_stored_tree_lies_and_reindex_repairs",
        "test_every_log_size_up_to_300_answers_as_the_pure_functions",
        "test_downgrading_to_the_previous_revision_drops_only_the_stored_tree",
        "test_logs_sealed_before_the_stored_tree_are_adopted_with_the_same_roots",
        "test_prove_on_an_edited_seal_fails_as_a_finding_and_says_what_is_wrong",
        "test_a_host_table_with_one_of_our_names_is_refused_before_anything_is_created",
        "test_cli_upgrade_sql_prints_the_ddl_and_connects_nowhere",
        "test_a_database_newer_than_the_package_is_told_to_upgrade_the_package",
        "test_cli_downgrade_to_base_removes_everything_and_upgrade_again_works",
        "test_cli_upgrade_head_creates_the_schema_and_check_finds_no_difference",
        "test_cli_url_from_x_argument_when_the_environment_names_none",
        "test_cli_uses_its_own_version_table_and_never_creates_alembic_version",
        "test_downgrade_base_refuses_to_drop_a_journal_that_holds_records",
        "test_the_downgrade_refuses_while_a_registration_is_parked",
        "test_steady_appends_do_not_starve_the_rest_of_a_one_connection_pool",
        "test_a_run_of_50000_records_streams_and_verifies_in_a_few_mib",
        "test_a_run_of_large_records_streams_and_verifies_in_pages_bounded_by_bytes",
        "test_a_hostile_seal_row_is_reported_and_the_audit_carries_on",
        "test_verify_all_and_export_all_report_every_tampered_run_and_carry_on",
        "test_each_hostile_log_row_is_reported_and_reindex_repairs_what_the_seals_can",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every PostgreSQL case ``postgres``, so ``-m "not postgres"`` needs no cluster, and
    the cases that take seconds ``slow`` (see :data:`SLOW_FILES`)."""
    for item in items:
        if _reaches_postgres(item) and item.get_closest_marker("postgres") is None:
            item.add_marker(pytest.mark.postgres)
        name = getattr(item, "originalname", item.name)
        if item.path.name in SLOW_FILES or name in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)


def _postgres_deselected(config: pytest.Config) -> bool:
    """Whether this run's ``-m`` expression leaves out tests because they are ``postgres``."""
    markexpr = config.getoption("markexpr", "")
    if not markexpr:
        return False
    from _pytest.mark.expression import Expression

    expr = Expression.compile(markexpr)

    def evaluate(marked: Callable[[str], bool]) -> bool:
        return bool(expr.evaluate(lambda name, **_kw: marked(name)))

    return (evaluate(lambda n: n != "postgres") and not evaluate(lambda n: True)) or (
        evaluate(lambda n: False) and not evaluate(lambda n: n == "postgres")
    )


class FakeClock:
    """Seconds since the epoch, moved by the test instead of by time."""

    def __init__(self, now: float | None = None) -> None:
        self.now = float(int(time.time()) if now is None else now)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _dsn(url: str, database: str | None = None) -> str:
    u = make_url(url)
    if database is not None:
        u = u.set(database=database)
    return u.set(drivername="postgresql").render_as_string(hide_password=False)


def _asyncpg_url(url: str, database: str) -> str:
    return make_url(url).set(database=database).render_as_string(hide_password=False)


def run_blocking(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, even inside a running event loop."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def _admin(url: str, sql: str) -> None:
    conn = await asyncpg.connect(_dsn(url))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def pg_server(request: pytest.FixtureRequest) -> Iterator[str]:
    if _postgres_deselected(request.config):
        pytest.fail(
            "a test deselected PostgreSQL (-m) but asked for the cluster: give it the "
            "postgres marker (or teach tests/conftest.py's _reaches_postgres its fixture)",
            pytrace=False,
        )
    url = os.environ.get("AGENTPLANE_JOURNAL_TEST_PG_URL")
    if url:
        yield url
        return
    cluster = Cluster()
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def pg_template(pg_server: str) -> str:
    name = f"apj_template_{uuid.uuid4().hex[:8]}"
    run_blocking(_admin(pg_server, f'CREATE DATABASE "{name}"'))
    run_blocking(upgrade(_asyncpg_url(pg_server, name)))
    return name


@pytest.fixture(scope="session")
def pg_database(pg_server: str, pg_template: str) -> Callable[..., str]:
    """``pg_database(migrated=True)`` -> the asyncpg URL of a new database."""

    def make(migrated: bool = True) -> str:
        name = f"apj_{uuid.uuid4().hex[:12]}"
        template = f' TEMPLATE "{pg_template}"' if migrated else ""
        run_blocking(_admin(pg_server, f'CREATE DATABASE "{name}"{template}'))
        return _asyncpg_url(pg_server, name)

    return make


@pytest.fixture(scope="session")
def pg_battery_url(pg_database: Callable[..., str]) -> str:
    return pg_database()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    run_blocking(upgrade(f"sqlite+aiosqlite:///{path}"))
    return path


@pytest.fixture
def sqlite_database(sqlite_template: Path, tmp_path: Path) -> Callable[..., str]:
    """``sqlite_database(migrated=True)`` -> the aiosqlite URL of a new database file."""

    def make(migrated: bool = True) -> str:
        path = tmp_path / f"journal-{uuid.uuid4().hex[:8]}.db"
        if migrated:
            shutil.copyfile(sqlite_template, path)
        return f"sqlite+aiosqlite:///{path}"

    return make


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=DIALECTS)
def dialect(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def database_url(
    dialect: str, request: pytest.FixtureRequest, sqlite_database: Callable[..., str]
) -> str:
    """The battery's database: a fresh SQLite file, or the shared PostgreSQL database."""
    if dialect == "sqlite":
        return sqlite_database()
    return request.getfixturevalue("pg_battery_url")


@asynccontextmanager
async def store_factory(
    cls: Any, url: str, tenant: str, clock: FakeClock
) -> AsyncIterator[Callable[..., Any]]:
    """``await make(**kw)`` -> a ``cls`` (journal or push store) on ``url``, closed afterwards."""
    opened: list[Any] = []

    async def make(**kw: Any) -> Any:
        kw.setdefault("tenant", tenant)
        kw.setdefault("clock", clock)
        store = await cls.connect(url, **kw)
        opened.append(store)
        return store

    try:
        yield make
    finally:
        for store in opened:
            await store.close()


@pytest.fixture
async def make_store(
    database_url: str, dialect: str, clock: FakeClock
) -> AsyncIterator[Callable[..., object]]:
    """``await make_store(**kw)`` -> a store on this test's database; its own tenant on PG."""
    tenant = f"t{uuid.uuid4().hex[:12]}" if dialect == "postgresql" else "default"
    async with store_factory(SqlJournalStore, database_url, tenant, clock) as make:
        yield make


@pytest.fixture
async def store(make_store: Callable[..., object]) -> SqlJournalStore:
    return await make_store()  # type: ignore[misc]


@pytest.fixture
async def instances(pg_battery_url: str, clock: Any) -> AsyncIterator[Callable[[int], Any]]:
    """``await instances(k)``: k stores of one fresh tenant, each on its own engine (the race
    tests' separate instances; ``k`` defaults to ``races.K``)."""
    from races import K

    tenant = f"race{uuid.uuid4().hex[:10]}"
    opened: list[SqlJournalStore] = []

    async def make(k: int = K) -> list[SqlJournalStore]:
        stores = [
            await SqlJournalStore.connect(pg_battery_url, tenant=tenant, clock=clock)
            for _ in range(k)
        ]
        opened.extend(stores)
        # a connection open on each before the race, so connecting is not what is raced
        await asyncio.gather(*(s.head(RunId.generate()) for s in stores))
        return stores

    yield make
    await asyncio.gather(*(s.close() for s in opened))


# -- the command line, in process ---------------------------------------------------------


@dataclass
class CliResult:
    """What one in-process ``agentplane-journal`` call returned and printed."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def out(self) -> str:
        """Both streams, for a check that does not care which one said it."""
        return self.stdout + self.stderr


@pytest.fixture
def cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., CliResult]:
    """``cli(*args)`` runs the command line in this process (no URL from the environment)."""
    from agentplane_journal.cli.main import main

    monkeypatch.delenv("AGENTPLANE_JOURNAL_URL", raising=False)

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        code = main(list(args))
        out = capsys.readouterr()
        return CliResult(code, out.out, out.err)

    return run


@pytest.fixture(params=DIALECTS)
def fresh(
    request: pytest.FixtureRequest, sqlite_database: Callable[..., str]
) -> Callable[..., str]:
    """``fresh(migrated=True)``: a new database of the case's dialect."""
    if request.param == "sqlite":
        return sqlite_database
    maker: Callable[..., str] = request.getfixturevalue("pg_database")
    return maker
