"""The SQLite append hot path: one thread hop per transaction, and optional group commit.

Part of the repository (see :mod:`agentplane_journal.backends.dispatch`). aiosqlite runs
each call on its connection's thread and wakes the event loop for each result; the general
unit of work makes several such hops per statement. Here a whole transaction (``BEGIN IMMEDIATE``,
and per append: one statement reading the fence, the seal, the activity and the head; the
records; then ``COMMIT``) is one function run on that thread. ``BEGIN IMMEDIATE`` holds the
database's write lock throughout (on SQLite that lock is the run mutex), so every read in
it is current; durability is the connection's ``synchronous`` (the store sets ``FULL``: the
commit is on disk before any append in it is acknowledged; WAL mode then costs one
``fdatasync`` per commit, the least a durable commit can cost).

**The known head** (the store's ``HeadCache``, as on PostgreSQL): after a commit the process
remembers each run's head ``(seq, hash)``. The next append chains and signs its batch on the
event loop onto it, and the transaction only checks that the head row's ``seq`` and
``hash`` columns are still those, instead of re-hashing the whole row; any other head is
re-hashed from its row and the batch sealed again there (a forged one is refused). An
append also writes the run's activity row only when it is missing or behind the clock:
rewriting it with its own value would cost one more page in the WAL, written and synced at
every commit (an append then writes what a bare ``INSERT`` of its row writes).

One :class:`Writer` per store (shared by its tenant handles) queues the process's appends,
so in-process writers wait on the queue instead of on SQLite's busy handler, which sleeps
in steps of milliseconds. Other processes still queue on ``BEGIN IMMEDIATE``. The queue,
its leader and the answering of each append are the skeleton both databases share
(:class:`~agentplane_journal.backends.writer.GroupWriter`); what a transaction is and does
on SQLite is :mod:`agentplane_journal.backends.sqlite.transaction`'s, and :class:`Writer`
says where the two databases differ.

**Group commit** (on unless ``group_commit=False``): appends that arrive while a
transaction is in flight share the next one, each inside its own ``SAVEPOINT``, so each
keeps its own all-or-nothing outcome and its own error (fenced, sealed, duplicate effect,
corrupt head) while the group pays for one commit and one hop. A lone writer's append is a
group of one, run exactly as without group commit (no savepoint).

**A lone caller runs its own hop** (:meth:`Writer.submit`): when nothing is queued, no
leader runs and no other lone hop is in flight, the caller's own task takes the transaction
to aiosqlite's thread and hears aiosqlite's answer itself. Queueing it for a leader task
would cost the queue, the leader's bookkeeping and a second wake-up of the loop per append
(the leader's, beside the caller's), for nobody to share the commit with (a few µs a
LangGraph turn, measured: docs/performance.md). Appends that
arrive while that hop is in flight queue as before; their leader waits for the write turn
the lone hop holds, then carries them all in one group. Between lone appends the
connection stays checked out ("parked") for :data:`PARK_SECONDS`, as a leader keeps its
own while appends keep arriving, so one caller's appends skip the pool's checkout and
checkin (a ``ROLLBACK`` hop and about 140 µs of the loop's time) even when the loop turns
between them, as it does between a graph's steps; a pool with nothing left for others when
the append ends gets it back at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from agentplane_journal.backends import pool_share as _pool
from agentplane_journal.backends.head_cache import HeadCache
from agentplane_journal.backends.sqlite.transaction import (
    INSERT,
    Request,
    transaction,
    translate,
)
from agentplane_journal.backends.writer import GroupWriter, _unreachable
from agentplane_journal.core.append import Append
from agentplane_journal.core.batch import chain_batch
from agentplane_journal.core.ids import Digest, EffectKey, RunId
from agentplane_journal.core.profile import AGENTPLANE_0_4, WireProfile
from agentplane_journal.core.record import Record
from agentplane_journal.core.signing import Signer
from agentplane_journal.db.hotpath import General, LogSeal
from agentplane_journal.db.turns import WriteTurn
from agentplane_journal.errors import BackendError

__all__ = ["Writer", "open_path"]

#: The rows' INSERT, where bench/sqlite_bound.py imports it from.
_INSERT = INSERT

#: How long the last lone append's connection stays checked out for the next one (see the
#: module). Giving a connection back costs a hop (the pool's ``ROLLBACK``), taking one out
#: again about 140 µs of the event loop's time; a graph's own steps between two checkpoints
#: (without I/O of their own) take less than this. Nothing is held meanwhile (no
#: transaction, no snapshot). A pool with no connection left for others when the append
#: ends gets it back at once; one that runs short later gets it back at the latest this
#: long after (its waiter waits that long).
PARK_SECONDS = 0.01


class Writer(GroupWriter[Request, list[Record]]):
    """The process's SQLite write queue for one store: one transaction in flight at a time.

    What is SQLite's own, beside :class:`~agentplane_journal.backends.writer.GroupWriter`:

    * **One leader, one connection.** SQLite has one writer per database file: a second
      connection's ``BEGIN IMMEDIATE`` would only wait for the first one's ``COMMIT``, in
      the busy handler's millisecond sleeps. So the appends queue here, one transaction at a
      time, and the next group is every append that arrived meanwhile, whatever its tenant
      or run (savepoints keep each one's outcome its own, and a second append to a run
      re-reads the head the first one wrote).
    * **The head is remembered in** :meth:`append` (in the caller's task), not when the
      group is answered: the answer is final there, and an append that raised for any
      reason drops it.
    * **An interrupted group is cancelled**, not answered: the transaction function goes on
      running on aiosqlite's thread, where it commits or rolls back by itself, so its
      callers hear :class:`asyncio.CancelledError`, as a caller cancelled mid-append does
      (unless the transaction had ended first: its callers were then answered from the
      thread, see :meth:`_hop`, with the outcome that is known).
    * **A connection is never invalidated here**: the transaction function ends its own
      transaction before it returns, whatever became of the task waiting for it, so the
      connection goes back to the pool clean, and one aiosqlite has closed fails the pool's
      reset on return and is discarded there.
    * Errors reach the caller as :class:`BackendError` (:func:`translate`).
    """

    def __init__(
        self,
        engine: AsyncEngine,
        heads: HeadCache,
        *,
        group_commit: bool = True,
        turn: WriteTurn | None = None,
        parks: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(engine, heads, group_commit=group_commit, connections=1)
        self._turn = turn
        #: Whether a lone append's connection may stay checked out (:data:`PARK_SECONDS`):
        #: only on an engine the store disposes of itself (``close`` gives it back first).
        #: A host's engine may be disposed of at any moment, and a connection checked out
        #: then is left to the garbage collector, its thread to a closed loop.
        self._parks = parks
        #: A lone caller's hop is in flight (None: none is). Whoever must wait for it to end
        #: asks :meth:`_lone_ended` for a future, made only then: a lone caller alone (the
        #: usual case) makes none.
        self._lone: object | None = None
        self._lone_waiter: asyncio.Future[None] | None = None
        #: The connection the last lone hop left checked out, with its aiosqlite connection,
        #: when (the loop's clock), and the timer that gives it back once it is that old.
        self._parked: tuple[AsyncConnection, Any] | None = None
        self._parked_at = 0.0
        self._reaper: asyncio.TimerHandle | None = None
        self._releasing: set[asyncio.Task[None]] = set()

    async def submit(self, request: Request) -> list[Record]:
        """Queue ``request`` for a leader, or run it alone in the caller's task when
        nothing is queued, no leader runs and no lone hop is in flight (see the module)."""
        if self._lone is not None or self._leaders or self._pending:
            return await super().submit(request)
        return await self._alone(request)

    async def _alone(self, request: Request) -> list[Record]:
        """``request``'s transaction, one hop, in the caller's task. Appends arriving
        meanwhile see ``_lone`` and queue; the first of them starts a leader (on its own
        connection), which runs their group after this hop gives up the write turn.

        The hop is awaited here, not through :meth:`_execute` and :meth:`_hop` (the same
        steps, each its own coroutine frame, resumed in turn when the answer comes): with a
        parked connection and the write turn free, nothing here yields but the hop itself.
        """
        self._lone = _LONE
        held, self._parked = self._parked, None
        usable = False
        try:
            if held is None:
                held = await self._check_out()
            turn = self._turn
            if turn is None or not turn.free() or _pool.is_short(self._bind):
                answers, usable = await self._execute(held[1], [request], early=False)
            else:
                # The turn's own fast path (WriteTurn.taken: free, nobody queued), inline.
                await turn.acquire_free()
                try:
                    driver = held[1]
                    answers, usable = (
                        await driver._execute(transaction, driver._conn, [request]),
                        True,
                    )
                except Exception as exc:
                    answers, usable = _hop_failed(exc, 1)
                finally:
                    turn.release()
        finally:
            self._lone = None
            waiter = self._lone_waiter
            if waiter is not None:
                self._lone_waiter = None
                waiter.set_result(None)
            if held is not None:
                parks = self._parks is not None and self._parks()
                if usable and parks and not _pool.is_short(self._bind):
                    self._park(held)
                else:  # unfit, interrupted, or others wait for the pool: give it back
                    self._release(held[0])
        answer = answers[0]
        if isinstance(answer, BaseException):
            raise translate(answer)
        return answer

    async def _lone_ended(self) -> None:
        """Return once the lone hop in flight (if any) has ended."""
        if self._lone is None:
            return
        if self._lone_waiter is None:
            self._lone_waiter = asyncio.get_running_loop().create_future()
        await asyncio.wait([self._lone_waiter])

    async def _check_out(self) -> tuple[AsyncConnection, Any]:
        """A pooled connection and its aiosqlite connection, or the error a leader answers
        when it cannot get one (nothing was sent)."""
        try:
            conn = await self._bind.connect()
        except Exception as exc:
            raise _unreachable(exc) from exc
        try:
            driver = (await conn.get_raw_connection()).driver_connection
        except BaseException as exc:
            self._release(conn)
            if isinstance(exc, Exception):
                raise _unreachable(exc) from exc
            raise
        return conn, driver

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection]:
        """A leader's connection: the one the lone hop in flight holds, once that hop ends,
        or a parked one. Appends that queued behind a lone hop then share one connection with
        it: a second one would be checked out (on a fresh pool, opened: its set-up is several
        hops) only to wait for the write turn the lone hop holds."""
        await self._lone_ended()  # it parks its connection as it ends, if fit
        held, self._parked = self._parked, None
        if held is None:
            async with self._bind.connect() as conn:
                yield conn
            return
        try:
            yield held[0]
        finally:
            await held[0].close()  # back to the pool, as `async with connect()` gives it

    def _park(self, held: tuple[AsyncConnection, Any]) -> None:
        """Keep ``held`` for the next lone append if it comes within :data:`PARK_SECONDS`.
        One timer at a time, not one per append (arming and cancelling a timer per append
        cost the loop as much as the leader it replaces): it re-arms itself for what is left
        while the connection keeps being parked anew."""
        self._parked = held
        loop = asyncio.get_running_loop()
        self._parked_at = loop.time()
        if self._reaper is None:
            self._reaper = loop.call_later(PARK_SECONDS, self._unpark)

    def _unpark(self) -> None:
        self._reaper = None
        if self._parked is None:
            return  # taken (and not parked again) or given back by idle()
        loop = asyncio.get_running_loop()
        left = self._parked_at + PARK_SECONDS - loop.time()
        if left > 0:
            self._reaper = loop.call_later(left, self._unpark)
        else:  # no lone append came for it: back to the pool
            held, self._parked = self._parked, None
            self._release(held[0])

    def _release(self, conn: AsyncConnection) -> None:
        """Give ``conn`` back to the pool in a task of its own (its reset is a hop to the
        thread, behind whatever transaction is still running there)."""
        task = asyncio.get_running_loop().create_task(self._close(conn))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    @staticmethod
    async def _close(conn: AsyncConnection) -> None:
        with contextlib.suppress(Exception):  # the pool discards one whose reset failed
            await conn.close()

    async def idle(self) -> None:
        """Wait until no lone hop is in flight, the queue is drained and every connection,
        the parked one included, is back in the pool."""
        while True:
            await self._lone_ended()
            await super().idle()
            if self._parked is not None:
                held, self._parked = self._parked, None
                self._release(held[0])
            if self._releasing:
                await asyncio.wait(list(self._releasing))
            if self._lone is None and not self._leaders and not self._releasing:
                return

    def _take(self) -> list[Request]:
        take = len(self._pending) if self.group_commit else 1
        group = [r for r in self._pending[:take] if not r.future.done()]
        del self._pending[:take]
        return group

    async def _execute(
        self, driver: Any, group: list[Request], *, early: bool = True
    ) -> tuple[list[list[Record] | BaseException], bool]:
        """One hop to the connection's thread: ``group``'s transaction (see
        :func:`transaction` and :meth:`_hop`; ``early``: answer the callers from the thread,
        which a lone caller, awaiting the hop itself, does not need)."""
        try:
            if self._turn is None or _pool.is_short(self._bind):
                # No turn while this writer holds the pool's last connection: the store's
                # other write units take their turn before they check one out, so one that
                # holds the turn may be waiting for this very connection (a deadlock until
                # the pool's timeout). Without the turn the database's lock judges, as it
                # did before turns; a short pool then gets the connection back at once.
                answers: list[list[Record] | BaseException] = await self._hop(driver, group, early)
            else:
                async with self._turn.taken():  # after the store's other write transactions
                    answers = await self._hop(driver, group, early)
        except Exception as exc:
            return _hop_failed(exc, len(group))
        return answers, True

    async def _hop(
        self, driver: Any, group: list[Request], early: bool = True
    ) -> list[list[Record] | BaseException]:
        """``group``'s transaction on aiosqlite's thread (:func:`transaction`), through
        aiosqlite's own queue (``_execute``; with the ``sqlite3`` connection it owns,
        ``_conn``: both private, present since 0.17). The callers are answered from that
        thread as the transaction ends, ahead of aiosqlite's answer to the leader: in the
        loop turn that wake brings, one turn sooner than through the leader, which answers
        again (a done future is never set twice). Not for a lone caller (``early`` false),
        which awaits this hop itself and hears aiosqlite's answer."""
        if not early:
            alone: list[list[Record] | BaseException] = await driver._execute(
                transaction, driver._conn, group
            )
            return alone
        loop = asyncio.get_running_loop()

        def run(conn: sqlite3.Connection) -> list[list[Record] | BaseException]:
            answers = transaction(conn, group)  # raises only when no answer is known
            try:
                loop.call_soon_threadsafe(self._answer, group, answers)
            except RuntimeError:
                pass  # the loop has closed: nobody is left to hear it
            return answers

        answers: list[list[Record] | BaseException] = await driver._execute(run, driver._conn)
        return answers

    def _interrupted(self, group: list[Request], exc: BaseException) -> None:
        for request in group:
            if not request.future.done():
                request.future.cancel()

    async def _abandon(self, conn: AsyncConnection) -> None:
        return None  # see the class: the connection goes back to the pool as it is

    def _heard(
        self, request: Request, answer: list[Record] | BaseException
    ) -> list[Record] | BaseException:
        return translate(answer) if isinstance(answer, BaseException) else answer

    async def append(
        self,
        tenant: str,
        signer: Signer | None,
        now: int,
        run: RunId,
        epoch: int,
        items: Sequence[Append],
        keys: Sequence[EffectKey],
        general: General,
        profile: WireProfile = AGENTPLANE_0_4,
        *,
        unless_cancelled: bool = False,
    ) -> list[Record]:
        """:class:`~agentplane_journal.db.hotpath.HotPath`'s append: one thread hop
        (``general`` is unused: under ``BEGIN IMMEDIATE`` every append can be settled here).

        The run's known head (the shared :class:`HeadCache`) is read and written only here,
        on the event loop: filled after a commit, dropped on any failure (an error may be
        about the head, and a later append re-reads it from its row). With a known head the
        batch is chained and signed here, before the hop, as the PostgreSQL path does: the
        write lock is not held for it, and concurrent writers seal while a commit waits for
        its ``fsync``; the transaction uses it only if the head is still that one.
        """
        run_id, heads = str(run), self._heads
        known = heads.get(tenant, run_id)
        sealed = None
        if known is not None:
            sealed = chain_batch(tenant, run_id, epoch, known[0], known[1], items, signer, profile)[
                :2
            ]
        request = Request(
            tenant,
            run,
            epoch,
            now,
            list(items),
            signer,
            profile,
            list(keys),
            known,
            sealed,
            unless_cancelled,
            None,
            asyncio.get_running_loop().create_future(),
        )
        return await self._submit_remembering(request)

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
        """:class:`~agentplane_journal.db.hotpath.HotPath`'s admission: the lease
        claim, the records and the keys' claims in one transaction, one thread hop, sharing
        the commit of whatever else is queued. Chained here at epoch 1 (a fresh run's), and
        again on the thread if the claim got another."""
        run_id = str(run)
        sealed = chain_batch(tenant, run_id, 1, 0, Digest.ZERO, items, signer, profile)[:2]
        request = Request(
            tenant,
            run,
            1,
            now,
            list(items),
            signer,
            profile,
            [],
            (0, Digest.ZERO),
            sealed,
            False,
            (owner, expires_at, sorted(keys)),
            asyncio.get_running_loop().create_future(),
            after=after,
        )
        return await self._submit_remembering(request)

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
        """:class:`~agentplane_journal.db.hotpath.HotPath`'s conclusion: the closing records,
        the outcome index, the run's leaf in the tenant's log and the lease's release in one
        transaction, one thread hop (:mod:`.conclude`), sharing the group's commit. Chained
        here onto the known head, as :meth:`append` is; again on the thread otherwise."""
        run_id = str(run)
        known = self._heads.get(tenant, run_id)
        sealed = None
        if known is not None:
            sealed = chain_batch(tenant, run_id, epoch, known[0], known[1], items, signer, profile)[
                :2
            ]
        request = Request(
            tenant,
            run,
            epoch,
            now,
            list(items),
            signer,
            profile,
            [],
            known,
            sealed,
            False,
            None,
            asyncio.get_running_loop().create_future(),
            (outcome, seal),
        )
        return await self._submit_remembering(request)

    async def _submit_remembering(self, request: Request) -> list[Record]:
        tenant, run_id, heads = request.tenant, str(request.run), self._heads
        try:
            records = await self.submit(request)
        except BaseException:
            heads.drop(tenant, run_id)
            raise
        if records:
            last = records[-1]
            heads.put(tenant, run_id, last.seq, last.hash)
        return records


