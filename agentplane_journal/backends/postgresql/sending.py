"""How the PostgreSQL writer sends a group: the single-run statement (or a conclusion's or a
fresh run's admission), the multi-run statement, each append alone after a refusal, behind a
transaction pooler the statements' server-side functions, and what each answer means.

:class:`Sending` is a base of :class:`agentplane_journal.backends.postgresql.writer.Writer`.
"""

from __future__ import annotations

from typing import Any

from agentplane_journal.backends.postgresql import conclude as _conclude
from agentplane_journal.backends.postgresql import sql as _pgsql
from agentplane_journal.backends.postgresql.answers import (
    GENERAL,
    Answer,
    Conclusion,
    Lost,
    Request,
    unknown,
)
from agentplane_journal.db.dialect import PostgresDialect
from agentplane_journal.db.driver_errors import describe
from agentplane_journal.db.violations import Collision, journal_collision
from agentplane_journal.errors import (
    BackendError,
    CommitUnknownError,
    DuplicateEffectError,
    PoolerError,
)

__all__ = ["Sending"]

#: A lease row locked (``NOWAIT``, never waited for): the append goes to the general unit
#: of work, as does the primary key refusing a position (``db.violations``'s classification).
_LOCKED = "55P03"
#: Reads this path's driver errors (which constraint a unique violation names).
_DIALECT = PostgresDialect()


