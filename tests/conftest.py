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
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from agentplane_journal import SqlJournalStore
from agentplane_journal.migrations.commands import upgrade

from pgcluster import Cluster

DIALECTS = ["sqlite", "postgresql"]


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
def pg_server() -> Iterator[str]:
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
