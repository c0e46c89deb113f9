"""A writer's turn on PostgreSQL: every kind of write that waited, one transaction, one commit.

:class:`Together` is a base of :class:`agentplane_journal.backends.postgresql.writer.Writer`.
Each autocommitted statement is a WAL flush (a few milliseconds with ``fsync`` on), and the
writer has one connection: one flush after another. The multi-run statement
(:data:`~agentplane_journal.backends.postgresql.sql.MANY`) already lets one tenant's appends
share one, but a fresh run's admission (:data:`~.conclude.ADMIT`) and a conclusion
(:data:`~.conclude.CONCLUDE`) are statements of their own. With eight workflows at once,
their eight admissions and eight conclusions were sixteen flushes in a row, half the
writer's time.

So a turn (what :meth:`Writer._take` hands the leader: every waiting write, each to a
distinct run) is split into **units**, each what one statement carries alone (a tenant's
appends, as :data:`MANY` or :data:`ONE`; an admission; a conclusion), and when there are
several, they run as those same statements inside ``BEGIN`` .. ``COMMIT``: the admissions
first, all sent at once (asyncpg's ``fetchmany``: one round trip), then each tenant's
appends, then the conclusions, sent at once too, each hashed onto the log the one before it
(of its tenant) leaves. What each
statement checks is unchanged (each still proves its snapshot current by the rows it locks,
and waits for no row lock; locks taken by this transaction's earlier statements are its
own, so a second conclusion of a tenant locks the counter the first one moved, and hashes
onto the log the first one left). What changes is when it lands, and what a failure means:

* **Every answer waits for the commit.** Each unit's answer is known when its statement
  answers, but it is handed out only once ``COMMIT`` has answered. A member refused by its
  statement's checks (fenced, sealed, a stale head: nothing written by it) keeps its answer
  whatever the commit does.
* **A statement the server refuses** (an answered error: ADMIT's guard for a run that is
  not fresh, a unique violation, a deadlock) aborts the transaction: it is rolled back,
  nothing of the turn landed, and every unit runs again alone, autocommitted, exactly as
  without this module, so each member hears its own outcome and none fails for another.
* **A connection lost before** ``COMMIT`` **was sent** (mid-turn): the server rolls the
  transaction back, surely, so every member goes to the general unit of work (nothing of it
  was written). **Lost with** ``COMMIT`` **in flight**: each member its statement wrote for
  is :class:`~agentplane_journal.errors.CommitUnknownError`; **a refused** ``COMMIT``: rolled
  back, those members go to the general unit.
* The tenants' known logs (:mod:`.conclude`) that this turn's conclusions moved are
  forgotten unless the commit landed.

A turn of admissions only, or conclusions only, needs no ``BEGIN``: sent at once, the
statements are one implicit transaction that commits at the end of the pipeline. A refusal
rolled all of it back (each then runs alone); lost, or answered with what these statements
never answer (:class:`Garbled`), it may have committed: each member is unknown.

Behind a transaction pooler the units run one by one, as before (each statement there is a
server-side function inside a transaction of its own).
"""

from __future__ import annotations

from typing import Any

from agentplane_journal.backends.postgresql import conclude as _conclude
from agentplane_journal.backends.postgresql import sql as _pgsql
from agentplane_journal.backends.postgresql.answers import (
    GENERAL,
    Answer,
    Lost,
    Request,
    unknown,
)
from agentplane_journal.backends.postgresql.sending import Sending

__all__ = ["Aborted", "Garbled", "Together", "units"]


class Aborted(Exception):
    """Internal: inside a turn's transaction the server refused a statement (so the
    transaction is aborted and nothing of it can commit)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class Garbled(Aborted):
    """Internal: statements sent together answered what they never answer (rows of another
    count, an admission that wrote other than its records). Inside ``BEGIN`` the turn is
    rolled back as for :class:`Aborted`; sent alone, their implicit transaction may have
    committed, so each member is a :class:`CommitUnknownError`."""


def units(group: list[Request]) -> list[list[Request]]:
    """``group`` as statements: each tenant's plain appends together (in arrival order),
    each admission and each conclusion alone."""
    out: list[list[Request]] = []
    appends: dict[str, list[Request]] = {}
    for r in group:
        if r.admit is not None or r.conclude is not None:
            out.append([r])
        elif r.tenant in appends:
            appends[r.tenant].append(r)
        else:
            appends[r.tenant] = [r]
            out.append(appends[r.tenant])
    return sorted(out, key=_kind)


def _kind(unit: list[Request]) -> int:
    """Admissions first, then appends, then conclusions: each kind's statements together."""
    return 0 if unit[0].admit is not None else 2 if unit[0].conclude is not None else 1


