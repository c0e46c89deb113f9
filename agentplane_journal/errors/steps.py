"""The durable-steps layer's errors (:mod:`agentplane_journal.steps`)."""

from __future__ import annotations

from agentplane_journal.core.error_groups import (
    ConflictError,
    OutcomeError,
    RefusedError,
    StoreError,
    UnavailableError,
)
from agentplane_journal.core.ids import EffectKey, RunId
from agentplane_journal.errors.advice import _run


class StepError(StoreError):
    """Base of the errors the durable-steps layer (:mod:`agentplane_journal.steps`) raises."""


class EffectInDoubtError(StepError, UnavailableError):
    """An effect started and recorded no result, and nothing could decide whether it landed.

    Raised instead of calling the effect again: a crash (or a failure that may have reached
    the outside world) left the journal unable to tell "never applied" from "applied, answer
    lost". The run is left open and unleased, listed as in doubt by ``agentplane-journal
    steps``; nothing more of it runs until someone decides.
    """

    def __init__(self, run: RunId, effect: str, effect_key: EffectKey, detail: str) -> None:
        self.run = _run(run)
        self.effect = effect
        self.effect_key = effect_key
        self.detail = detail
        super().__init__(
            f"effect {effect!r} (ek:{effect_key.hex()}) of run {self.run} is in doubt: {detail}. "
            "It was not called again, since it may have landed. Give the effect a reconcile= "
            "function that asks the provider (landed / did not happen / still unknown), or find "
            "out by hand and record the decision: `agentplane-journal steps settle "
            f"{self.run} {effect_key.hex()} --landed JSON | --did-not-happen --actor NAME` "
            "(or `await steps.settle(run, effect_key, Landed(result) | DidNotHappen(), "
            "actor)`), then resume the run (`agentplane-journal steps resume RUN --app "
            "MODULE:FUNCTION`, Steps.resume or a sweeper)"
        )


class EffectFailedError(StepError, OutcomeError):
    """An effect failed for good: permanently, or out of attempts; raised into the workflow.

    ``disposition`` says what the failure says about the outside world (``did_not_happen``,
    ``in_doubt``, ``landed``), as recorded in the run's ``EffectFailed`` record. A replay
    raises the same error from the record without calling the effect.
    """

    def __init__(
        self, run: RunId, effect: str, effect_key: EffectKey, error: str, disposition: str
    ) -> None:
        self.run = _run(run)
        self.effect = effect
        self.effect_key = effect_key
        self.error = error
        self.disposition = disposition
        super().__init__(
            f"effect {effect!r} (ek:{effect_key.hex()}) of run {self.run} failed for good "
            f"({disposition}): {error}; catch EffectFailedError in the workflow to take "
            "another path, or let the run conclude as failed"
        )


class RunLostError(StepError, ConflictError):
    """This worker no longer owns the run (fenced, lease not renewed, or lapsed): it stopped.

    Nothing more was done for the run after the loss was noticed; the new owner (or a
    sweeper, once the lease lapses) resumes it from its journal.
    """

    def __init__(self, run: RunId, detail: str) -> None:
        self.run = _run(run)
        self.detail = detail
        super().__init__(
            f"this worker lost run {self.run} ({detail}) and stopped working on it; do not "
            "retry here: the run's new owner, or a sweeper once the lease lapses, resumes it"
        )


class JournalUnavailableError(StepError, UnavailableError):
    """The journal could not record a step of a run: a database hiccup, not the workflow's
    failure.

    A statement that journals the run (an effect's start or result, the cancellation check,
    the conclusion, the seal) was refused or its commit was lost (``__cause__`` is the
    store's :class:`BackendError` or :class:`CommitUnknownError`). The worker stopped there
    and concluded nothing: the run stays open, its admission key answers ``InFlight``, and
    once this worker's lease lapses a sweeper resumes it from its journal (an effect that may
    have been called is reconciled, never called blindly again), or ``Steps.resume`` does.
    ``stage`` names what could not be recorded.
    """

    def __init__(self, run: RunId, stage: str, cause: BaseException) -> None:
        self.run = _run(run)
        self.stage = stage
        super().__init__(
            f"the journal could not record {stage} of run {self.run} ({cause}); the worker "
            "stopped and concluded nothing, since a database error is not the workflow's "
            "failure. The run stays open: a sweeper resumes it once this worker's lease "
            "lapses (`await steps.sweeper().drain()`), or `await steps.resume(run)` now that "
            "the database answers; an effect that may have run is reconciled, not re-run"
        )


class RunCancelledError(StepError, OutcomeError):
    """The run was stopped at a step boundary on request; it is concluded ``cancelled``."""

    def __init__(self, run: RunId, actor: str, reason: str) -> None:
        self.run = _run(run)
        self.actor = actor
        self.reason = reason
        super().__init__(
            f"run {self.run} was cancelled by {actor!r} ({reason or 'no reason given'}); it "
            "stopped between steps and is concluded and sealed as cancelled"
        )


class WorkflowNotRegisteredError(StepError, RefusedError):
    """A run's ``RunAdmitted`` names a workflow this :class:`Steps` has not registered."""

    def __init__(self, run: RunId, name: str) -> None:
        self.run = _run(run)
        self.name = name
        super().__init__(
            f"run {self.run} was admitted for workflow {name!r}, which this Steps has not "
            "registered; register it (@steps.workflow(name)) on the instance that resumes it"
        )


class WorkflowDivergedError(StepError, ConflictError):
    """A resumed workflow called a different effect at a position the journal has filled.

    Its code (or its inputs) changed between the original run and its resumption, so the
    journal's effects no longer line up with the calls: running on would perform effects the
    original run never asked for, beside ones it did. Nothing was called.
    """

    def __init__(self, run: RunId, ordinal: int, called: str, recorded: str) -> None:
        self.run = _run(run)
        self.ordinal = ordinal
        self.called = called
        self.recorded = recorded
        super().__init__(
            f"run {self.run}'s effect #{ordinal} is {recorded} in the journal, but the workflow "
            f"now calls {called} there; its code or inputs changed since the run started. "
            "Resume it with the code it started with (keep workflows deterministic between "
            "effects), or conclude it by hand"
        )


class StepUsageError(StepError, RefusedError):
    """An effect was called where its call cannot be journaled: outside a workflow, or while
    another effect of the same run is in progress. Nothing was called or written; call
    effects from a ``@steps.workflow`` function, one at a time."""


class NotInDoubtError(StepError, ConflictError):
    """``settle`` found the effect not in doubt (never was, or someone settled it first):
    nothing was recorded. ``agentplane-journal steps`` lists what is in doubt now."""

    def __init__(self, run: RunId, effect_key: EffectKey, message: str) -> None:
        self.run = _run(run)
        self.effect_key = effect_key
        super().__init__(message)
