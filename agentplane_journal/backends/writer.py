"""The writer both databases' hot append paths share.

What a hot path offers the store is :class:`agentplane_journal.db.hotpath.HotPath` (below this
package, so the store's shared state is typed with it); both writers here implement it.

:class:`GroupWriter` is the skeleton of both databases' writers (one per store, shared by
its tenant handles): the queue of appends, the leader tasks that drain it group by group on
a held connection, and the handing of each append's own answer back to its caller. A
database's writer (:class:`agentplane_journal.backends.postgresql.writer.Writer`,
:class:`agentplane_journal.backends.sqlite.writer.Writer`) subclasses it and supplies only
what is its own, the abstract methods: which waiting appends share a group (:meth:`_take`),
what a group runs and how its outcome is split among its appends (:meth:`_execute`), what
the appends of a group hear when its leader is interrupted (:meth:`_interrupted`), what each
answer becomes on its way to its caller (:meth:`_heard`), and what becomes of a connection a
group failed on (:meth:`_abandon`). What the skeleton keeps, for both:

* **Every append handed to the writer is answered once**, in the time its group takes: by
  its group's answer (or by :meth:`_interrupted` if its leader is cancelled with the group in
  flight); by :class:`BackendError` when no connection could be checked out (its group was
  never sent); by :class:`BackendError` when the last leader stops (is cancelled) with
  appends still queued. An append whose caller is cancelled before its group is sent is left
  out of the group, so nothing of it is sent; one cancelled later still passes through
  :meth:`_heard` (PostgreSQL's known heads see its outcome), though nobody hears it.
* **No lost wakeup**: a leader leaves the set of running leaders in its own ``finally``, not
  in a done callback, which runs a loop turn later: an append arriving in between would see
  the finished leader as running, start none, and wait until some other append came along
  (``tests/test_writer_faults_pg.py``, the late append).
* **The engine's pool, held and shared**: a leader keeps one of the engine's own pooled
  connections checked out while appends keep arriving (a writer woken by its answer that
  appends again at once finds it still there: back-to-back appends skip the pool's checkout
  and checkin), and gives it back as soon as one turn of the event loop brings nothing new,
  or after each group when the pool has nothing left for anyone else
  (:mod:`~agentplane_journal.backends.pool_share`).
* **Up to** ``connections`` **leaders**, each on its own connection: a leader is started
  when an append arrives and no leader is free to take it. PostgreSQL runs several when
  group commit is off; SQLite runs one (its database has one writer at a time: see its
  module).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, Protocol, TypeVar

from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from agentplane_journal.backends import pool_share as _pool
from agentplane_journal.backends.head_cache import HeadCache
from agentplane_journal.core.append import Append
from agentplane_journal.core.ids import RunId
from agentplane_journal.core.profile import AGENTPLANE_0_4, WireProfile
from agentplane_journal.core.record import Record
from agentplane_journal.core.signing import Signer
from agentplane_journal.db.hotpath import LogSeal
from agentplane_journal.errors import BackendError

__all__ = ["GroupWriter", "Waiting"]


def _unreachable(exc: Exception) -> BackendError:
    """What a caller hears when no connection could be had for its group (never sent)."""
    if isinstance(exc, PoolTimeoutError):
        return BackendError(
            f"cannot reach the database: no pooled connection came free in time: {exc}"
        )
    return BackendError(f"cannot reach the database: {exc}")


class Waiting(Protocol):
    """One append in a writer's queue: where its caller waits for its answer."""

    future: asyncio.Future[Any]


R = TypeVar("R", bound=Waiting)
T = TypeVar("T")


