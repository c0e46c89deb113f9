"""Workflows: a user's async function run as one durable run per admission.

``@steps.workflow("checkout")`` turns ``checkout`` into a :class:`Workflow` with the same
signature. ``await checkout.start(key, order)`` admits a run under admission key ``key``
(``None`` for none) and runs it here; the key is the first argument because a keyword
between ``*args: P.args`` and ``**kwargs: P.kwargs`` cannot be typed (PEP 612).

Admission (agentplane 0.22.0's ``admit``): the run's lease, ``RunAdmitted`` and the claim of
its key are one transaction (``SqlJournalStore.admit``), so a run exists leased (a crash from
here on leaves a run the recovery queue lists) or not at all. A key already claimed answers
:class:`Finished` (its recorded outcome) or :class:`InFlight` (its run id); nothing runs.
The run the admission index names for the key is believed only if its first record, read
and re-hashed, is a ``RunAdmitted`` claiming the key (:class:`CorruptRecordError` otherwise).

Running (here, or resumed by a sweeper from the journal): the function is called with the
admitted arguments; each effect replays what is recorded and performs what is not. A
return concludes ``succeeded`` (the value in the ``RunSealed`` record), an exception
``failed``; both are sealed. A lost lease, a cancellation or an effect in doubt stop it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar

from agentplane_journal.core.admission import IDEMPOTENCY_KEY, RUN_ADMITTED
from agentplane_journal.core.ids import RunId
from agentplane_journal.core.record import Record
from agentplane_journal.errors import (
    CorruptRecordError,
    DuplicateAdmissionError,
    EffectInDoubtError,
    JournalUnavailableError,
    WorkflowDivergedError,
)
from agentplane_journal.steps import spans
from agentplane_journal.steps.effect import arguments, current_run
from agentplane_journal.steps.history import RunHistory
from agentplane_journal.steps.records import run_record
from agentplane_journal.steps.runner import HICCUPS, STOPS, RunContext
from agentplane_journal.steps.values import (
    FAILED,
    SUCCEEDED,
    Admission,
    Fresh,
    Outcome,
)

if TYPE_CHECKING:
    from agentplane_journal.journal.store import SqlJournalStore

__all__ = ["Registry", "Workflow", "outcome_of"]

P = ParamSpec("P")
R = TypeVar("R")


class Registry(Protocol):
    """What a :class:`Workflow` and the :class:`~agentplane_journal.steps.sweeper.Sweeper` use
    of the registry that made them (:class:`~agentplane_journal.steps.api.Steps` is the one).

    Typed here, by what they read, so that neither imports ``api.py``, which imports both.
    """

    @property
    def store(self) -> SqlJournalStore: ...
    @property
    def instance(self) -> str: ...
    @property
    def lease_ttl(self) -> int: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def active(self) -> set[RunId]:
        """Runs this object is running now (never reclaimed from itself by its sweeper)."""
        ...

    @property
    def workflows(self) -> Mapping[str, Workflow[Any, Any]]: ...
    def context(
        self, run: RunId, epoch: int, history: RunHistory, leased_at: float | None = None
    ) -> RunContext: ...
    async def admission_of(self, run: RunId, key: str | None = None) -> Admission[Any]: ...
    def workflow_named(self, run: RunId, name: str) -> Workflow[Any, Any]: ...


def outcome_of(history: RunHistory) -> Outcome[Any]:
    """A concluded run's outcome, from its ``RunSealed`` (and its output note in 0.22)."""
    assert history.conclusion is not None
    body = history.conclusion.body
    return Outcome(str(body.get("outcome")), history.result(), body.get("reason"))


