"""``Steps``: the durable-steps layer's entry point, one per worker process and tenant.

::

    steps = Steps(store, tenant="acme", instance="worker-1", lease_ttl=30)

    @steps.effect("charge", reconcile=check_charge)
    async def charge(amount: int, card: str) -> dict[str, Any]: ...

    @steps.workflow("checkout")
    async def checkout(order: dict[str, Any]) -> dict[str, Any]:
        receipt = await charge(order["amount"], order["card"])
        return {"receipt": receipt}

    admission = await checkout.start("order-42", order)  # Fresh | Finished | InFlight
    await steps.sweeper().drain()  # resume what dead instances left, on any instance

The decorators keep the functions' signatures for type checkers (``ParamSpec``). Names are
the durable identity: a workflow's name is journaled in its ``RunAdmitted`` record (how a
sweeper on another instance finds the code to resume), an effect's name is hashed into its
key. Rename neither while runs are open.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar, overload

from agentplane_journal.core.admission import RUN_ADMITTED
from agentplane_journal.core.checks import check_label, check_ttl
from agentplane_journal.core.ids import EffectKey, RunId
from agentplane_journal.errors import (
    CorruptRecordError,
    NotInDoubtError,
    WorkflowNotRegisteredError,
    command,
    database_of,
)
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.steps.effect import Effect
from agentplane_journal.steps.history import EFFECT_RECONCILED, RunHistory
from agentplane_journal.steps.records import effect_record
from agentplane_journal.steps.runner import Boundary, RunContext
from agentplane_journal.steps.sweeper import Sweeper
from agentplane_journal.steps.values import (
    DID_NOT_HAPPEN,
    LANDED,
    Admission,
    DidNotHappen,
    Finished,
    InFlight,
    Landed,
    Reconciliation,
)
from agentplane_journal.steps.workflow import Workflow, outcome_of

__all__ = ["Steps"]

P = ParamSpec("P")
R = TypeVar("R")


class Steps:
    """The registry of one worker's workflows and effects over a store (see the module doc).

    ``instance`` names this worker in leases (an operator sees it); ``lease_ttl`` (seconds)
    must exceed the longest effect call plus ``margin``: a call starts only when the lease
    has ``margin`` seconds left, and a lease that lapses mid-call lets a sweeper resume the
    run, which then finds that effect in doubt and reconciles it. ``clock`` is the local
    clock those seconds are counted on (monotonic; a test passes its fake clock).
    """

    def __init__(
        self,
        store: SqlJournalStore,
        *,
        instance: str,
        tenant: str | None = None,
        lease_ttl: int | timedelta = 30,
        margin: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        _boundary: Boundary | None = None,
    ) -> None:
        if not isinstance(store, SqlJournalStore):
            raise TypeError(f"store must be a SqlJournalStore, not {type(store).__name__}")
        self.store = store if tenant is None or tenant == store.tenant else store.for_tenant(tenant)
        self.instance = check_label(instance, "instance")
        self.lease_ttl = check_ttl(lease_ttl)
        if not 0 <= margin < self.lease_ttl:
            raise ValueError(f"margin must be in [0, lease_ttl), got {margin}")
        self.margin = margin
        self.clock = clock
        self._boundary = _boundary
        self.workflows: dict[str, Workflow[Any, Any]] = {}
        self.effects: dict[str, Effect[Any, Any]] = {}
        #: Runs this object is running now (never reclaimed from itself by its sweeper).
        self.active: set[RunId] = set()

    # Two signatures, because without a reconcile function nothing at the call binds P and R:
    # in one signature mypy solved them there, as Never, refusing every decorated function.
    # Alone in the return type they stay the decorated function's.
    @overload
    def effect(
        self, name: str, *, reconcile: None = None, attempts: int = 3
    ) -> Callable[[Callable[P, Awaitable[R]]], Effect[P, R]]: ...

    @overload
    def effect(
        self,
        name: str,
        *,
        reconcile: Callable[P, Awaitable[Reconciliation[R]]],
        attempts: int = 3,
    ) -> Callable[[Callable[P, Awaitable[R]]], Effect[P, R]]: ...

    def effect(
        self,
        name: str,
        *,
        reconcile: Callable[P, Awaitable[Reconciliation[R]]] | None = None,
        attempts: int = 3,
    ) -> Callable[[Callable[P, Awaitable[R]]], Effect[P, R]]:
        """Declare an exactly-once effect named ``name`` (see :mod:`.effect`).

        ``reconcile`` takes the effect's arguments and answers ``Landed(result)``,
        ``DidNotHappen()`` or ``Unknown(detail)``; ``attempts`` bounds the calls of one
        effect that raised :class:`SafeToRetry`. The effect (and ``reconcile``) must be an
        ``async def``: a plain function is refused here, before it could run a side effect
        the journal cannot order.
        """
        name = check_label(name, "effect name")
        if name in self.effects:
            raise ValueError(f"an effect named {name!r} is already registered")
        if reconcile is not None:
            _require_async(reconcile, f"effect {name!r}'s reconcile function")

        def register(fn: Callable[P, Awaitable[R]]) -> Effect[P, R]:
            _require_async(fn, f"effect {name!r}")
            effect = Effect(name, fn, reconcile, attempts)
            self.effects[name] = effect
            return effect

        return register

    def workflow(self, name: str) -> Callable[[Callable[P, Awaitable[R]]], Workflow[P, R]]:
        """Declare a workflow named ``name`` (see :mod:`.workflow`)."""
        name = check_label(name, "workflow name")
        if name in self.workflows:
            raise ValueError(f"a workflow named {name!r} is already registered")

        def register(fn: Callable[P, Awaitable[R]]) -> Workflow[P, R]:
            _require_async(fn, f"workflow {name!r}")
            workflow = Workflow(self, name, fn)
            self.workflows[name] = workflow
            return workflow

        return register

    def context(
        self, run: RunId, epoch: int, history: RunHistory, leased_at: float | None = None
    ) -> RunContext:
        return RunContext(
            self.store,
            run,
            self.instance,
            epoch,
            self.lease_ttl,
            history,
            boundary=self._boundary,
            margin=self.margin,
            clock=self.clock,
            leased_at=leased_at,
        )

    async def admission_of(self, run: RunId, key: str | None = None) -> Admission[Any]:
        """What admission key ``key`` already claimed for ``run`` answers: its outcome or in
        flight.

        ``run`` comes from the admission index (``run_admission``), a side table anyone with
        write access can point at another run; the claim itself is the run's hashed first
        record. So with ``key`` the run is this key's only if its first record (re-hashed as
        it is read) is a ``RunAdmitted`` claiming ``key``: otherwise
        :class:`CorruptRecordError`, and another run's outcome is never answered as this
        key's.
        """
        records = await self.store.read(run)
        if key is not None:
            first = records[0] if records else None
            if first is None or first.kind != RUN_ADMITTED or first.idempotency_key != key:
                raise CorruptRecordError(
                    first.seq if first is not None else 0,
                    f"run {run} does not begin with the admission of {key!r}: the admission "
                    "index points this key at another run (see "
                    f"{command('verify --all', database_of(self.store))} and "
                    f"{command('reindex-admissions', database_of(self.store))})",
                )
        history = RunHistory.of(records)
        if history.conclusion is None:
            return InFlight(run)
        return Finished(run, outcome_of(history))

    async def cancel(self, run: RunId, actor: str, reason: str = "") -> bool:
        """Ask ``run`` to stop at its next step boundary (no lease needed)."""
        return await self.store.request_cancel(run, actor, reason)

    async def settle(
        self, run: RunId, effect_key: EffectKey, answer: Landed[Any] | DidNotHappen, actor: str
    ) -> None:
        """Record a person's decision about an effect in doubt, then leave the run to resume.

        For an effect with no reconcile function (or one that could not tell): someone
        looked at the provider and knows. Journaled as ``EffectReconciled`` under a lease of
        its own (claimed and released here, so the run must not be leased live), with
        ``detail`` naming ``actor``; ``resume`` then uses the result (``Landed``) or calls
        the effect once (``DidNotHappen``). Refused unless that key is in doubt now.
        """
        history = RunHistory.of(await self.store.read(run))
        if effect_key not in history.in_doubt():
            raise NotInDoubtError(
                run,
                effect_key,
                f"effect ek:{effect_key.hex()} of run {run} is not in doubt; nothing to settle "
                f"(see {command('steps', database_of(self.store))} for what is)",
            )
        if isinstance(answer, Landed):
            payload: dict[str, Any] = {"disposition": LANDED, "output": answer.result}
        elif isinstance(answer, DidNotHappen):
            payload = {"disposition": DID_NOT_HAPPEN}
        else:
            raise TypeError(f"answer must be Landed(result) or DidNotHappen(), not {answer!r}")
        payload["detail"] = f"settled by {check_label(actor, 'actor')}"
        lease = await self.store.acquire(run, self.instance, self.lease_ttl)
        try:
            # Read again under the lease: the decision is about the history it now holds.
            history = RunHistory.of(await self.store.read(run))
            if effect_key not in history.in_doubt():
                raise NotInDoubtError(
                    run,
                    effect_key,
                    f"effect ek:{effect_key.hex()} of run {run} was settled meanwhile",
                )
            append = effect_record(self.store.profile, run, EFFECT_RECONCILED, payload, effect_key)
            await self.store.append(lease.epoch, [append])
        finally:
            await self.store.release_lease(run, lease.epoch)

    async def resume(self, run: RunId) -> Any:
        """Take ``run`` over now and run it on from its journal (see :class:`Sweeper`)."""
        return await Sweeper(self).resume(run)

    def sweeper(self, batch: int = 100) -> Sweeper:
        """A :class:`~agentplane_journal.steps.sweeper.Sweeper` over this registry."""
        return Sweeper(self, batch=batch)

    def workflow_named(self, run: RunId, name: str) -> Workflow[Any, Any]:
        workflow = self.workflows.get(name)
        if workflow is None:
            raise WorkflowNotRegisteredError(run, name)
        return workflow


def _require_async(fn: object, what: str) -> None:
    """Refuse a plain function where a coroutine function is awaited: called, it would run
    (and its side effect happen) before the layer could find it returned no awaitable."""
    if not (
        inspect.iscoroutinefunction(fn)
        or (not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__))
    ):
        raise TypeError(
            f"{what} must be an async def (a coroutine function), not "
            f"{type(fn).__name__} {getattr(fn, '__qualname__', fn)!r}: declare it with "
            "`async def`, and run blocking code inside it with `await asyncio.to_thread(...)`"
        )