class Sending:
    """The writer's statements for a group, and their answers (a base of ``Writer``)."""

    #: The schema the statements name (``None``: the default), and each tenant's log as this
    #: process last wrote or read it; both set by ``Writer``.
    _schema: str | None
    _logs: dict[str, _conclude.KnownLog]

    def _refused(self, exc: BaseException) -> None:
        """Each answered error a statement raised passes here first (``Together``'s: inside
        a turn's transaction the turn, not the member, handles it)."""

    async def _fetch(self, driver: Any, statement: str, args: tuple[Any, ...]) -> list[Any]:
        # asyncpg ships no types: its fetch() answers a list of Records.
        rows: list[Any]
        if getattr(driver, "_stmt_cache_enabled", True):
            rows = await driver.fetch(_pgsql.sql(statement, self._schema), *args)
            return rows
        # Behind a transaction pooler (no statement cache): the statement's server-side
        # function, whose plan the server connection keeps (the statement itself would be
        # planned afresh for every append). asyncpg prepares and executes an uncached
        # statement in two exchanges, and only an open transaction keeps both on one
        # server connection.
        async with driver.transaction():
            rows = await driver.fetch(_pgsql.pooled(statement, self._schema), *args)
            return rows

    async def _one(self, driver: Any, r: Request) -> Answer:
        """One append by the single-run statement; raises :class:`Lost`."""
        if (
            len(r.rows) == 1
            and r.admit is None
            and r.conclude is None
            and getattr(driver, "_stmt_cache_enabled", True)
        ):
            # The commonest append: one record, its columns as scalar parameters.
            args = _pgsql.record_args(r.tenant, str(r.run), r.now, r.epoch, r.head, r.rows[0])
            statement = (
                _pgsql.ONE_RECORD_UNLESS_CANCELLED if r.unless_cancelled else _pgsql.ONE_RECORD
            )
            return await self._sent(driver, r, statement, args)
        args = _pgsql.one_args(r.tenant, str(r.run), r.now, r.epoch, r.head, r.rows)
        statement = _pgsql.ONE
        after: _conclude.KnownLog | None = None
        if r.admit is not None:
            return await self._admit_one(driver, r, args)
        if r.conclude is not None:
            if not getattr(driver, "_stmt_cache_enabled", True):
                return GENERAL  # behind a pooler: no server-side function concludes
            prepared = await self._conclusion(driver, r, args)
            if prepared is None:
                return GENERAL
            args, after = prepared
            self._logs.pop(r.tenant, None)  # until the answer says the log is ``after``
            statement = _conclude.CONCLUDE
        if r.unless_cancelled:
            if not getattr(driver, "_stmt_cache_enabled", True):
                return GENERAL  # behind a pooler: no server-side function checks requests
            statement = _pgsql.ONE_UNLESS_CANCELLED
        return await self._sent(driver, r, statement, args, after)

    async def _sent(
        self,
        driver: Any,
        r: Request,
        statement: str,
        args: tuple[Any, ...],
        after: _conclude.KnownLog | None = None,
    ) -> Answer:
        """``r`` sent as ``statement`` (:data:`~.sql.ONE`'s answer, or a conclusion's, whose
        tenant's log is ``after`` once it has written); raises :class:`Lost`."""
        try:
            rows = await self._fetch(driver, statement, args)
        except Exception as exc:
            if not _pgsql.answered(exc):
                raise Lost(exc) from exc
            self._refused(exc)
            what, _ = journal_collision(_DIALECT, exc) or (None, "")
            if what is Collision.EFFECT_STARTED:
                if len(r.keys) == 1:
                    error = DuplicateEffectError(r.keys[0])
                    error.__cause__ = exc
                    return error
                return GENERAL  # which of the keys had started: the general path says
            if what is Collision.CHAIN_POSITION or getattr(exc, "sqlstate", None) == _LOCKED:
                # A writer that bypassed the run mutex took a position after this
                # statement's snapshot, or a lease row is locked: the general path waits
                # for the mutex, reads the head afresh, and names a real race itself.
                return GENERAL
            failure = (
                PoolerError(describe(exc))
                if _DIALECT.pooler_misrouted(exc)
                else BackendError(describe(exc))
            )
            failure.__cause__ = exc
            return failure
        outcome = _pgsql.one_outcome(r.run, r.epoch, rows[0] if rows else None)
        if after is not None and outcome.written:
            self._logs[r.tenant] = after
        return self._settle(r, outcome)

    async def _conclusion(
        self, driver: Any, r: Request, one: tuple[Any, ...]
    ) -> tuple[tuple[Any, ...], _conclude.KnownLog] | None:
        """:data:`.conclude.CONCLUDE`'s parameters for ``r`` (``one``: its
        :func:`~.sql.one_args`) and the tenant's log once it has written, or ``None`` (the
        general unit) when no usable log is known. Raises :class:`Lost`."""
        c = r.conclude
        assert c is not None
        log = await self._known_log(driver, r.tenant, c)
        if log is None:
            return None
        return _conclude.conclude_args(
            one, c.counter, log, c.conclusion, c.head, c.outcome, c.max_index
        )

    @staticmethod
    def _admit_args(r: Request, one: tuple[Any, ...]) -> tuple[Any, ...]:
        """:data:`.conclude.ADMIT`'s parameters for ``r`` (``one``: its one_args)."""
        assert r.admit is not None
        owner, expires, key = r.admit
        return (r.tenant, str(r.run), r.now, owner, expires, key, *one[6:])

    async def _admit_one(self, driver: Any, r: Request, one: tuple[Any, ...]) -> Answer:
        """A fresh run's admission by :data:`.conclude.ADMIT`; raises :class:`Lost`. Any
        answered error wrote nothing, and the general unit admits the run or says why not."""
        assert r.admit is not None
        if not getattr(driver, "_stmt_cache_enabled", True):
            return GENERAL  # behind a pooler: no server-side function admits
        args = self._admit_args(r, one)
        try:
            rows = await driver.fetch(_pgsql.sql(_conclude.ADMIT, self._schema), *args)
        except Exception as exc:
            if not _pgsql.answered(exc):
                raise Lost(exc) from exc
            self._refused(exc)
            return GENERAL
        if not rows or rows[0]["written"] != len(r.rows):
            # Never this statement's answer (its guard fails it instead): what it wrote is
            # not known, so nothing is claimed about it.
            return CommitUnknownError(f"the admission statement answered {rows!r}")
        return r.records

    async def _known_log(
        self, driver: Any, tenant: str, c: Conclusion
    ) -> _conclude.KnownLog | None:
        """The tenant's log as last written here, or read now (one statement, unlocked:
        the conclusion checks it); ``None`` when a seal here cannot use it. Raises
        :class:`Lost`."""
        log = self._logs.get(tenant)
        if log is not None:
            return log
        try:
            rows = await driver.fetch(
                _pgsql.sql(_conclude.LOG_STATE, self._schema), tenant, c.counter, c.max_index
            )
        except Exception as exc:
            if not _pgsql.answered(exc):
                raise Lost(exc) from exc
            self._refused(exc)
            return None
        return _conclude.known_log(rows)

    async def _many(self, driver: Any, group: list[Request]) -> tuple[list[Answer], bool]:
        """A group by the multi-run statement: the answers, and whether the connection lives."""
        runs = [(str(r.run), r.now, r.epoch, r.head, r.rows) for r in group]
        args = _pgsql.group_args(group[0].tenant, runs)
        statement = _pgsql.MANY
        if any(r.unless_cancelled for r in group):
            if not getattr(driver, "_stmt_cache_enabled", True):
                return await self._each(driver, group)  # no server-side function checks it
            statement = _pgsql.MANY_UNLESS_CANCELLED
            args = (*args, ["1" if r.unless_cancelled else "0" for r in group])
        try:
            rows = await self._fetch(driver, statement, args)
        except Exception as exc:
            if not _pgsql.answered(exc):
                return [unknown(exc)] * len(group), False
            self._refused(exc)
            # Refused as a whole, so nothing of it landed: each append on its own.
            return await self._each(driver, group)
        if len(rows) != len(group):  # never the statement's answer; what it wrote is unknown
            error = CommitUnknownError(f"the group statement answered {len(rows)} rows")
            return [error] * len(group), True
        return [
            self._settle(r, _pgsql.group_outcome(r.run, r.epoch, row))
            for r, row in zip(group, rows, strict=True)
        ], True

    async def _each(self, driver: Any, group: list[Request]) -> tuple[list[Answer], bool]:
        """``group``'s appends one statement each: the answers, and whether the connection
        lives (one lost mid-statement leaves the rest unsent, for the general unit)."""
        answers: list[Answer] = []
        for i, r in enumerate(group):
            try:
                answers.append(await self._one(driver, r))
            except Lost as lost:
                rest = [GENERAL] * (len(group) - i - 1)  # never sent: surely not written
                return [*answers, unknown(lost.error), *rest], False
        return answers, True

    @staticmethod
    def _settle(r: Request, outcome: _pgsql.Outcome) -> Answer:
        if outcome.written:
            return r.records
        if outcome.error is not None:
            return outcome.error
        return GENERAL
