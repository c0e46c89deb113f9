"""The race tests' shared helpers: a start barrier, the verdict on what it returned, lock waits.

* ``race(*calls)``: the calls started together from one barrier; each one's result or
  exception, in order (nothing raised, so every racer finishes before the test judges).
* ``no_surprises(results, *allowed)``: no exception among the results other than ``allowed``.
* ``lock_waiters(target)`` / ``until_waiting(target, n)``: how many backends of the test's
  PostgreSQL database wait for a lock (``pg_stat_activity``), and waiting until ``n`` do, so a
  test releases a held row once the statements it races are queued on it, not after a sleep.
  ``target`` is an open asyncpg connection, or a URL to open one on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from support.databases import dsn

K = 16  # racers in a race of store instances

LOCK_WAITERS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    " AND wait_event_type = 'Lock'"
)


async def race(*calls: Callable[[], Awaitable[Any]]) -> list[Any]:
    """Run the calls together from a start barrier; results or exceptions, in order."""
    barrier = asyncio.Barrier(len(calls))

    async def one(call: Callable[[], Awaitable[Any]]) -> Any:
        await barrier.wait()
        return await call()

    return await asyncio.gather(*(one(c) for c in calls), return_exceptions=True)


def no_surprises(results: list[Any], *allowed: type[BaseException]) -> None:
    unexpected = [r for r in results if isinstance(r, BaseException) and not isinstance(r, allowed)]
    assert not unexpected, f"unexpected errors: {unexpected[:3]}"


@asynccontextmanager
async def _connection(target: str | asyncpg.Connection) -> AsyncIterator[asyncpg.Connection]:
    if not isinstance(target, str):
        yield target
        return
    conn = await asyncpg.connect(dsn(target))
    try:
        yield conn
    finally:
        await conn.close()


async def lock_waiters(target: str | asyncpg.Connection) -> int:
    """How many backends of ``target``'s database wait for a lock now."""
    async with _connection(target) as conn:
        return int(await conn.fetchval(LOCK_WAITERS))


async def until_waiting(
    target: str | asyncpg.Connection,
    n: int,
    *,
    give_up: asyncio.Task[Any] | None = None,
    tries: int = 500,
) -> None:
    """Until ``n`` backends wait for a lock (polled every 10 ms, ``tries`` times), or
    ``give_up`` is done (what was to wait did not)."""
    async with _connection(target) as conn:
        for _ in range(tries):
            if give_up is not None and give_up.done():
                return
            if await lock_waiters(conn) >= n:
                return
            await asyncio.sleep(0.01)
    raise AssertionError(f"{n} statements never waited for a lock")
