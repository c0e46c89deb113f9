"""The PostgreSQL append writer: a held connection, and optional group commit.

Part of the repository (see :mod:`agentplane_journal.backends.dispatch`, which sends the hot
appends here, and :mod:`agentplane_journal.backends.postgresql.sql`, the statements). The
queue, its leaders and the answering of each append are the skeleton both databases share
(:class:`~agentplane_journal.backends.writer.GroupWriter`); this module and its two parts
hold what a group is and does on PostgreSQL: what is queued and answered
(:mod:`~agentplane_journal.backends.postgresql.answers`) and how a group is sent
(:mod:`~agentplane_journal.backends.postgresql.sending`). Two costs go away:

* **The pool's checkout and checkin.** Through SQLAlchemy each is several greenlet switches
  and pool bookkeeping, about 40% of a lone writer's client CPU. One :class:`Writer` per
  store (shared by its tenant handles) queues the process's hot appends; a leader task keeps
  one of the engine's own pooled connections checked out while appends keep arriving and
  returns it as soon as one turn of the event loop brings nothing new. Up to
  ``connections`` leaders run at once, each on its own connection, so that many statements
  are in flight.
* **One WAL flush per append** (group commit, ``group_commit=True``): appends to distinct
  runs of one tenant that arrive while a leader's statement is in flight share its next
  statement, :data:`~agentplane_journal.backends.postgresql.sql.MANY`, whose checks are per
  run, so each append keeps its own all-or-nothing outcome and its own error (fenced,
  sealed, duplicate effect; a stale head sends that append alone to the general unit of
  work). A statement the server refuses as a whole (a unique violation the checks did not
  foresee, a deadlock, a timeout) wrote nothing; its appends are then run one by one. A
  unique violation is read by the constraint it names
  (:mod:`agentplane_journal.db.violations`): the exactly-once index is a duplicate effect,
  the primary key a position taken meanwhile (the general unit of work retries under the
  run mutex), any other index the server's error. A group of one is the single-run
  statement, exactly as without group commit. Whatever else waited (other tenants' appends,
  admissions, conclusions) rides the same turn: each its own statement, all in one
  transaction, one commit (:mod:`~agentplane_journal.backends.postgresql.together`).

A turn's lone statement is autocommitted: a connection lost with one in flight is
:class:`CommitUnknownError` for every append it carried; an answered error surely rolled
back. Behind a transaction pooler (no statement cache) each statement runs as its
server-side function (revision ``0007_pooled_append``: planned once per server connection,
not per append) inside ``BEGIN``/``COMMIT``, which keeps its two protocol exchanges on one
server connection.
The :class:`~agentplane_journal.backends.head_cache.HeadCache` is filled here after a commit
only, and dropped on any other answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from agentplane_journal.backends.head_cache import HeadCache
from agentplane_journal.backends.postgresql import conclude as _conclude
from agentplane_journal.backends.postgresql.answers import (
    GENERAL,
    Answer,
    Conclusion,
    GeneralAnswer,
    Request,
    Result,
    unknown,
)
from agentplane_journal.backends.postgresql.together import Together
from agentplane_journal.backends.writer import GroupWriter
from agentplane_journal.core.append import Append
from agentplane_journal.core.batch import chain_batch
from agentplane_journal.core.ids import Digest, EffectKey, RunId
from agentplane_journal.core.profile import AGENTPLANE_0_4, WireProfile
from agentplane_journal.core.record import Record
from agentplane_journal.core.signing import Signer
from agentplane_journal.db.hotpath import General, LogSeal
from agentplane_journal.db.turns import WriteTurn

# GENERAL, Answer, Request and Result are answers.py's, importable from here as before.
__all__ = ["GENERAL", "Answer", "Request", "Result", "Writer", "open_path", "schema_of"]

#: At most this many runs, and records, share one statement (a larger batch goes alone).
MAX_GROUP_RUNS = 64
MAX_GROUP_ROWS = 1000
#: Statements in flight at once without group commit (each on its own held connection).
UNGROUPED_CONNECTIONS = 8


def schema_of(bind: AsyncEngine) -> tuple[bool, str | None]:
    """Whether the writer can name the tables (and their schema) for ``bind``'s statements."""
    mapping = bind.get_execution_options().get("schema_translate_map") or {}
    if not mapping:
        return True, None
    if set(mapping) == {None}:
        return True, mapping[None]
    return False, None  # per-table maps: the general path's compiler applies them