class Workflow(Generic[P, R]):
    """A durable workflow; :meth:`start` admits and runs one run of it."""

    def __init__(self, steps: Registry, name: str, fn: Callable[P, Awaitable[R]]) -> None:
        self.steps = steps
        self.name = name
        self.fn = fn
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"Workflow({self.name!r})"

    async def start(self, key: str | None, /, *args: P.args, **kwargs: P.kwargs) -> Admission[R]:
        """Admit a run under admission key ``key`` (or none) and run it to its conclusion.

        :class:`Fresh` with the return value when this call ran it; :class:`Finished` or
        :class:`InFlight` when ``key`` already admitted a run. The workflow's own exception
        propagates (the run is concluded ``failed``); so do :class:`RunLostError`,
        :class:`RunCancelledError` and :class:`EffectInDoubtError`, which leave the run to
        its new owner, concluded, or waiting for a decision.
        """
        store = self.steps.store
        profile = await store.wire_profile()
        value = arguments(args, kwargs)
        profile.canonical_bytes(value, path=f"workflow {self.name!r}'s arguments")
        payload: dict[str, Any] = {"capability": self.name, "input": value}
        if key is not None:
            payload[IDEMPOTENCY_KEY] = key
        run = RunId.generate()
        leased_at = self.steps.clock()
        try:
            # The lease, the key's claim and RunAdmitted: one transaction, all or nothing.
            lease, records = await store.admit(
                run,
                self.steps.instance,
                self.steps.lease_ttl,
                [run_record(profile, run, RUN_ADMITTED, payload)],
            )
        except DuplicateAdmissionError as error:
            # The holder is named by the admission index: checked against its hashed
            # RunAdmitted before its outcome is answered as this key's.
            return await self.steps.admission_of(error.run, key)
        except HICCUPS as error:
            # Refused: nothing at all was written (no lease either). A lost commit may have
            # admitted it: its lease then lapses and a sweeper resumes the run.
            raise JournalUnavailableError(run, "its RunAdmitted", error) from error
        ctx = self.steps.context(run, lease.epoch, RunHistory.of(records), leased_at)
        self.steps.active.add(run)
        try:
            result: R = await execute(ctx, self.fn, args, kwargs, self.name)
        finally:
            self.steps.active.discard(run)
        return Fresh(run, result)


async def execute(
    ctx: RunContext,
    fn: Callable[..., Awaitable[Any]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    name: str,
) -> Any:
    """Run (or resume) ``fn`` as ``ctx``'s run, to its conclusion or a stop."""
    with spans.span(
        f"workflow {name}", **{spans.RUN_ID: str(ctx.run), spans.WORKFLOW: name}
    ) as span:
        ctx.start_heartbeat()
        token = current_run.set(ctx)
        try:
            try:
                result = await fn(*args, **kwargs)
            except STOPS:
                raise
            except Exception as error:
                if ctx.stopped is not None:  # the workflow turned a stop into its own error
                    raise ctx.stopped from error
                reason = f"{type(error).__name__}: {error}"
                await ctx.conclude(FAILED, reason=reason[:2000], span=span)
                span.set(spans.OUTCOME, FAILED)
                raise
            if ctx.stopped is not None:  # the workflow caught a stop and returned anyway
                raise ctx.stopped
            try:
                ctx.profile.canonical_bytes(result, path=f"workflow {name!r}'s result")
            except (TypeError, ValueError) as error:
                await ctx.conclude(FAILED, reason=f"its result is not JSON: {error}", span=span)
                raise TypeError(
                    f"workflow {name!r} returned a value that is not JSON ({error}); the run "
                    "is concluded failed: return what the journal can record"
                ) from None
            await ctx.conclude(SUCCEEDED, output=result, span=span)
            span.set(spans.OUTCOME, SUCCEEDED)
            return result
        except (EffectInDoubtError, WorkflowDivergedError):
            # Waiting for a decision: released, so no sweeper spins on it; listed in doubt.
            await ctx.stop_heartbeat()
            if ctx.lost is None:
                await ctx.store.release_lease(ctx.run, ctx.epoch)
            raise
        finally:
            current_run.reset(token)
            await ctx.stop_heartbeat()


def admitted_call(record: Record) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    """The workflow name and arguments a ``RunAdmitted`` record carries.

    A body of another shape (a run admitted by another writer, or rewritten at rest with
    its chain) is :class:`CorruptRecordError` naming the record, never a crash."""
    body = record.body
    value = body.get("input") or {}
    name = body.get("capability")
    args = value.get("args", []) if isinstance(value, dict) else None
    kwargs = value.get("kwargs", {}) if isinstance(value, dict) else None
    if not isinstance(name, str) or not isinstance(args, list) or not isinstance(kwargs, dict):
        raise CorruptRecordError(
            record.seq, "RunAdmitted is not a durable-steps call (capability, input.args/kwargs)"
        )
    return name, tuple(args), dict(kwargs)