class GroupWriter(ABC, Generic[R, T]):
    """A database's write queue for one store (see the module): appends ``R`` wait in it
    until a leader carries them in a group, and each caller is answered with a ``T`` or an
    exception.

    ``bind`` is the engine the writer's connections come from, ``heads`` the store's known
    heads, ``connections`` how many leaders (each on its own connection) may run at once.
    """

    def __init__(
        self, bind: AsyncEngine, heads: HeadCache, *, group_commit: bool, connections: int
    ) -> None:
        self.group_commit = group_commit
        self._bind = bind
        self._heads = heads
        self._limit = max(1, int(connections))
        self._pending: list[R] = []
        self._leaders: set[asyncio.Task[None]] = set()
        self._free = 0  # leaders not in a group (each takes the queue's head soon)

    # -- what each database supplies ---------------------------------------------------

    @abstractmethod
    def _take(self) -> list[R]:
        """Remove the next group's appends from ``_pending`` and return them (with group
        commit, several; none if every waiting caller was cancelled). Skips an append whose
        future is done: its caller was cancelled before it was sent."""

    @abstractmethod
    async def _execute(self, driver: Any, group: list[R]) -> tuple[list[T | BaseException], bool]:
        """Run ``group`` on the driver's own connection: one answer per append, in order (its
        records, or the exception its caller gets), and whether the connection is still fit
        for the next group. Raises only when interrupted (see :meth:`_interrupted`)."""

    @abstractmethod
    def _interrupted(self, group: list[R], exc: BaseException) -> None:
        """Answer ``group`` when :meth:`_execute` raised ``exc`` (the leader was cancelled
        with the group in flight), before the exception goes on."""

    @abstractmethod
    def _heard(self, request: R, answer: T | BaseException) -> T | BaseException:
        """What the caller of ``request`` is answered for ``answer``; called for every
        answer, also when that caller has gone (cancelled) and will not hear it."""

    @abstractmethod
    async def _abandon(self, conn: AsyncConnection) -> None:
        """What becomes of ``conn`` after a group that left it unfit, or that was
        interrupted, before it goes back to the pool."""

    # -- the skeleton --------------------------------------------------------------------

    def remember(self, tenant: str, run_id: str, record: Record) -> None:
        """Know ``record`` as the run's head (a general unit committed it): the run's next
        append chains onto it without reading it back."""
        self._heads.put(tenant, run_id, record.seq, record.hash)

    async def admit(
        self,
        tenant: str,
        signer: Signer | None,
        now: int,
        run: RunId,
        owner: str,
        expires_at: int,
        items: Sequence[Append],
        keys: Sequence[str],
        profile: WireProfile = AGENTPLANE_0_4,
        after: int | None = None,
    ) -> list[Record] | None:
        """Not on this path unless a database's writer says otherwise: ``None``."""
        return None

    async def conclude(
        self,
        tenant: str,
        signer: Signer | None,
        now: int,
        run: RunId,
        epoch: int,
        items: Sequence[Append],
        outcome: str,
        seal: LogSeal,
        profile: WireProfile = AGENTPLANE_0_4,
        *,
        counter: str = "",
        max_index: int = 0,
    ) -> list[Record] | None:
        """Not on this path unless a database's writer says otherwise: ``None``."""
        return None

    async def submit(self, request: R) -> T:
        """Queue ``request`` and wait for its answer (raised when it is an exception)."""
        self._pending.append(request)
        self._spawn()
        answer: T = await request.future
        return answer

    def _spawn(self) -> None:
        """A leader for the queue if none is free and fewer than ``connections`` run."""
        if self._free == 0 and (len(self._leaders) < self._limit or self._reap()):
            task = asyncio.get_running_loop().create_task(self._lead())
            self._leaders.add(task)
            task.add_done_callback(self._leaders.discard)

    def _reap(self) -> bool:
        """Drop the leaders that are done; whether there were any. A leader leaves the set
        in its own ``finally`` (see :meth:`_lead`), but one cancelled before it ever ran has
        none, and its done callback comes a loop turn later."""
        for task in self._leaders:
            if task.done():
                break
        else:
            return False
        self._leaders.difference_update([task for task in self._leaders if task.done()])
        return True

    async def idle(self) -> None:
        """Wait until the queue is drained and every connection is back in the pool."""
        self._reap()
        while self._leaders:
            await asyncio.wait(list(self._leaders))
            self._reap()

    async def _lead(self) -> None:
        """Drain the queue, one group at a time, on a connection held while work arrives."""
        self._free += 1
        try:
            while self._pending:
                short = False
                try:
                    async with self._connection() as conn:
                        driver = (await conn.get_raw_connection()).driver_connection
                        while not short and await self._more():
                            group = self._take()
                            if not group:
                                continue
                            self._free -= 1
                            try:
                                usable = await self._run(driver, group)
                            except BaseException:
                                await self._abandon(conn)
                                raise
                            finally:
                                self._free += 1
                            if not usable:
                                await self._abandon(conn)
                                break  # take another connection for what is left
                            short = _pool.is_short(self._bind)  # others may be waiting
                except Exception as exc:
                    # Checking out or opening the connection (a DBAPIError, an OSError, the
                    # pool's TimeoutError...): the next group was never sent.
                    group = self._take()
                    error = _unreachable(exc)
                    self._answer(group, [error] * len(group))
                if short:
                    await _pool.hand_over(self._bind)
        finally:
            self._free -= 1
            # Leave the set now, not in a done callback: the callback runs a loop turn later,
            # and an append arriving in between would see this finished leader as running and
            # start none, then wait until some other append came along (a lost wakeup).
            self._leaders.discard(asyncio.current_task())
            if self._pending and not self._leaders:
                # Stopped (cancelled) with appends still queued: nobody would answer them.
                stopped = BackendError("the append writer stopped before sending this append")
                queued, self._pending = self._pending, []
                self._answer(queued, [stopped] * len(queued))

    def _connection(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """The connection a leader drains the queue on, given back to the pool when it ends
        (a database's writer may hand over one it holds: SQLite's lone append's)."""
        return self._bind.connect()

    async def _more(self) -> bool:
        if not self._pending:
            await asyncio.sleep(0)  # let the writers just answered append again
        return bool(self._pending)

    async def _run(self, driver: Any, group: list[R]) -> bool:
        """Run one group and answer its appends; ``False`` if the connection is unfit."""
        try:
            answers, usable = await self._execute(driver, group)
        except BaseException as exc:
            self._interrupted(group, exc)
            raise
        self._answer(group, answers)
        return usable

    def _answer(self, group: Sequence[R], answers: Sequence[T | BaseException]) -> None:
        """Hand each append its own answer (once: a done future is never set again)."""
        for request, answer in zip(group, answers, strict=True):
            heard = self._heard(request, answer)
            if request.future.done():
                continue
            if isinstance(heard, BaseException):
                request.future.set_exception(heard)
            else:
                request.future.set_result(heard)
