"""A durable-steps run's transactions, counted (both dialects): at most two per effect and
two per workflow (issue 33). Before, a 3-step workflow was 15 transactions: the admission
lookup, the lease and ``RunAdmitted`` apart, a cancellation read before each effect, and
``RunSealed``, the seal and the release apart. Now it is the admission (lease, key,
``RunAdmitted``), each effect's start with its cancellation check, each result, and the
conclusion (``RunSealed``, seal, release): 8. Counted at the client
(:mod:`counting`: SQLAlchemy's events, the driver's own calls, SQLite's trace).
"""

from __future__ import annotations

from typing import Any

from counting import counting

from agentplane_journal import Finished, RunCancelledError, SqlJournalStore, Steps

TTL = 30


def three_steps(steps: Steps) -> Any:
    @steps.effect("a")
    async def a(x: int) -> int:
        return x + 1

    @steps.effect("b")
    async def b(x: int) -> int:
        return x * 2

    @steps.effect("c")
    async def c(x: int) -> int:
        return x - 3

    @steps.workflow("three")
    async def three(x: int) -> int:
        return await c(await b(await a(x)))

    return three


async def test_a_three_step_workflow_is_eight_transactions(store: SqlJournalStore) -> None:
    three = three_steps(Steps(store, instance="w1", lease_ttl=TTL))
    await three.start("warm", 0)  # the schema check, the profile, the pool
    with counting(store.engine) as counts:
        fresh = await three.start("k1", 1)
    assert fresh.result == 1
    assert counts.transactions == 8 <= 2 * 3 + 2, counts
    assert counts.commits == 8, counts
    if store.engine.dialect.name == "sqlite":
        # The effects' starts and results: one hop to SQLite's thread each.
        assert counts.hops <= 80, counts
    again = await three.start("k1", 1)
    assert isinstance(again, Finished) and again.outcome.result == 1


async def test_a_stop_request_found_with_the_start_writes_no_start(
    store: SqlJournalStore,
) -> None:
    steps = Steps(store, instance="w1", lease_ttl=TTL)
    called: list[str] = []

    @steps.effect("first")
    async def first() -> str:
        called.append("first")
        await steps.cancel(current_run_id(), "operator", "enough")
        return "1"

    @steps.effect("second")
    async def second() -> str:
        called.append("second")
        return "2"

    @steps.workflow("two")
    async def two() -> str:
        return await first() + await second()

    try:
        await two.start("k")
    except RunCancelledError as stop:
        assert stop.actor == "operator"
    else:
        raise AssertionError("the run was not cancelled")
    run = await store.admitted_as("k")
    assert run is not None and called == ["first"]
    kinds = [r.kind for r in await store.read(run)]
    assert kinds.count("EffectStarted") == 1, kinds  # the second start was never written
    assert kinds[-2:] == ["RunCancelled", "RunSealed"]
    assert await store.inclusion_proof(run) is not None
    assert await store.lease_of(run) == ("", (await store.lease_of(run) or ("", 0, 0))[1], 0)


def current_run_id() -> Any:
    from agentplane_journal.steps.effect import current_run

    ctx = current_run.get()
    assert ctx is not None
    return ctx.run
