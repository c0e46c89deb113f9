"""A worker restarted under its own instance name reclaims its runs at once (both dialects).

Before, a restarted worker waited out its previous life's lease (30 s by default) before a
sweeper could take the runs over: ``acquire`` refuses a live lease, even the caller's own.
``drain(reclaim_own=True)`` takes over, with a new epoch, the live leases that name this
instance and that this ``Steps`` is not running itself; another instance's live leases and
this object's own running runs are left alone.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from agentplane_journal import LeaseHeldError, SqlJournalStore, Steps

TTL = 30


class Dies(BaseException):
    """The worker's process died here."""


def register(
    steps: Steps,
    calls: Counter[str],
    gate: asyncio.Event | None = None,
    called: asyncio.Event | None = None,
) -> Any:
    @steps.effect("charge")
    async def charge(order: str) -> str:
        calls[order] += 1
        if called is not None:
            called.set()
        if gate is not None:
            await gate.wait()
        return f"ch_{order}"

    @steps.workflow("checkout")
    async def checkout(order: str) -> str:
        return await charge(order)

    return checkout


async def died_holding(store: SqlJournalStore, key: str) -> Any:
    """A run whose worker ``w1`` died before its effect's start: its lease still live."""

    def die(at: str) -> None:
        if at == "before_start":
            raise Dies(at)

    dead = Steps(store, instance="w1", lease_ttl=TTL, _boundary=die)
    checkout = register(dead, Counter())
    with pytest.raises(Dies):
        await checkout.start(key, key)
    run = await store.admitted_as(key)
    assert run is not None
    return run


async def test_a_restarted_worker_resumes_its_own_runs_without_waiting(make_store: Any) -> None:
    store: SqlJournalStore = await make_store()
    run = await died_holding(store, "o1")
    assert await store.abandoned_runs(10) == []  # live: no sweeper may take it yet
    assert await store.held_by("w1", 10) == [run]

    calls: Counter[str] = Counter()
    other = Steps(await make_store(), instance="w2", lease_ttl=TTL)
    register(other, calls)
    report = await other.sweeper().drain(reclaim_own=True)
    assert report.resumed == [] and calls == Counter(), "another instance's run was taken"

    restarted = Steps(await make_store(), instance="w1", lease_ttl=TTL)
    register(restarted, calls)
    plain = await restarted.sweeper().drain()
    assert plain.resumed == [], "without reclaim_own the live lease is left alone"
    report = await restarted.sweeper().drain(reclaim_own=True)
    ((resumed,),) = [report.resumed]
    assert (resumed.run_id, resumed.result, resumed.error) == (run, "ch_o1", None)
    assert resumed.epoch == 2 and calls == Counter({"o1": 1})
    assert await store.held_by("w1", 10) == []  # concluded, sealed and released


async def test_a_sweeper_never_reclaims_what_its_own_steps_is_running(make_store: Any) -> None:
    store: SqlJournalStore = await make_store()
    steps = Steps(store, instance="w1", lease_ttl=TTL)
    calls: Counter[str] = Counter()
    gate, called = asyncio.Event(), asyncio.Event()
    checkout = register(steps, calls, gate, called)
    running = asyncio.create_task(checkout.start("o2", "o2"))
    await called.wait()
    report = await steps.sweeper().drain(reclaim_own=True)
    assert report.resumed == [] and report.skipped == []
    gate.set()
    admission = await running
    assert admission.result == "ch_o2" and calls == Counter({"o2": 1})


async def test_reclaim_is_a_flag_and_fences_the_previous_epoch(make_store: Any) -> None:
    store: SqlJournalStore = await make_store()
    from agentplane_journal import Append, FencedError, RunId

    run = RunId.generate()
    first = await store.acquire(run, "w1", TTL)
    with pytest.raises(TypeError):
        await store.acquire(run, "w1", TTL, reclaim="yes")  # type: ignore[arg-type]
    with pytest.raises(LeaseHeldError):
        await store.acquire(run, "w2", TTL, reclaim=True)  # only the owner's own
    second = await store.acquire(run, "w1", TTL, reclaim=True)
    assert second.epoch == first.epoch + 1
    with pytest.raises(FencedError):
        await store.append(first.epoch, [Append(run, "Note", {"text": "stale"})])
