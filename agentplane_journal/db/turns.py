"""A process's write transactions taking turns before they ask SQLite for its write lock.

SQLite has one writer at a time. A second connection's ``BEGIN IMMEDIATE`` does not queue:
it fails with ``SQLITE_BUSY`` and the busy handler retries it after sleeps of 1, 2, 5, 10 ..
up to 100 ms, so in-process writers on separate connections (the store's general units of
work, beside its append writer) lose milliseconds to sleeping whenever they meet. A
:class:`WriteTurn` per store (its dialect's ``write_turns``) makes them wait in the process
instead, on an ``asyncio.Lock``, handed over the moment the previous transaction ends.
Other processes still meet on the database's lock, as before.

A turn is waited for at most the busy timeout: a writer whose turn does not come in that
time (something holds it that long, such as a host's ``append_atomic`` work waiting on the
writer itself) goes on to the database, whose busy handler then judges as it did without
turns. So a turn never turns a wait into a deadlock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agentplane_journal.db.dialect import SQLITE_BUSY_TIMEOUT_MS

__all__ = ["WriteTurn"]


class WriteTurn:
    """One store's write transactions, one at a time in this process (see the module)."""

    def __init__(self, timeout: float = SQLITE_BUSY_TIMEOUT_MS / 1000) -> None:
        self._lock = asyncio.Lock()
        self._timeout = timeout

    def free(self) -> bool:
        """Whether the turn is free with nobody queued for it: :meth:`acquire_free` then
        takes it without yielding, as :meth:`taken` does."""
        lock = self._lock
        return not lock.locked() and not getattr(lock, "_waiters", None)

    async def acquire_free(self) -> None:
        """Take the turn :meth:`free` just said is free (never waits then); give it back
        with :meth:`release`. For a hot path that cannot afford :meth:`taken`'s context
        manager (a generator resumed on entry and exit)."""
        await self._lock.acquire()

    def release(self) -> None:
        """Give back the turn :meth:`acquire_free` took."""
        self._lock.release()

    @asynccontextmanager
    async def taken(self) -> AsyncIterator[None]:
        """Hold the turn inside (or, after the timeout, go on without it)."""
        got = False
        lock = self._lock
        if not lock.locked() and not getattr(lock, "_waiters", None):
            # Free and nobody queued for it: taken at once, without yielding (asyncio.Lock's
            # own fast path), so no timer is armed for a wait that cannot happen.
            got = await lock.acquire()
            try:
                yield
            finally:
                lock.release()
            return
        try:
            # asyncio.timeout, not wait_for: Lock.acquire, cancelled by it, never leaves the
            # lock taken (wait_for runs it in a task of its own, which could).
            async with asyncio.timeout(self._timeout):
                got = await self._lock.acquire()
        except TimeoutError:
            pass  # held that long: the database's busy handler judges, as without turns
        try:
            yield
        finally:
            if got:
                self._lock.release()
