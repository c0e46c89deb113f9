"""Effects: a user's async function made exactly-once, with honest doubt.

``@steps.effect("charge", reconcile=check_charge)`` turns ``charge`` into an
:class:`Effect` with the same signature (``ParamSpec``), callable only inside a workflow.
Each call is one effect at the next position of its run, and its key is agentplane's
derivation (``WireProfile.effect_key``) over that position, the attempt, the effect's name and
its arguments' canonical bytes under the run's wire profile (the one its admission was written
in, :mod:`.records`): the same call of the same run gets the same key on every replay.

A call, as :meth:`Effect.__call__` runs it, asks the journal first
(:meth:`RunHistory.verdict <agentplane_journal.steps.history.RunHistory.verdict>`):

* recorded result: returned, the function is not called;
* nothing recorded: ``EffectStarted`` is journaled (the exactly-once index refuses a second
  start of the key), then the function is called, then ``EffectDone`` or ``EffectFailed``;
* in doubt (started, no result): the reconcile function is asked and its answer journaled as
  ``EffectReconciled``; ``Landed`` is the result, ``DidNotHappen`` calls the function once
  under the same key, ``Unknown`` (or no reconcile function) stops the run with
  :class:`EffectInDoubtError` naming the effect. Never a blind second call.

Failures: :class:`SafeToRetry` is ``did_not_happen`` and is retried under the next attempt's
key up to ``attempts``; any other exception may have reached the outside world, so with a
reconcile function it is in doubt (asked at once), without one it fails for good
(``EffectFailed`` ``in_doubt``, permanent): :class:`EffectFailedError` in the workflow.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from agentplane_journal.core.append import EFFECT_STARTED
from agentplane_journal.core.canon_v1 import canonical_bytes_rfc8785
from agentplane_journal.core.ids import EffectKey
from agentplane_journal.core.profile import profile_of_record
from agentplane_journal.core.values import Cancellation
from agentplane_journal.errors import (
    EffectFailedError,
    EffectInDoubtError,
    StepUsageError,
    WorkflowDivergedError,
)
from agentplane_journal.steps import spans
from agentplane_journal.steps.history import (
    EFFECT_DONE,
    EFFECT_FAILED,
    EFFECT_RECONCILED,
    Verdict,
)
from agentplane_journal.steps.records import STEP
from agentplane_journal.steps.runner import STOPS
from agentplane_journal.steps.values import (
    DID_NOT_HAPPEN,
    IN_DOUBT,
    LANDED,
    DidNotHappen,
    Landed,
    Reconciliation,
    SafeToRetry,
    Unknown,
)

if TYPE_CHECKING:
    from agentplane_journal.core.profile import WireProfile
    from agentplane_journal.steps.runner import RunContext

__all__ = ["STEP", "Effect", "current_run"]

P = ParamSpec("P")
R = TypeVar("R")

#: The run the running workflow belongs to (each asyncio task sees its own).
current_run: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "agentplane_journal_steps_run", default=None
)


def arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments as the JSON value that is journaled and hashed into its key."""
    return {"args": list(args), "kwargs": dict(kwargs)}


