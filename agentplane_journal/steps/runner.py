"""One run being executed by this instance: its lease, heartbeat, appends and conclusion.

A :class:`RunContext` exists while a worker owns a run (from ``acquire`` to the conclusion
or the loss). It is the only writer of the run's records in this layer, and every write goes
through :meth:`RunContext.append`, so the rules are kept in one place:

* **Fenced writes.** Every append carries the lease's epoch; a refusal
  (:class:`FencedError`, :class:`LeaseNotHeldError`, a sealed run) becomes
  :class:`RunLostError` and the worker stops: nothing more is done for the run.
* **The heartbeat** renews the lease every ``ttl / 3`` seconds with ``renew`` (which never
  claims). A refused renewal marks the run lost; the next step boundary stops.
* **A local deadline.** Before an effect is *called* (after its start is journaled, the
  fenced proof that nobody had taken over), the worker checks that its lease, as of its last
  renewal (timed from before the statement, by this process's monotonic clock), still has
  ``margin`` seconds left; if not it
  stops, leaving the start in doubt for the next owner to reconcile, rather than calling
  into a window where a sweeper may already be resuming the run. The margin is what makes a
  lease TTL longer than any effect call the safety condition (see the durable-steps guide).
* **Cancellation** is read at each step boundary (before a new effect starts), in the same
  transaction as the effect's start (:meth:`RunContext.start`), and acted on by journaling
  ``RunCancelled`` and concluding ``cancelled``, never mid-effect.
* **The conclusion** is a ``RunSealed`` record over the real head, ``seal`` at that record
  and the lease's release, all in one transaction.

So a run costs one transaction to be admitted (lease, key and ``RunAdmitted``), two per
effect (its start with the cancellation check, its result) and one to conclude.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from agentplane_journal.core.append import RUN_SEALED, Append
from agentplane_journal.core.ids import EffectKey, RunId
from agentplane_journal.core.profile import WireProfile
from agentplane_journal.core.record import Record
from agentplane_journal.core.values import Cancellation
from agentplane_journal.errors import (
    BackendError,
    CommitUnknownError,
    EffectInDoubtError,
    FencedError,
    JournalUnavailableError,
    LeaseNotHeldError,
    RunCancelledError,
    RunLostError,
    RunSealedError,
    WorkflowDivergedError,
)
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.steps import spans
from agentplane_journal.steps.history import RUN_CANCELLED, RunHistory
from agentplane_journal.steps.records import (
    effect_record,
    key_profile,
    output_note,
    run_record,
)
from agentplane_journal.steps.values import CANCELLED

__all__ = ["HICCUPS", "STOPS", "RunContext"]

Boundary = Callable[[str], None]

#: What a database hiccup looks like from here: a statement refused and rolled back, or a
#: commit whose fate is unknown. Either stops the worker with
#: :class:`JournalUnavailableError`; neither is the workflow's failure.
HICCUPS: tuple[type[Exception], ...] = (BackendError, CommitUnknownError)

#: What refuses a run's own append: fenced or sealed (the run is lost), or a hiccup.
REFUSALS: tuple[type[Exception], ...] = (FencedError, RunSealedError, *HICCUPS)

#: The stops: errors that end this worker's part in a run without concluding it (in doubt,
#: lost, diverged, the journal unavailable) or after concluding it itself (cancelled).
#: A workflow that catches one is stopped all the same; none is the workflow's failure.
STOPS: tuple[type[Exception], ...] = (
    EffectInDoubtError,
    JournalUnavailableError,
    RunCancelledError,
    RunLostError,
    WorkflowDivergedError,
)

log = logging.getLogger("agentplane_journal.steps")


class RunContext:
    """A run this worker owns at ``epoch``; see the module docstring for its rules."""

    def __init__(
        self,
        store: SqlJournalStore,
        run: RunId,
        owner: str,
        epoch: int,
        ttl: int,
        history: RunHistory,
        *,
        boundary: Boundary | None = None,
        margin: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        leased_at: float | None = None,
    ) -> None:
        self.store = store
        self.run = run
        self.owner = owner
        self.epoch = epoch
        self.ttl = ttl
        self.history = history
        self.ordinal = 0  # the next effect call's position in the run
        self.lost: str | None = None
        #: The stop an effect raised (in doubt, lost, cancelled), kept so that a workflow
        #: which catches it and goes on is stopped all the same.
        self.stopped: BaseException | None = None
        self._boundary = boundary
        self._margin = margin
        self._clock = clock
        # From before the acquire that granted the lease: never later than the store's expiry.
        self._deadline = (clock() if leased_at is None else leased_at) + ttl
        self._heartbeat: asyncio.Task[None] | None = None
        # An effect of this run is in progress (steps/effect.py refuses a second at once).
        self.busy = False

    # -- the lease ----------------------------------------------------------------------

    def start_heartbeat(self) -> None:
        self._heartbeat = asyncio.get_running_loop().create_task(self._beat())

    async def stop_heartbeat(self) -> None:
        task, self._heartbeat = self._heartbeat, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _beat(self) -> None:
        interval = max(self.ttl / 3, 0.05)
        while self.lost is None:
            await asyncio.sleep(interval)
            began = self._clock()
            try:
                await self.store.renew(self.run, self.owner, self.epoch, self.ttl)
            except LeaseNotHeldError as error:
                self.lost = f"the lease renewal was refused: {error.found or 'not held'}"
                return
            except Exception:  # a database hiccup: the deadline decides, try again
                continue
            self._deadline = began + self.ttl

    def boundary(self, name: str) -> None:
        """A named point in the protocol (tests stop a worker here; no-op otherwise)."""
        if self._boundary is not None:
            self._boundary(name)

    def check(self) -> None:
        """Stop if this worker lost the run (a refused renewal, a fenced append)."""
        if self.lost is not None:
            raise RunLostError(self.run, self.lost)

    def check_deadline(self) -> None:
        """Stop unless the lease surely outlives the next ``margin`` seconds (see above)."""
        self.check()
        if self._clock() > self._deadline - self._margin:
            self.lost = "the lease may have lapsed (no renewal in time)"
            raise RunLostError(self.run, self.lost)

    async def check_cancel(self) -> None:
        """At a step boundary with nothing to journal: act on a stop request, if recorded."""
        self.check()
        try:
            request = await self.store.cancellation(self.run)
        except HICCUPS as error:
            raise self.unavailable("the cancellation check", error) from error
        if request is not None:
            await self.cancelled(request)

    async def cancelled(self, request: Cancellation) -> NoReturn:
        """Act on ``request``: journal ``RunCancelled``, conclude ``cancelled``, stop."""
        await self.append(
            [self.record(RUN_CANCELLED, {"actor": request.actor, "reason": request.reason})]
        )
        await self.conclude(CANCELLED, reason=f"cancelled by {request.actor}: {request.reason}")
        raise RunCancelledError(self.run, request.actor, request.reason)

    # -- writing ------------------------------------------------------------------------

    @property
    def profile(self) -> WireProfile:
        """The journal's wire profile: every record of the run is written in it."""
        return self.store.profile

    @property
    def key_profile(self) -> WireProfile:
        """The profile the run's effect keys are derived under (its admission's; see
        :mod:`~agentplane_journal.steps.records`)."""
        return key_profile(self.history.admitted, self.store.profile)

    def record(self, kind: str, payload: dict[str, Any]) -> Append:
        """A run-level record of this run in the journal's profile."""
        return run_record(self.profile, self.run, kind, payload)

    def effect_record(self, kind: str, payload: dict[str, Any], key: EffectKey) -> Append:
        """An effect's record of this run in the journal's profile."""
        return effect_record(self.profile, self.run, kind, payload, key)

    async def append(self, batch: Sequence[Append]) -> list[Record]:
        self.check()
        try:
            records = await self.store.append(self.epoch, batch)
        except REFUSALS as error:
            raise self._refused(batch, error) from error
        self.history.add(records)
        return records

    async def start(self, started: Append) -> None:
        """Journal an effect's start at a step boundary, in one transaction with the
        boundary's cancellation check: a stop request found there writes nothing, and the
        run is cancelled instead (:meth:`cancelled`)."""
        answer = await self.unless_cancelled([started])
        if isinstance(answer, Cancellation):
            await self.cancelled(answer)

    async def unless_cancelled(self, batch: Sequence[Append]) -> list[Record] | Cancellation:
        """Journal ``batch`` in one transaction with a step boundary's cancellation check:
        its records, or the stop request found (then nothing was written)."""
        self.check()
        try:
            answer = await self.store.append_unless_cancelled(self.epoch, batch)
        except REFUSALS as error:
            raise self._refused(batch, error) from error
        if not isinstance(answer, Cancellation):
            self.history.add(answer)
        return answer

    def _refused(self, batch: Sequence[Append], error: Exception) -> Exception:
        """The stop for an append of ``batch`` that raised ``error`` (see the module)."""
        if isinstance(error, FencedError):
            self.lost = f"fenced: epoch {error.held}, the run is at {error.current}"
            return RunLostError(self.run, self.lost)
        if isinstance(error, RunSealedError):
            self.lost = f"the run was sealed {error.args[0]}"
            return RunLostError(self.run, self.lost)
        return self.unavailable("its " + ", ".join(a.kind for a in batch), error)

    def unavailable(self, stage: str, error: BaseException) -> JournalUnavailableError:
        """The stop for a journal that could not record ``stage``: kept in :attr:`stopped`
        so a workflow that catches it is stopped all the same, and never concluded."""
        stop = JournalUnavailableError(self.run, stage, error)
        self.stopped = stop
        return stop

    async def conclude(
        self, outcome: str, *, output: Any = None, reason: str | None = None, span: Any = None
    ) -> None:
        """``RunSealed`` over the real head, the seal at it and the lease's release, in one
        transaction (:meth:`SqlJournalStore.conclude`); a run found concluded but unsealed
        (by a worker before this layer concluded in one transaction) is only sealed."""
        if self.history.conclusion is not None:
            self.boundary("concluding")
            await self.seal_and_release(span)
            return
        note = None if output is None else output_note(self.profile, self.run, output)
        if note is not None:  # 0.22: the result goes before RunSealed, which has no member for it
            await self.append([note])
        payload: dict[str, Any] = {"outcome": outcome, "chain_head": self.history.head_hash.hex()}
        if output is not None and note is None:
            payload["output"] = output
        if reason is not None:
            payload["reason"] = reason
        sealed = self.record(RUN_SEALED, payload)
        self.boundary("concluding")
        self.check()
        await self.stop_heartbeat()  # the conclusion releases the lease it would renew
        try:
            records, _ = await self.store.conclude(self.epoch, [sealed], outcome)
        except REFUSALS as error:
            raise self._refused([sealed], error) from error
        self.history.add(records)
        await self._spans_after(span)

    async def _spans_after(self, span: Any) -> None:
        conclusion = self.history.conclusion
        if span is not None and span.recording and conclusion is not None:
            span.record(conclusion)
            inclusion = await self.store.inclusion_proof(self.run)
            if inclusion is not None:
                span.set(spans.LOG_INDEX, inclusion.index)

    async def seal_and_release(self, span: Any = None) -> None:
        conclusion = self.history.conclusion
        assert conclusion is not None
        try:
            await self.store.seal(self.run, self.epoch, conclusion.body["outcome"])
        except FencedError as error:
            self.lost = "fenced while sealing"
            raise RunLostError(self.run, self.lost) from error
        except HICCUPS as error:
            raise self.unavailable("the seal", error) from error
        await self.stop_heartbeat()
        try:
            await self.store.release_lease(self.run, self.epoch)
        except HICCUPS as error:  # sealed: the lease lapses, and a sweeper finds it concluded
            log.warning("run %s is sealed but its lease was not released: %s", self.run, error)
        await self._spans_after(span)
