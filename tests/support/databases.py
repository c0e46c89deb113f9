"""Reaching the test cluster from the fixtures and the tests: URLs, admin statements, and
running a coroutine from sync code (a session fixture, a thread)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url


def dsn(url: str, database: str | None = None) -> str:
    """``url`` (SQLAlchemy's, any driver) as a libpq DSN for asyncpg.connect, optionally on
    another ``database`` of the same server."""
    u = make_url(url)
    if database is not None:
        u = u.set(database=database)
    return u.set(drivername="postgresql").render_as_string(hide_password=False)


def asyncpg_url(url: str, database: str) -> str:
    """The store's URL of ``database`` on ``url``'s server."""
    return make_url(url).set(database=database).render_as_string(hide_password=False)


def run_blocking(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, even inside a running event loop."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def admin(url: str, sql: str) -> None:
    """One statement outside a transaction (``CREATE DATABASE`` refuses to run in one)."""
    conn = await asyncpg.connect(dsn(url))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()
