"""Recovery: runs a dead instance left, taken over and resumed from their journals.

A :class:`Sweeper` drains the store's recovery queue (``abandoned_runs``: leases that lapsed
still naming an owner). For each run it reads the ``RunAdmitted`` record to find the
workflow (a run of a workflow this instance has not registered is left for one that has),
claims the lease with ``acquire`` (a new epoch, which fences the previous owner; a
:class:`LeaseHeldError` means another sweeper or the owner got it, and it is skipped), then
reads the run again *under its lease* and resumes it: recorded effects replay, the one in
doubt is reconciled, the rest run. Two sweepers never resume one run twice: the claim is
one guarded statement, and a run found concluded after the claim is only sealed and
released.

A run whose records do not verify (an edit at rest, a broken chain) is *damaged*: the sweep
reports it in :attr:`SweepReport.damaged` with its error and goes on with the runs behind
it, leaving the damaged run as it found it (still in the queue, for a person: ``agentplane-
journal verify RUN``). An operational error (the database unreachable) still stops the
sweep: nothing was judged, so nothing is reported.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from agentplane_journal.core.ids import RunId
from agentplane_journal.errors import (
    DAMAGE,
    LeaseHeldError,
    RunLostError,
    StoreError,
    WorkflowNotRegisteredError,
)
from agentplane_journal.steps.history import RunHistory
from agentplane_journal.steps.workflow import Registry, admitted_call, execute

__all__ = ["Resumed", "SweepReport", "Sweeper"]


@dataclass(frozen=True, slots=True)
class Resumed:
    """One run a sweep took over at lease ``epoch``: ``result`` when it succeeded, else the
    ``error`` it stopped on."""

    run_id: RunId
    epoch: int = 0
    result: Any = None
    error: BaseException | None = None


@dataclass(slots=True)
class SweepReport:
    """What one :meth:`Sweeper.drain` did.

    ``resumed``: runs it took over and ran on (each with its result or stop); ``concluded``:
    runs it only had to seal (a crash during their conclusion); ``emptied``: leases over runs
    that never got their ``RunAdmitted`` (released); ``skipped``: runs another instance took
    first, or whose workflow is not registered here; ``damaged``: runs whose records did not
    verify, each with its error (left as they were, for a person).
    """

    resumed: list[Resumed] = field(default_factory=list)
    concluded: list[RunId] = field(default_factory=list)
    emptied: list[RunId] = field(default_factory=list)
    skipped: list[RunId] = field(default_factory=list)
    damaged: list[tuple[RunId, StoreError]] = field(default_factory=list)

    def extend(self, other: SweepReport) -> None:
        self.resumed += other.resumed
        self.concluded += other.concluded
        self.emptied += other.emptied
        self.skipped += other.skipped
        self.damaged += other.damaged


class Sweeper:
    """Drains the recovery queue for one :class:`~agentplane_journal.steps.api.Steps`."""

    def __init__(self, steps: Registry, *, batch: int = 100, concurrency: int = 8) -> None:
        self.steps = steps
        self.batch = batch
        #: Runs resumed at once (a restarted worker's runs come back together, not in turn).
        self.concurrency = max(1, int(concurrency))

    async def drain(self, *, reclaim_own: bool = False) -> SweepReport:
        """Resume every abandoned run this instance can, until the queue has none left for it.

        ``reclaim_own=True`` first takes over, at once, the runs whose lease is still live
        and names this instance (``Steps(instance=...)``) but which this object is not
        running: what the same instance held when it died, for a worker restarted under its
        own name (call it once at start-up). A new epoch fences anything still running under
        that name, so instance names must be unique per live process.
        """
        report = SweepReport()
        passed: set[RunId] = set()
        if reclaim_own:
            steps = self.steps
            mine = [
                r
                for r in await steps.store.held_by(steps.instance, self.batch)
                if r not in steps.active
            ]
            passed.update(mine)
            await self._sweep_all(mine, report, reclaim=True)
        while True:
            runs = [
                r
                for r in await self.steps.store.abandoned_runs(self.batch + len(passed))
                if r not in passed
            ]
            if not runs:
                return report
            passed.update(runs)
            await self._sweep_all(runs, report)

    async def _sweep_all(
        self, runs: list[RunId], report: SweepReport, reclaim: bool = False
    ) -> None:
        """Sweep ``runs``, up to ``concurrency`` at once (each run is its own lease and its
        own workflow, as concurrent starts are); reported in the order of ``runs``."""
        gate = asyncio.Semaphore(self.concurrency)

        async def one(run: RunId) -> SweepReport:
            own = SweepReport()
            async with gate:
                try:
                    await self._sweep(run, own, reclaim=reclaim)
                except DAMAGE as error:
                    own.damaged.append((run, error))
            return own

        for own in await asyncio.gather(*(one(run) for run in runs)):
            report.extend(own)

    async def resume(self, run: RunId) -> Any:
        """Take ``run`` over (it must not be leased live) and run it on; its result."""
        report = SweepReport()
        await self._sweep(run, report, raise_errors=True)
        for resumed in report.resumed:
            return resumed.result
        return None

    async def _sweep(
        self, run: RunId, report: SweepReport, raise_errors: bool = False, reclaim: bool = False
    ) -> None:
        steps, store = self.steps, self.steps.store
        history = RunHistory.of(await store.read(run))
        if history.admitted is not None:
            name, _, _ = admitted_call(history.admitted)
            if name not in steps.workflows:
                if raise_errors:
                    raise WorkflowNotRegisteredError(run, name)
                report.skipped.append(run)
                return
        leased_at = steps.clock()
        try:
            lease = await store.acquire(run, steps.instance, steps.lease_ttl, reclaim=reclaim)
        except LeaseHeldError:
            if raise_errors:
                raise
            report.skipped.append(run)
            return
        # Read again under the lease: everything the previous owner committed is in it, and
        # nothing it tries from now on gets past the fence.
        records = await store.read(run)
        if records:  # its next append chains onto this head by the hot path
            store.remember_head(run, records[-1])
        history = RunHistory.of(records)
        ctx = steps.context(run, lease.epoch, history, leased_at)
        if history.admitted is None:
            await store.release_lease(run, lease.epoch)
            report.emptied.append(run)
            return
        if history.conclusion is not None:
            try:
                await ctx.seal_and_release()
            except RunLostError:
                # Taken over meanwhile (its lease lapsed under this sweeper): the new owner
                # seals it; nothing was written here.
                if raise_errors:
                    raise
                report.skipped.append(run)
                return
            report.concluded.append(run)
            return
        name, args, kwargs = admitted_call(history.admitted)
        workflow = steps.workflow_named(run, name)
        steps.active.add(run)
        try:
            result = await execute(ctx, workflow.fn, args, kwargs, name)
        except Exception as error:
            if raise_errors:
                raise
            report.resumed.append(Resumed(run, lease.epoch, error=error))
            return
        finally:
            steps.active.discard(run)
        report.resumed.append(Resumed(run, lease.epoch, result=result))