class Together(Sending):
    """Runs a turn's units in one transaction (see the module); a base of ``Writer``."""

    #: Inside a turn's transaction: a statement's answered error is :class:`Aborted`.
    _in_turn: bool = False

    def _refused(self, exc: BaseException) -> None:
        """Called with each answered error a statement raised: inside a turn, the
        transaction is now aborted, which is the turn's business, not the member's."""
        if self._in_turn:
            raise Aborted(exc) from exc

    async def _unit(self, driver: Any, unit: list[Request]) -> tuple[list[Answer], bool]:
        """One unit by its own statement: the answers, and whether the connection lives."""
        if len(unit) == 1:
            try:
                return [await self._one(driver, unit[0])], True
            except Lost as lost:
                return [unknown(lost.error)], False
        return await self._many(driver, unit)

    async def _alone(self, driver: Any, parts: list[list[Request]]) -> tuple[list[Answer], bool]:
        """Each unit autocommitted, one after another; after a lost one, the rest unsent."""
        answers: list[Answer] = []
        for i, unit in enumerate(parts):
            got, alive = await self._unit(driver, unit)
            answers.extend(got)
            if not alive:
                rest = sum(len(u) for u in parts[i + 1 :])
                return [*answers, *[GENERAL] * rest], False
        return answers, True

    async def _pipeline(
        self, driver: Any, statement: str, argsets: list[tuple[Any, ...]]
    ) -> list[Any]:
        """``statement`` once per parameter set, sent together (asyncpg's ``fetchmany``:
        one round trip), one row each. Raises :class:`Lost`, or :class:`Aborted` for an
        answered error or an answer of another length (never this path's)."""
        try:
            rows: list[Any] = await driver.fetchmany(_pgsql.sql(statement, self._schema), argsets)
        except Exception as exc:
            if not _pgsql.answered(exc):
                raise Lost(exc) from exc
            raise Aborted(exc) from exc
        if len(rows) != len(argsets):
            raise Garbled(RuntimeError(f"{len(argsets)} statements answered {len(rows)} rows"))
        return rows

    async def _admit_all(self, driver: Any, admits: list[Request]) -> list[Answer]:
        """The turn's admissions, sent together. Any of them not fresh fails ADMIT's guard,
        which aborts the turn (then each runs alone, and the general unit admits it)."""
        argsets = [
            self._admit_args(
                r, _pgsql.one_args(r.tenant, str(r.run), r.now, r.epoch, r.head, r.rows)
            )
            for r in admits
        ]
        rows = await self._pipeline(driver, _conclude.ADMIT, argsets)
        for r, row in zip(admits, rows, strict=True):
            if row["written"] != len(r.rows):
                raise Garbled(RuntimeError(f"the admission statement answered {row!r}"))
        return [r.records for r in admits]

    async def _conclude_all(self, driver: Any, concludes: list[Request]) -> list[Answer]:
        """The turn's conclusions, sent together, each hashed onto the log the one before it
        (of its tenant) leaves. One that writes nothing (fenced, a stale head, a log moved
        by another process) leaves its tenant's later ones nothing to hash onto: their
        statements' log checks fail and they go to the general unit; the tenant's known log
        is then read afresh."""
        prepared: list[tuple[Request, tuple[Any, ...] | None, Any]] = []
        for r in concludes:
            one = _pgsql.one_args(r.tenant, str(r.run), r.now, r.epoch, r.head, r.rows)
            got = await self._conclusion(driver, r, one)
            if got is None:
                prepared.append((r, None, None))
                continue
            args, after = got
            self._logs[r.tenant] = after  # what the tenant's next conclusion hashes onto
            prepared.append((r, args, after))
        sent = [(r, args, after) for r, args, after in prepared if args is not None]
        rows = (
            await self._pipeline(driver, _conclude.CONCLUDE, [a for _, a, _ in sent])
            if sent
            else []
        )
        for tenant in {r.tenant for r in concludes}:
            self._logs.pop(tenant, None)
        answers: dict[int, Answer] = {id(r): GENERAL for r in concludes}
        broken: set[str] = set()
        for (r, _, after), row in zip(sent, rows, strict=True):
            outcome = _pgsql.one_outcome(r.run, r.epoch, row)
            if not outcome.written:
                broken.add(r.tenant)
            elif r.tenant not in broken:
                self._logs[r.tenant] = after
            answers[id(r)] = self._settle(r, outcome)
        for tenant in broken:
            self._logs.pop(tenant, None)
        return [answers[id(r)] for r in concludes]

    async def _turn(self, driver: Any, group: list[Request]) -> tuple[list[Answer], bool]:
        """``group``'s units, in one transaction when there are several (see the module):
        the answers in ``group``'s order, and whether the connection lives."""
        parts = units(group)
        if len(parts) == 1 or not getattr(driver, "_stmt_cache_enabled", True):
            answers, alive = await self._alone(driver, parts)
            return _reorder(group, parts, answers), alive
        if {_kind(u) for u in parts} in ({0}, {2}):
            return await self._sent_together(driver, group, parts)
        concluded = {r.tenant for r in group if r.conclude is not None}
        try:
            answers, alive, committed = await self._together(driver, parts)
        except Aborted:
            for tenant in concluded:
                self._logs.pop(tenant, None)
            try:
                await driver.execute("ROLLBACK")
            except Exception as exc:
                if _pgsql.answered(exc):
                    raise  # never: ROLLBACK of an aborted transaction is answered OK
                return [GENERAL] * len(group), False  # COMMIT never sent: nothing landed
            answers, alive = await self._alone(driver, parts)
            return _reorder(group, parts, answers), alive
        except BaseException:  # interrupted mid-turn: the logs it moved may not have landed
            for tenant in concluded:
                self._logs.pop(tenant, None)
            raise
        if not committed:
            for tenant in concluded:
                self._logs.pop(tenant, None)
        return _reorder(group, parts, answers), alive

    async def _sent_together(
        self, driver: Any, group: list[Request], parts: list[list[Request]]
    ) -> tuple[list[Answer], bool]:
        """A turn of admissions only, or conclusions only: sent at once outside any
        ``BEGIN``, they are one implicit transaction that commits at the pipeline's end
        (one round trip, no ``BEGIN``/``COMMIT``). A refusal rolled all of it back: each
        then runs alone. Lost: the pipeline may have committed, each is unknown."""
        requests = [unit[0] for unit in parts]
        concluded = {r.tenant for r in requests if r.conclude is not None}
        refused = False
        self._in_turn = True
        try:
            if requests[0].admit is not None:
                answers = await self._admit_all(driver, requests)
            else:
                answers = await self._conclude_all(driver, requests)
        except Garbled as garbled:
            for tenant in concluded:
                self._logs.pop(tenant, None)
            return [unknown(garbled.error)] * len(group), True
        except Aborted:
            refused = True
        except Lost as lost:
            for tenant in concluded:
                self._logs.pop(tenant, None)
            return [unknown(lost.error)] * len(group), False
        except BaseException:
            for tenant in concluded:
                self._logs.pop(tenant, None)
            raise
        finally:
            self._in_turn = False
        if refused:
            for tenant in concluded:
                self._logs.pop(tenant, None)
            answers, alive = await self._alone(driver, parts)
            return _reorder(group, parts, answers), alive
        return _reorder(group, parts, answers), True

    async def _together(
        self, driver: Any, parts: list[list[Request]]
    ) -> tuple[list[Answer], bool, bool]:
        """The units inside ``BEGIN`` .. ``COMMIT``: the answers (in ``parts``' order),
        whether the connection lives, and whether the turn committed. Raises
        :class:`Aborted` (the transaction still open, for the caller's ``ROLLBACK``)."""
        size = sum(len(u) for u in parts)
        try:
            await driver.execute("BEGIN")
        except Exception as exc:
            if _pgsql.answered(exc):
                raise Aborted(exc) from exc
            return [GENERAL] * size, False, False
        answers: list[Answer] = []
        self._in_turn = True
        try:
            admits = [u[0] for u in parts if _kind(u) == 0]
            concludes = [u[0] for u in parts if _kind(u) == 2]
            if admits:
                answers.extend(await self._admit_all(driver, admits))
            for unit in parts:
                if _kind(unit) != 1:
                    continue
                got, alive = await self._unit(driver, unit)
                if not alive:  # lost before COMMIT was sent: the server rolls it all back
                    return [GENERAL] * size, False, False
                answers.extend(got)
            if concludes:
                answers.extend(await self._conclude_all(driver, concludes))
        except Lost:  # lost before COMMIT was sent: the server rolls it all back
            return [GENERAL] * size, False, False
        finally:
            self._in_turn = False
        wrote = [isinstance(a, list) for a in answers]
        try:
            status = await driver.execute("COMMIT")
        except Exception as exc:
            if _pgsql.answered(exc):  # refused: rolled back, nothing of the turn landed
                return _unwritten(answers, wrote, GENERAL), True, False
            return _unwritten(answers, wrote, unknown(exc)), False, False
        if status != "COMMIT":
            # The server ends an aborted transaction's COMMIT with ROLLBACK, no error: never
            # expected (every refusal is :class:`Aborted`), and nothing of the turn landed.
            return _unwritten(answers, wrote, GENERAL), True, False
        return answers, True, True


def _unwritten(answers: list[Answer], wrote: list[bool], instead: Answer) -> list[Answer]:
    """``answers`` with each "written" one replaced by ``instead`` (the commit did not land,
    or may not have)."""
    return [instead if w else a for a, w in zip(answers, wrote, strict=True)]


def _reorder(
    group: list[Request], parts: list[list[Request]], answers: list[Answer]
) -> list[Answer]:
    """``answers`` (in ``parts``' order) in ``group``'s order."""
    by_request = {
        id(r): a for r, a in zip([r for unit in parts for r in unit], answers, strict=True)
    }
    return [by_request[id(r)] for r in group]