#: What ``Writer._lone`` holds while a lone caller's hop is in flight.
_LONE = object()


def _hop_failed(exc: Exception, n: int) -> tuple[list[list[Record] | BaseException], bool]:
    """The answers of a hop of ``n`` appends that raised ``exc``, and whether its connection
    is still fit: SQLite's own error (a savepoint or a rollback failed: nothing was
    committed, :func:`transaction` answers a failed COMMIT itself) is each append's
    answer; anything else never reached the database (:func:`_unsent`)."""
    if isinstance(exc, sqlite3.Error):
        return [exc] * n, True
    return [_unsent(exc)] * n, False


def _unsent(exc: Exception) -> BackendError:
    """The error for a hop that failed outside SQLite (aiosqlite's "Connection closed",
    ...): the transaction never reached COMMIT (its function ends there), so nothing of it
    was written."""
    error = BackendError(f"cannot reach the database, nothing was written: {exc}")
    error.__cause__ = exc
    return error


def open_path(
    *,
    bind: AsyncEngine,
    engine: AsyncEngine,
    heads: HeadCache,
    group_commit: bool,
    turn: WriteTurn | None = None,
    parks: Callable[[], bool] | None = None,
) -> Writer:
    """The SQLite hot path: the process's write queue for the store's engine (``bind``'s
    schema translation does not apply: SQLite has no schemas); each group's transaction
    takes ``turn`` with the store's other write transactions; ``parks``: whether the store
    owns its engine (see :class:`Writer`)."""
    return Writer(engine, heads, group_commit=group_commit, turn=turn, parks=parks)
