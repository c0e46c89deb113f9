"""Shared fixtures: real databases only. Their machinery lives in ``tests/support/``.

* ``pg_server``: a throwaway PostgreSQL cluster for the session (see ``support/pgcluster.py``).
* ``pg_database()``: a fresh PostgreSQL database, migrated by Alembic unless asked not to
  (copied from a migrated template database, so each costs one ``CREATE DATABASE``).
* ``sqlite_database()``: a fresh SQLite file, migrated by Alembic (copied from a migrated
  template file).
* ``new_pg()``: ``await``-able ``pg_database`` (unmigrated by default), created off the test's
  loop (the schema-compatibility tests).
* ``make_store(**kw)`` / ``store``: the behaviour battery's store, parametrized over
  ``sqlite`` and ``postgresql``. PostgreSQL stores share one migrated database and each test
  gets its own tenant (as agentplane's own harness does), which also exercises isolation.
* ``via``: how the battery's PostgreSQL database is reached, ``direct`` or ``pgbouncer``; a
  module marked ``support.markers.THROUGH_PGBOUNCER`` runs each case once more through a
  PgBouncer (``pytest_generate_tests``).
* ``clock``: a settable clock, so leases lapse without sleeping.

Markers say what a test needs and are set where the test is declared (pyproject.toml lists
them). Every case that reaches PostgreSQL through a fixture is also marked ``postgres`` at
collection (``support.markers.reaches_postgres``), so ``pytest -m "not postgres"`` is the
quick SQLite-only loop. The cluster is started lazily, by the first test that asks for
``pg_server``; in a run that deselects ``postgres``, asking for it is an error naming the
unmarked test.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentplane_journal import RunId, SqlJournalStore
from agentplane_journal.migrations.commands import upgrade

from support.cli import CliResult
from support.clock import FakeClock
from support.databases import admin, asyncpg_url, run_blocking
from support.markers import postgres_deselected, reaches_postgres
from support.pgcluster import Cluster
from support.stores import store_factory

DIALECTS = ["sqlite", "postgresql"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every case that reaches PostgreSQL through a fixture ``postgres``, so
    ``-m "not postgres"`` needs no cluster."""
    for item in items:
        if item.get_closest_marker("postgres") is None and reaches_postgres(item):
            item.add_marker(pytest.mark.postgres)


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A ``through_pgbouncer`` module's cases run once more through PgBouncer: its
    PostgreSQL side (``dialect``'s, or ``pg_battery_url`` itself) again with ``via`` set to
    ``pgbouncer``; SQLite has nothing to pool."""
    if metafunc.definition.get_closest_marker("through_pgbouncer") is None:
        return
    pooled = [pytest.mark.pgbouncer, pytest.mark.postgres]
    if "dialect" in metafunc.fixturenames:
        parametrize = pytest.mark.parametrize(
            ("dialect", "via"),
            [
                pytest.param("sqlite", "direct", id="sqlite"),
                pytest.param("postgresql", "direct", id="postgresql"),
                pytest.param("postgresql", "pgbouncer", id="postgresql-pgbouncer", marks=pooled),
            ],
            indirect=True,
            scope="session",
        )
    else:
        parametrize = pytest.mark.parametrize(
            "via",
            [pytest.param("direct"), pytest.param("pgbouncer", marks=pooled)],
            indirect=True,
            scope="session",
        )
    # as a mark, so that it takes the place of ``dialect``'s own params (pytest gives a
    # test's parametrize marks precedence over a fixture's params)
    metafunc.definition.add_marker(parametrize)


@pytest.fixture(scope="session")
def pg_server(request: pytest.FixtureRequest) -> Iterator[str]:
    if postgres_deselected(request.config):
        pytest.fail(
            "a test deselected PostgreSQL (-m) but asked for the cluster: give it the "
            "postgres marker (or teach tests/support/markers.py's PG_FIXTURES its fixture)",
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
    run_blocking(admin(pg_server, f'CREATE DATABASE "{name}"'))
    run_blocking(upgrade(asyncpg_url(pg_server, name)))
    return name


@pytest.fixture(scope="session")
def pg_database(pg_server: str, pg_template: str) -> Callable[..., str]:
    """``pg_database(migrated=True)`` -> the asyncpg URL of a new database."""

    def make(migrated: bool = True) -> str:
        name = f"apj_{uuid.uuid4().hex[:12]}"
        template = f' TEMPLATE "{pg_template}"' if migrated else ""
        run_blocking(admin(pg_server, f'CREATE DATABASE "{name}"{template}'))
        return asyncpg_url(pg_server, name)

    return make


@pytest.fixture(scope="session")
def via(request: pytest.FixtureRequest) -> str:
    """How the battery reaches PostgreSQL: ``direct``, or ``pgbouncer`` (a case of a
    ``through_pgbouncer`` module; see ``pytest_generate_tests``)."""
    return str(getattr(request, "param", "direct"))


@pytest.fixture(scope="session")
def pgbouncer(pg_server: str) -> Iterator[Any]:
    """A PgBouncer in transaction-pooling mode in front of the test cluster; skipped without
    ``pgbouncer`` (a failure under ``CI``)."""
    from support.pgtopology import PgBouncer, need_pgbouncer

    need_pgbouncer()
    bouncer = PgBouncer(pg_server)
    try:
        yield bouncer
    finally:
        bouncer.stop()


@pytest.fixture
def new_pg(pg_database: Callable[..., str]) -> Callable[..., Any]:
    """``await new_pg(migrated=False)``: a fresh database, created off the test's loop."""

    async def make(migrated: bool = False) -> str:
        return await asyncio.to_thread(pg_database, migrated)

    return make


@pytest.fixture(scope="session")
def pg_battery_url(
    pg_database: Callable[..., str], via: str, request: pytest.FixtureRequest
) -> str:
    """The battery's and the races' shared database; through PgBouncer (with
    ``?pgbouncer=true``) when ``via`` says so."""
    if via == "pgbouncer":
        return str(request.getfixturevalue("pgbouncer").url(pg_database()))
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
    from support.races import K

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
