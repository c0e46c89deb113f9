"""The delivery queue: which registrations a worker is handed, and the cursors it moves.

A base of :class:`~agentplane_journal.push.store.SqlPushStore` (which adds registering,
reading and re-encrypting registrations), holding every statement a delivery worker runs and
the plumbing all push statements share. How the guarantees are made (each write is one SQL
statement, so concurrent callers commute):

* **The cursor never moves backwards.** ``advance`` is a single
  ``UPDATE .. SET next_seq = GREATEST(next_seq, :n)``: PostgreSQL re-evaluates the expression
  on the latest row version after waiting for the row lock, so K concurrent advances end at
  the maximum. A read-then-write in Python would let a slow advancer write an older value
  over a newer one, and the receiver would be sent records it already acknowledged forever.
* **Every failed attempt is counted.** ``attempts`` is incremented in the UPDATE itself (by
  ``retry`` and ``park``), so none is lost to a concurrent one (the backoff grows with it).
* **Longest-due first.** ``due`` orders by (next_attempt_at, task, config id), a total
  order, so a receiver that sorts late by name is not starved under saturation.
* **Giving up keeps the cursor.** A receiver that answered permanently, or outlasted the
  worker's retry ceiling, is ``park``-ed, not deleted: the row is the only record of how far
  that receiver got (agentplane 0.22.0 fixed exactly this: abandoning deleted the only
  cursor). ``due`` carries the partial due index's own predicate
  (:data:`~agentplane_journal.db.models.PUSH_DUE_PREDICATE`), so the index serves it, a
  parked row costs no sweep, and no ``due`` statement that starts after a ``park``
  committed serves that row; ``parked`` lists them and ``unpark`` re-arms one.

A stored ``parked`` flag is read as stored and checked (:func:`~.rows.parked_flag`): an
edited one is a :class:`CorruptRegistrationError` in ``.unavailable``, never a guess. What a
flipped flag costs is a delivery delayed (until ``unpark``) or resumed (duplicates the
receiver must tolerate anyway); the cursor is untouched, so delivery stays at least once,
and no secret is involved (the flag is not part of what an encrypted secret is bound to).
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

from sqlalchemy import and_, select, tuple_, type_coerce, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.types import NullType

from agentplane_journal.core.checks import MAX_I64, check_int, check_run
from agentplane_journal.core.ids import RunId
from agentplane_journal.db.models import PUSH_DUE_PREDICATE, PushDelivery
from agentplane_journal.db.unit import Repository
from agentplane_journal.errors import StoreError
from agentplane_journal.push import logsafe as logsafe
from agentplane_journal.push.rows import (
    PushListing,
    UnreadableRegistration,
    check_row,
    parked_flag,
    row_names,
)
from agentplane_journal.push.secrets import RowSecrets
from agentplane_journal.push.values import MAX_ATTEMPTS, PushRegistration
from agentplane_journal.push.values import build_unchecked as _build
from agentplane_journal.push.values import check_config_id as _check_config_id
from agentplane_journal.push.values import clip_error as _clip_error

__all__ = ["COLUMNS", "DeliveryQueue"]

# The documented logger of the push store's warnings (a row left out of a listing).
log = logging.getLogger("agentplane_journal.push.store")

_T = TypeVar("_T")

#: A registration's configuration columns (what ``get`` and ``list`` read).
COLUMNS = (
    PushDelivery.task_id,
    PushDelivery.config_id,
    PushDelivery.url,
    PushDelivery.token,
    PushDelivery.auth_scheme,
    PushDelivery.auth_credentials,
)
#: The delivery state as well: what ``due`` and ``parked`` hand out. ``parked`` is read as
#: stored (no Boolean conversion, which on SQLite is ``bool(value)``), so an edited flag is
#: reported by :func:`~agentplane_journal.push.rows.parked_flag` instead of guessed at.
_STATE = (
    *COLUMNS,
    PushDelivery.next_seq,
    PushDelivery.attempts,
    PushDelivery.next_attempt_at,
    PushDelivery.last_error,
    type_coerce(PushDelivery.parked, NullType()).label("parked"),
)
#: Every row ``parked`` lists: any flag that is not plainly false, so a NULL (which neither
#: ``parked`` nor ``NOT parked`` selects) or, on SQLite, an edited value is reported there
#: rather than hidden from both queues.
_NOT_PLAINLY_DUE = PushDelivery.parked.is_not(False)


class DeliveryQueue(Repository):
    """The push store's delivery queue: ``due``, ``advance``, ``retry``, ``park``,
    ``parked``, ``unpark`` (see :class:`~agentplane_journal.push.store.SqlPushStore`)."""

    #: Opens and encrypts a row's secrets (set by the store's constructor).
    _rows: RowSecrets

    # -- helpers ------------------------------------------------------------------------

    def _where(self, task_id: str, config_id: str) -> Any:
        return and_(
            PushDelivery.tenant == self.tenant,
            PushDelivery.task_id == task_id,
            PushDelivery.config_id == config_id,
        )

    def _unreadable(self, row: Any, error: StoreError, served: str) -> UnreadableRegistration:
        task_id, config_id = row_names(row)
        # A warning, so a worker that ignores .unavailable still cannot lose a row silently.
        log.warning("%s (%s)", error, served)
        return UnreadableRegistration(task_id, config_id, error)

    def _registration(self, row: Any) -> PushRegistration:
        """One row of :data:`_STATE` as a registration, or the :class:`StoreError` it is."""
        config = self._rows.config(row, cursor=True)
        return _build(
            PushRegistration,
            config=config,
            next_seq=row.next_seq,
            attempts=row.attempts,
            next_attempt_at=row.next_attempt_at,
            last_error=row.last_error,
            parked=parked_flag(row),
        )

    async def _serve(
        self,
        session: AsyncSession,
        base: Any,
        order: tuple[Any, ...],
        limit: int,
        served: str,
        good: builtins.list[PushRegistration],
        bad: builtins.list[UnreadableRegistration],
    ) -> None:
        """Up to ``limit`` readable registrations of ``base`` in ``order``, reading on past
        bad rows (named in ``bad``) from the last row's (unique) sort key: no row twice."""
        stmt = base.order_by(*order)
        while len(good) < limit:
            wanted = limit - len(good)
            rows = (await session.execute(stmt.limit(wanted))).all()
            for row in rows:
                try:
                    good.append(self._registration(row))
                except StoreError as exc:
                    bad.append(self._unreadable(row, exc, served))
            if len(rows) < wanted:
                return
            after = tuple(getattr(rows[-1], column.key) for column in order)
            stmt = base.where(tuple_(*order) > tuple_(*after)).order_by(*order)

    async def unit(self, fn: Callable[[AsyncSession], Awaitable[_T]], **kw: Any) -> _T:
        # Every push statement runs marked, so the log filter hides its values, and no
        # exception leaves with the statement's parameters in its chain (see logsafe).
        try:
            with logsafe.push_statements():
                return await super().unit(fn, **kw)
        except BaseException as exc:
            logsafe.scrub(exc)
            raise

    async def _read(self, stmt: Any, session: AsyncSession | None) -> Sequence[Any]:
        async def unit(session: AsyncSession) -> Sequence[Any]:
            return (await session.execute(stmt)).all()

        return await self.unit(unit, read_only=True, session=session)

    async def _write(self, stmt: Any, session: AsyncSession | None) -> None:
        async def unit(session: AsyncSession) -> None:
            await session.execute(stmt)

        await self.unit(unit, session=session)

    # -- the queue ------------------------------------------------------------------------

    async def due(
        self, at: int, limit: int, *, session: AsyncSession | None = None
    ) -> PushListing[PushRegistration]:
        """Registrations due at ``at``, longest-due first, at most ``limit``; never a parked one.

        The order is (next_attempt_at, task, config id), a total order: the registration
        that has waited longest is served first whatever its name, so under saturation no
        receiver starves behind others that sort before it. A parked registration is never
        served (the query carries the due index's own predicate,
        :data:`~agentplane_journal.db.models.PUSH_DUE_PREDICATE`, so the partial index
        ``push_delivery_due`` serves it and a parked row costs no sweep).

        A row that cannot be read (a secret that does not open, a corrupt column, an edited
        ``parked`` flag) does not stop the others: it is left out, named in the result's
        ``.unavailable`` and logged as a warning, and the store reads on past it, so up to
        ``limit`` good registrations are still served however many bad ones come first. On
        SQLite, rows whose ``next_attempt_at`` is not an integer at all (TEXT, BLOB: never
        ``<= at``) are named in ``.unavailable`` by every call, so no edit can hide a
        registration (a parked one is reported by :meth:`parked` instead).

        Nothing is locked: two workers may both deliver one registration. Delivery is at
        least once; the receiver sees duplicates, never gaps.
        """
        at, limit = check_int(at, "at"), check_int(limit, "limit")
        order = (PushDelivery.next_attempt_at, PushDelivery.task_id, PushDelivery.config_id)
        base = select(*_STATE).where(
            PushDelivery.tenant == self.tenant,
            PushDelivery.next_attempt_at <= at,
            PUSH_DUE_PREDICATE,
        )
        good: builtins.list[PushRegistration] = []
        bad: builtins.list[UnreadableRegistration] = []

        async def misfiled(session: AsyncSession) -> None:
            # SQLite keeps whatever is written in an INTEGER column, and sorts TEXT and BLOB
            # after every number: a row whose next_attempt_at is 'soon' is never `<= at`, so
            # the query above would hide it for ever. Such values (and REALs beyond any
            # integer) compare greater than the largest BIGINT; they are reported here,
            # at most `limit` of them, on every call. On PostgreSQL the column holds
            # BIGINTs only and this is an empty range of the due index.
            stmt = (
                select(*_STATE)
                .where(
                    PushDelivery.tenant == self.tenant,
                    PushDelivery.next_attempt_at > MAX_I64,
                    PUSH_DUE_PREDICATE,
                )
                .order_by(*order)
                .limit(limit)
            )
            for row in (await session.execute(stmt)).all():
                try:
                    check_row(row, cursor=True)
                except StoreError as exc:
                    bad.append(self._unreadable(row, exc, "left out of due()"))

        async def both(session: AsyncSession) -> None:
            await self._serve(session, base, order, limit, "left out of due()", good, bad)
            await misfiled(session)

        await self.unit(both, read_only=True, session=session)
        return PushListing(good, bad)

    async def advance(
        self, task: RunId | str, id: str, next_seq: int, *, session: AsyncSession | None = None
    ) -> None:
        """Record an acknowledgement: cursor = max(cursor, ``next_seq``); reset the backoff.

        A lower ``next_seq`` (a late, duplicate acknowledgement) leaves the cursor but still
        resets attempts: the receiver answered, so a parked registration is re-armed too (as
        agentplane 0.22.0 does). An unknown registration is a no-op.
        """
        task_id, config_id = str(check_run(task, "task")), _check_config_id(id)
        next_seq = check_int(next_seq, "next_seq")
        # One statement: concurrent advances wait on the row lock and each re-evaluates
        # GREATEST against the latest committed cursor, so the largest always survives.
        await self._write(
            update(PushDelivery)
            .where(self._where(task_id, config_id))
            .values(
                next_seq=self.dialect.greatest(PushDelivery.next_seq, next_seq),
                attempts=0,
                next_attempt_at=0,
                last_error=None,
                parked=False,
            ),
            session,
        )

    async def retry(
        self,
        task: RunId | str,
        id: str,
        next_attempt_at: int,
        error: str,
        *,
        session: AsyncSession | None = None,
    ) -> None:
        """Record a failed delivery: one more attempt, due again at ``next_attempt_at``.

        The cursor is untouched. ``error`` is kept (cut to :data:`MAX_ERROR_BYTES`). A
        parked registration is re-armed (agentplane 0.22.0's rule: the latest word about a
        registration wins; a worker that gives up calls :meth:`park` instead). An unknown
        registration is a no-op.
        """
        task_id, config_id = str(check_run(task, "task")), _check_config_id(id)
        next_attempt_at = check_int(next_attempt_at, "next_attempt_at")
        error = _clip_error(error)
        # Incremented in the UPDATE, so concurrent retries each count. LEAST is taken before
        # the +1: 0.4.0's LEAST(attempts + 1, 2^31-1) overflows INTEGER at the cap.
        attempts = self.dialect.least(PushDelivery.attempts, MAX_ATTEMPTS - 1) + 1
        await self._write(
            update(PushDelivery)
            .where(self._where(task_id, config_id))
            .values(
                attempts=attempts, next_attempt_at=next_attempt_at, last_error=error, parked=False
            ),
            session,
        )

    async def park(
        self, task: RunId | str, id: str, error: str, *, session: AsyncSession | None = None
    ) -> None:
        """Stop delivering to a registration, keeping its cursor: what giving up means.

        For a receiver that answered permanently (410 Gone, a url no longer allowed) or
        failed past the worker's retry ceiling. The row *is* the cursor, the only record of
        how far that receiver got, so it is kept: ``next_seq`` and ``next_attempt_at`` are
        untouched, the failed attempt is counted (as :meth:`retry` counts it, capped at
        2^31-1) and ``error`` is kept as the reason (cut to :data:`MAX_ERROR_BYTES`). A
        parked registration is never served by :meth:`due` and costs no sweep (the due
        index leaves it out); :meth:`parked` lists it, :meth:`unpark` re-arms it.
        :meth:`put`, :meth:`advance` and :meth:`retry` re-arm it too. An unknown
        registration is a no-op.
        """
        task_id, config_id = str(check_run(task, "task")), _check_config_id(id)
        error = _clip_error(error)
        attempts = self.dialect.least(PushDelivery.attempts, MAX_ATTEMPTS - 1) + 1
        await self._write(
            update(PushDelivery)
            .where(self._where(task_id, config_id))
            .values(attempts=attempts, last_error=error, parked=True),
            session,
        )

    async def parked(
        self,
        limit: int,
        *,
        after: tuple[RunId | str, str] | None = None,
        session: AsyncSession | None = None,
    ) -> PushListing[PushRegistration]:
        """The parked registrations, ordered by (task, config id), at most ``limit``.

        A total order (the key), so an operator pages through them all: ``after`` is the
        ``(task, config id)`` of the last registration of the previous page. Each is handed
        out as :meth:`due` would with ``parked=True``: cursor, attempts, the reason it was
        parked (``last_error``). A row that cannot be read is named in ``.unavailable`` as
        in :meth:`due`, and so is every row whose ``parked`` flag is neither true nor false
        (NULL, or on SQLite any other stored value), which no other query would show.

        No index serves this: it walks the tenant's registrations in key order until it
        has ``limit`` parked ones. It is an operator's call, not a sweep's.
        """
        limit = check_int(limit, "limit")
        order = (PushDelivery.task_id, PushDelivery.config_id)
        base = select(*_STATE).where(PushDelivery.tenant == self.tenant, _NOT_PLAINLY_DUE)
        if after is not None:
            if not isinstance(after, tuple) or len(after) != 2:
                raise TypeError("after must be a (task, config id) pair, as parked() hands out")
            last = (str(check_run(after[0], "after's task")), _check_config_id(after[1]))
            base = base.where(tuple_(*order) > tuple_(*last))
        good: builtins.list[PushRegistration] = []
        bad: builtins.list[UnreadableRegistration] = []

        async def unit(session: AsyncSession) -> None:
            await self._serve(session, base, order, limit, "left out of parked()", good, bad)

        await self.unit(unit, read_only=True, session=session)
        return PushListing(good, bad)

    async def unpark(
        self, task: RunId | str, id: str, at: int, *, session: AsyncSession | None = None
    ) -> bool:
        """Re-arm a parked registration: due at ``at``, from the record it never acknowledged.

        The cursor is kept (delivery resumes where the receiver stopped acknowledging),
        attempts are reset (the retry ceiling counts afresh) and ``last_error`` is kept as
        the record of why it was parked. ``True`` if a parked registration was re-armed;
        ``False`` if there is none by that name or it was not parked (nothing is changed).
        A row whose ``parked`` flag was edited to something other than true or false
        (:meth:`parked` reports it) is re-armed too, with a plain ``false``.
        """
        task_id, config_id = str(check_run(task, "task")), _check_config_id(id)
        at = check_int(at, "at")

        async def unit(session: AsyncSession) -> bool:
            result = await session.execute(
                update(PushDelivery)
                .where(self._where(task_id, config_id), _NOT_PLAINLY_DUE)
                .values(parked=False, attempts=0, next_attempt_at=at)
            )
            return bool(cast("CursorResult[Any]", result).rowcount)

        return await self.unit(unit, session=session)