class Effect(Generic[P, R]):
    """An exactly-once effect; call it like the function it wraps, inside a workflow."""

    def __init__(
        self,
        name: str,
        fn: Callable[P, Awaitable[R]],
        reconcile: Callable[P, Awaitable[Reconciliation[R]]] | None,
        attempts: int,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        self.name = name
        self.fn = fn
        self.reconcile = reconcile
        self.attempts = attempts
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"Effect({self.name!r})"

    async def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        ctx = current_run.get()
        if ctx is None:
            raise StepUsageError(
                f"effect {self.name!r} was called outside a workflow; call it from a function "
                "decorated with @steps.workflow, whose run journals it"
            )
        if ctx.busy:
            raise StepUsageError(
                f"effect {self.name!r} was called while another effect of run {ctx.run} is in "
                "progress; await effects one at a time (their positions must be deterministic)"
            )
        if ctx.stopped is not None:
            raise ctx.stopped  # a stop the workflow caught and went on from is still a stop
        ctx.busy = True
        try:
            return await self._run(ctx, args, kwargs)
        except STOPS as stop:
            ctx.stopped = stop
            raise
        finally:
            ctx.busy = False

    async def _run(self, ctx: RunContext, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        value = arguments(args, kwargs)
        profile = ctx.key_profile
        try:
            canonical = profile.canonical_bytes(value, path=f"{self.name}'s arguments")
            if ctx.profile is not profile:  # hashed in the run's, written in the journal's
                ctx.profile.canonical_bytes(value, path=f"{self.name}'s arguments")
        except (TypeError, ValueError) as error:
            raise TypeError(
                f"effect {self.name!r}'s arguments must be JSON values (they are journaled and "
                f"hashed into its key): {error}"
            ) from None
        ordinal = ctx.ordinal
        ctx.ordinal += 1
        recorded = ctx.history.positions.get(ordinal)
        if recorded is not None:
            descriptor = recorded.body.get("descriptor", {})
            # Compared as the record was written: a start written after the tenant migrated
            # holds its arguments in the new canon (100.0 came back as 100), which the run's
            # key profile would tell apart from the call it is.
            written = profile_of_record(recorded.body) or profile
            now = canonical if written is profile else _canonical_or_none(written, value)
            args_then = _canonical_or_none(written, descriptor.get("args"))
            if descriptor.get("kind") != self.name or args_then != now:
                raise WorkflowDivergedError(
                    ctx.run,
                    ordinal,
                    f"{self.name!r}",
                    f"{descriptor.get('kind')!r}"
                    + ("" if descriptor.get("kind") != self.name else " with other arguments"),
                )
        attempt, performed = 1, 0
        checked = False  # the step boundary's stop check made with a reconciliation
        while True:
            key = profile.effect_key(STEP, "forward", ordinal, attempt, self.name, value)
            if recorded is not None and not ctx.history.effects.get(key):
                key = _key_before_ties(ctx.history.effects, key, ordinal, attempt, self.name, value)
            known = ctx.history.verdict(key)
            verdict = known.verdict
            if verdict is Verdict.DONE:
                result: R = known.output
                return result
            if verdict is Verdict.FAILED:
                body = known.record.body if known.record is not None else {}
                raise EffectFailedError(
                    ctx.run, self.name, key, str(body.get("error", "")), body.get("disposition", "")
                )
            if verdict is Verdict.RETRY:
                if attempt >= self.attempts:
                    body = known.record.body if known.record is not None else {}
                    raise EffectFailedError(
                        ctx.run,
                        self.name,
                        key,
                        f"{body.get('error', '')} (after {attempt} attempts)",
                        DID_NOT_HAPPEN,
                    )
                attempt += 1
                continue
            if verdict is Verdict.IN_DOUBT or (
                # A previous owner's "did not happen" licenses nobody now: it may have called
                # after writing it. Ask again, under this epoch's fence, before calling.
                verdict is Verdict.PERFORM
                and known.record is not None
                and known.record.epoch != ctx.epoch
            ):
                checked = await self._reconcile(ctx, key, args, kwargs)
                continue
            if performed >= self.attempts:  # reconciled "did not happen" over and over
                raise EffectInDoubtError(
                    ctx.run, self.name, key, f"performed {performed} times without an answer"
                )
            performed += 1
            await self._perform(
                ctx, key, attempt, ordinal, value, args, kwargs, verdict is Verdict.NEW, checked
            )
            checked = False

    async def _perform(
        self,
        ctx: RunContext,
        key: EffectKey,
        attempt: int,
        ordinal: int,
        value: dict[str, Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        announce: bool,
        checked: bool = False,
    ) -> None:
        """Call the function once under ``key``; journal its start (if ``announce``) and end.
        ``checked``: the step boundary's stop check was made with the reconciliation just
        journaled (no await since), so it is not made again."""
        with spans.span(
            f"effect {self.name}",
            **{spans.RUN_ID: str(ctx.run), spans.EFFECT: self.name, spans.EFFECT_KEY: key.hex()},
        ) as span:
            # A step boundary, the only place a run stops on request: checked in the start's
            # own transaction, or on its own when this call journals no start.
            if announce:
                ctx.boundary("before_start")
                payload = {
                    "descriptor": {"kind": self.name, "args": value},
                    "recovery": "reconcile" if self.reconcile is not None else "requires_operator",
                    "mutates": True,
                    "attempt": attempt,
                    "backoff_ms": 0,
                    "ordinal": ordinal,
                }
                await ctx.start(ctx.effect_record(EFFECT_STARTED, payload, key))
                ctx.boundary("after_start")
            elif not checked:
                await ctx.check_cancel()
            ctx.check_deadline()  # no await from here to the call: the fence's proof holds
            try:
                output = await self.fn(*args, **kwargs)
            except SafeToRetry as error:
                failed: dict[str, Any] = {"error": _said(error), "disposition": DID_NOT_HAPPEN}
                (record,) = await ctx.append([ctx.effect_record(EFFECT_FAILED, failed, key)])
                span.record(record)
                return
            except Exception as error:
                failed = {"error": _said(error), "disposition": IN_DOUBT}
                if self.reconcile is None:
                    failed["permanent"] = True  # never retried blindly; the workflow decides
                (record,) = await ctx.append([ctx.effect_record(EFFECT_FAILED, failed, key)])
                span.record(record)
                return
            ctx.boundary("after_call")
            try:
                ctx.profile.canonical_bytes(output, path=f"{self.name}'s result")
            except (TypeError, ValueError) as error:
                # It happened, and its answer cannot be journaled: landed, never retried.
                failed = {"error": f"result is not JSON: {error}", "disposition": LANDED}
                failed["permanent"] = True
                await ctx.append([ctx.effect_record(EFFECT_FAILED, failed, key)])
                return
            (record,) = await ctx.append([ctx.effect_record(EFFECT_DONE, {"output": output}, key)])
            span.record(record)
            ctx.boundary("after_result")

    async def _reconcile(
        self, ctx: RunContext, key: EffectKey, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> bool:
        """Ask whether an in-doubt attempt landed; journal the answer (even "unknown").
        ``True`` when the answer ("did not happen": the call comes next, at this step
        boundary) was journaled in one transaction with the boundary's stop check."""
        if self.reconcile is None:
            raise EffectInDoubtError(
                ctx.run,
                self.name,
                key,
                "it started and recorded no result, and it has no reconcile function",
            )
        ctx.check()
        with spans.span(
            f"reconcile {self.name}",
            **{spans.RUN_ID: str(ctx.run), spans.EFFECT: self.name, spans.EFFECT_KEY: key.hex()},
        ) as span:
            detail: str | None = None
            try:
                answer: Reconciliation[R] = await self.reconcile(*args, **kwargs)
            except Exception as error:  # a failed probe tells nothing new: still in doubt
                answer, detail = Unknown(), f"the reconcile function raised {_said(error)}"
            payload: dict[str, Any]
            if isinstance(answer, Landed):
                payload = {"disposition": LANDED, "output": answer.result}
            elif isinstance(answer, DidNotHappen):
                payload = {"disposition": DID_NOT_HAPPEN}
            elif isinstance(answer, Unknown):
                payload = {"disposition": IN_DOUBT}
                detail = detail or answer.detail or None
            else:
                payload = {"disposition": IN_DOUBT}
                detail = (
                    f"the reconcile function returned {type(answer).__name__}, "
                    "not Landed, DidNotHappen or Unknown"
                )
            if detail:
                payload["detail"] = detail
            reconciled = ctx.effect_record(EFFECT_RECONCILED, payload, key)
            checked = bool(payload["disposition"] == DID_NOT_HAPPEN)
            if checked:
                # The call comes next: the step boundary's stop check rides this record's
                # transaction (one round trip, not a read and then a write).
                boundary = await ctx.unless_cancelled([reconciled])
                if isinstance(boundary, Cancellation):
                    (record,) = await ctx.append([reconciled])  # what was learned stays
                    span.record(record)
                    await ctx.cancelled(boundary)
                (record,) = boundary
            else:
                (record,) = await ctx.append([reconciled])
            span.record(record)
            span.set("agentplane.disposition", payload["disposition"])
        if payload["disposition"] == IN_DOUBT:
            raise EffectInDoubtError(
                ctx.run, self.name, key, detail or "the reconcile function could not tell"
            )
        return checked


def _key_before_ties(
    effects: Mapping[EffectKey, object],
    key: EffectKey,
    ordinal: int,
    attempt: int,
    name: str,
    value: object,
) -> EffectKey:
    """The key a run started before canon v1 followed agentplane on exact ties recorded for
    this call, if it recorded one, else ``key``.

    Until issue 36, canon v1 wrote a double exactly halfway between two shortest digit
    strings with the even one (RFC 8785's rule), and derived effect keys over those bytes;
    agentplane, and canon v1 now, write the upper one. A run in flight across the upgrade
    whose arguments hold such a double would otherwise find no record under the new key and
    call the effect a second time. Only asked for a position the run has already recorded,
    so a fresh call costs nothing more."""
    try:
        raw = canonical_bytes_rfc8785(value, path="args")
    except (TypeError, ValueError):
        return key
    before = EffectKey.derive(STEP, "forward", ordinal, attempt, name, raw)
    return before if before != key and effects.get(before) else key


def _canonical_or_none(profile: WireProfile, value: object) -> bytes | None:
    """A recorded call's arguments as ``profile`` hashes them; ``None`` if they are not JSON
    it can write (then they are not the call being made now)."""
    try:
        return profile.canonical_bytes(value)
    except (TypeError, ValueError):
        return None


def _said(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