class Writer(Together, GroupWriter[Request, Result]):
    """The process's PostgreSQL hot-append queue for one store (see the module).

    What is PostgreSQL's own, beside :class:`~agentplane_journal.backends.writer.GroupWriter`:
    a group is one tenant's appends to distinct runs (one statement carries one tenant, and
    checks each run on its own); up to ``connections`` groups are in flight at once (the
    server runs concurrent statements; without group commit that is what lets many writers
    overlap); an answer fills or drops the known head here, where the outcome is known;
    an interrupted group is :class:`CommitUnknownError` (the autocommitted statement may
    have landed); and a connection a group failed on is invalidated, never pooled again.
    """

    def __init__(
        self,
        bind: AsyncEngine,
        heads: HeadCache,
        *,
        group_commit: bool = True,
        connections: int = 1,
    ) -> None:
        super().__init__(bind, heads, group_commit=group_commit, connections=connections)
        self.usable, self._schema = schema_of(bind)
        #: Each tenant's log as this process last wrote or read it (:mod:`.conclude`).
        self._logs: dict[str, _conclude.KnownLog] = {}

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
        """:class:`~agentplane_journal.db.hotpath.HotPath`'s append: chain the batch onto
        the known head here, in the caller's task, and send it; ``general()`` without a
        known head, or when the statement says so (``unless_cancelled``: also when it found
        a stop request, which the general unit then reads and answers)."""
        run_id = str(run)
        head = self._heads.get(tenant, run_id)
        if head is None or not self.usable:
            records = await general()
        else:
            chained, rows, _ = chain_batch(
                tenant, run_id, epoch, head[0], head[1], items, signer, profile
            )
            future = asyncio.get_running_loop().create_future()
            answer = await self.submit(
                Request(
                    tenant, run, epoch, now, head, chained, rows, keys, future, unless_cancelled
                )
            )
            records = await general() if isinstance(answer, GeneralAnswer) else answer
        if records:
            self._heads.put(tenant, run_id, records[-1].seq, records[-1].hash)
        return records

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
        """:class:`~agentplane_journal.db.hotpath.HotPath`'s admission: a fresh run's in one
        statement (:data:`.conclude.ADMIT`), or ``None`` (the general unit) for a run that is
        not fresh, more than one key, a caller that read the run at a head other than 0
        (``after``: the general unit says where the head is), or when the statement says so."""
        if not self.usable or len(keys) > 1 or after not in (None, 0):
            return None
        run_id = str(run)
        chained, rows, _ = chain_batch(tenant, run_id, 1, 0, Digest.ZERO, items, signer, profile)
        future = asyncio.get_running_loop().create_future()
        answer = await self.submit(
            Request(
                tenant,
                run,
                1,
                now,
                (0, Digest.ZERO),
                chained,
                rows,
                [],
                future,
                admit=(owner, expires_at, keys[0] if keys else None),
            )
        )
        if isinstance(answer, GeneralAnswer):
            return None
        return answer

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
        """:class:`~agentplane_journal.db.hotpath.HotPath`'s conclusion: one statement
        (:mod:`.conclude`) onto the known head and the known log, or ``None`` (the general
        unit) without them or when the statement says so. Its own statement: a tenant's
        conclusions in one turn (:mod:`.together`) run one after another in its
        transaction, each onto the log the last one left, and share its commit."""
        run_id = str(run)
        head = self._heads.get(tenant, run_id)
        if head is None or not self.usable or not counter:
            return None
        chained, rows, conclusion = chain_batch(
            tenant, run_id, epoch, head[0], head[1], items, signer, profile
        )
        if conclusion is None:
            return None
        future = asyncio.get_running_loop().create_future()
        answer = await self.submit(
            Request(
                tenant,
                run,
                epoch,
                now,
                head,
                chained,
                rows,
                [],
                future,
                False,
                Conclusion(counter, conclusion, outcome, bytes(chained[-1].hash), max_index),
            )
        )
        if isinstance(answer, GeneralAnswer):
            return None
        return answer

    def _take(self) -> list[Request]:
        """The next turn's writes: the first waiting one, and with group commit every other
        waiting write to another run (within the turn's bounds), whatever its tenant or kind:
        :mod:`.together` runs them in one transaction."""
        group: list[Request] = []
        rest: list[Request] = []
        runs: set[RunId] = set()
        rows = 0
        for request in self._pending:
            if request.future.done():
                continue  # its caller was cancelled before it was sent
            if not group or (
                self.group_commit
                and request.run not in runs
                and len(group) < MAX_GROUP_RUNS
                and rows + len(request.rows) <= MAX_GROUP_ROWS
            ):
                group.append(request)
                runs.add(request.run)
                rows += len(request.rows)
            else:
                rest.append(request)
        self._pending = rest
        if rest:
            self._spawn()  # another connection for what this statement cannot carry
        return group

    async def _execute(self, driver: Any, group: list[Request]) -> tuple[list[Answer], bool]:
        """One statement for ``group``: the answers, and ``False`` if the connection was lost."""
        if driver.is_closed():
            # The server closed this pooled connection while it was idle (a restart, an
            # idle timeout, a terminated backend): nothing was sent, so nothing is unknown.
            # The general unit of work runs each append on a fresh connection.
            return [GENERAL] * len(group), False
        return await self._turn(driver, group)

    def _interrupted(self, group: list[Request], exc: BaseException) -> None:
        # Interrupted with the statement in flight (the leader cancelled): autocommitted,
        # it may have landed.
        self._answer(group, [unknown(exc)] * len(group))

    async def _abandon(self, conn: AsyncConnection) -> None:
        # Lost, closed by the server, or interrupted mid-statement (its answer may still
        # be on the wire): no later statement may run on it.
        await conn.invalidate()

    def _heard(self, request: Request, answer: Answer) -> Answer:
        # The known head: the records' last after a commit, dropped on any other answer
        # (an unknown commit, a refusal, the general unit's turn, which fills it itself).
        if isinstance(answer, list):
            self._heads.put(request.tenant, str(request.run), answer[-1].seq, answer[-1].hash)
        else:
            self._heads.drop(request.tenant, str(request.run))
        return answer


def open_path(
    *,
    bind: AsyncEngine,
    engine: AsyncEngine,
    heads: HeadCache,
    group_commit: bool,
    turn: WriteTurn | None = None,
    parks: Callable[[], bool] | None = None,
) -> Writer:
    """The PostgreSQL hot path (``parks`` is SQLite's). Group commit: one statement in
    flight, carrying every append that waited for it (a second connection would split the
    groups). Without: one per writer, up to as many as a small pool holds."""
    return Writer(
        bind,
        heads,
        group_commit=group_commit,
        connections=1 if group_commit else UNGROUPED_CONNECTIONS,
    )
