"""The run indexes of :class:`~agentplane_journal.journal.store.SqlJournalStore`: which runs
concluded as an outcome (newest conclusion first), and the runs by latest activity (newest
first, paged).

:class:`RunIndexes` is a base of :class:`~agentplane_journal.journal.reads.RunReads`; it holds
no state of its own.
"""

from __future__ import annotations

from sqlalchemy import literal, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.core.checks import check_int, check_label, check_run
from agentplane_journal.core.ids import RunId
from agentplane_journal.db.models import RunActivity, RunOutcome
from agentplane_journal.db.statements import (
    stored_int,
    stored_run,
)
from agentplane_journal.db.unit import Repository

__all__ = ["RunIndexes"]


class RunIndexes(Repository):
    """The store's run indexes: every method here only reads."""

    async def runs_by_outcome(
        self, outcome: str, limit: int, *, session: AsyncSession | None = None
    ) -> list[RunId]:
        """Runs whose latest ``RunSealed`` record says ``outcome``, newest conclusion first."""
        outcome = check_label(outcome, "outcome")
        limit = check_int(limit, "limit")
        stmt = (
            select(RunOutcome.run_id)
            .where(RunOutcome.tenant == self.tenant, RunOutcome.outcome == outcome)
            .order_by(RunOutcome.ordinal.desc())
            .limit(limit)
        )

        async def unit(session: AsyncSession) -> list[RunId]:
            rows = (await session.execute(stmt)).scalars()
            return [stored_run(r, "run_outcome.run_id") for r in rows]

        return await self.unit(unit, read_only=True, session=session)

    async def recent_runs(
        self,
        after: tuple[RunId, int] | None = None,
        limit: int = 100,
        *,
        session: AsyncSession | None = None,
    ) -> list[tuple[RunId, int]]:
        """``(run, updated_at)`` newest first, ties by run id descending; ``after`` pages."""
        limit = check_int(limit, "limit")
        where = [RunActivity.tenant == self.tenant]
        if after is not None:
            if not isinstance(after, tuple) or len(after) != 2:
                raise TypeError("after must be a (run, updated_at) pair as recent_runs returns")
            after_run, after_at = check_run(after[0]), check_int(after[1], "after's updated_at")
            where.append(
                tuple_(RunActivity.updated_at, RunActivity.run_id)
                < tuple_(literal(after_at), literal(str(after_run)))
            )
        stmt = (
            select(RunActivity.run_id, RunActivity.updated_at)
            .where(*where)
            .order_by(RunActivity.updated_at.desc(), RunActivity.run_id.desc())
            .limit(limit)
        )

        async def unit(session: AsyncSession) -> list[tuple[RunId, int]]:
            return [
                (
                    stored_run(r[0], "run_activity.run_id"),
                    stored_int(r[1], 0, "run_activity.updated_at"),
                )
                for r in await session.execute(stmt)
            ]

        return await self.unit(unit, read_only=True, session=session)
