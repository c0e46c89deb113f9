"""A database hiccup is never a workflow's failure, and never loses an effect (both dialects).

The fault is real: a trigger on the journal table makes the database refuse the statement
that journals one kind of record (on PostgreSQL also a query cancelled with
``pg_cancel_backend`` and a connection killed with ``pg_terminate_backend`` while it runs).
At each step boundary (the effect's start, its result, the conclusion) the worker must stop
with :class:`JournalUnavailableError`, conclude nothing, leave the admission key answering
``InFlight``, and a sweeper must later finish the run with every effect called exactly once
(an effect whose result was lost is reconciled, not called again).

Before the fix each case concluded the run ``failed`` and sealed it: the landed charge's
result was lost for good and the key answered "failed".
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from agentplane_journal import (
    DidNotHappen,
    Finished,
    InFlight,
    JournalUnavailableError,
    Landed,
    SqlJournalStore,
    Steps,
)

from support.clock import FakeClock
from support.faults import refused

TTL = 30


class Shop:
    """A payment provider, counted outside the journal."""

    def __init__(self) -> None:
        self.charges: Counter[str] = Counter()
        self.reconciled = 0

    def build(self, steps: Steps) -> Any:
        shop = self

        async def check_charge(order: str) -> Any:
            shop.reconciled += 1
            return Landed(f"ch_{order}") if shop.charges[order] else DidNotHappen()

        @steps.effect("charge", reconcile=check_charge)
        async def charge(order: str) -> str:
            shop.charges[order] += 1
            return f"ch_{order}"

        @steps.workflow("checkout")
        async def checkout(order: str) -> str:
            return await charge(order)

        return checkout


CASES = [
    # (the record the database refuses, charges made before the stop, reconciled on resume)
    ("EffectStarted", 0, 0),
    ("EffectDone", 1, 1),
    ("RunSealed", 1, 0),
]


@pytest.mark.parametrize(("kind", "charged", "reconciled"), CASES)
async def test_a_refused_statement_stops_the_worker_and_recovery_finishes_the_run(
    make_store: Any, clock: FakeClock, kind: str, charged: int, reconciled: int
) -> None:
    await hiccup_then_recover(make_store, clock, kind, "raise", charged, reconciled)


@pytest.mark.parametrize("dialect", ["postgresql"])  # pg_cancel/terminate_backend: PG's
@pytest.mark.parametrize("mode", ["cancel", "terminate"])
@pytest.mark.parametrize(("kind", "charged", "reconciled"), CASES)
async def test_a_cancelled_query_or_killed_connection_is_doubt_not_failure(
    make_store: Any, clock: FakeClock, kind: str, charged: int, reconciled: int, mode: str
) -> None:
    await hiccup_then_recover(make_store, clock, kind, mode, charged, reconciled)


async def hiccup_then_recover(
    make_store: Any, clock: FakeClock, kind: str, mode: str, charged: int, reconciled: int
) -> None:
    store: SqlJournalStore = await make_store()
    shop = Shop()
    checkout = shop.build(Steps(store, instance="w1", lease_ttl=TTL))
    async with refused(store, kind, mode):
        with pytest.raises(JournalUnavailableError) as caught:
            await checkout.start("order-1", "o1")
    assert caught.value.stage == f"its {kind}"
    assert shop.charges["o1"] == charged
    run = await store.admitted_as("order-1")
    assert run is not None
    records = await store.read(run)
    assert "RunSealed" not in [r.kind for r in records], "a hiccup concluded the run"
    assert not any(r.kind == "EffectFailed" for r in records)
    again = await checkout.start("order-1", "o1")
    assert isinstance(again, InFlight) and again.run_id == run

    clock.advance(TTL + 1)  # the stopped worker's lease lapses: the run is in the queue
    assert run in await store.abandoned_runs(10)
    sweeper_shop = shop
    steps = Steps(await make_store(), instance="w2", lease_ttl=TTL)
    sweeper_shop.build(steps)
    report = await steps.sweeper().drain()
    assert [(r.run_id, r.result, r.error) for r in report.resumed] == [(run, "ch_o1", None)]
    assert shop.charges["o1"] == 1, "the effect ran twice"
    assert shop.reconciled == reconciled
    finished = await checkout.start("order-1", "o1")
    assert isinstance(finished, Finished)
    assert finished.outcome.status == "succeeded" and finished.outcome.result == "ch_o1"
    assert await store.verify(run) is not None


async def test_a_workflow_that_catches_the_stop_is_stopped_all_the_same(
    make_store: Any, clock: FakeClock
) -> None:
    store: SqlJournalStore = await make_store()
    steps = Steps(store, instance="w1", lease_ttl=TTL)
    calls: list[str] = []

    @steps.effect("note")
    async def note(text_: str) -> str:
        calls.append(text_)
        return text_

    @steps.workflow("careless")
    async def careless() -> str:
        try:
            await note("first")
        except Exception:
            return "swallowed"
        return "done"

    async with refused(store, "EffectStarted"):
        with pytest.raises(JournalUnavailableError):
            await careless.start("k")
    run = await store.admitted_as("k")
    assert run is not None and calls == []
    assert "RunSealed" not in [r.kind for r in await store.read(run)]
