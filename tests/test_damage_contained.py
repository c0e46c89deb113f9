"""One damaged run is reported, not contagious (both dialects).

A run whose records were edited at rest does not verify. Every walk over many runs (the
durable-steps sweeper, the operator's ``steps`` listing, the LangGraph saver's tenant-wide
``list`` and ``delete_for_runs``) names it with its error and goes on with the rest; before,
the first such run raised out of the walk, so recovery of every run behind it stopped, on
every attempt.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from sqlalchemy import text

from agentplane_journal import CorruptRecordError, DamagedRunsError, SqlJournalStore, Steps
from agentplane_journal.steps.status import open_runs

from support.clock import FakeClock

TTL = 30


async def edit(store: SqlJournalStore, run: Any, seq: int, old: bytes, new: bytes) -> None:
    """An at-rest edit by someone with write access to the table (no key)."""
    where = "WHERE tenant = :t AND run_id = :r AND seq = :s"
    params = {"t": store.tenant, "r": str(run), "s": seq}
    async with store.engine.begin() as conn:
        raw = (await conn.execute(text(f"SELECT raw FROM journal {where}"), params)).scalar_one()
        assert old in bytes(raw)
        await conn.execute(
            text(f"UPDATE journal SET raw = :raw {where}"),
            {**params, "raw": bytes(raw).replace(old, new)},
        )


class Dies(BaseException):
    """The worker died here (no handler of the layer sees it)."""


def register(steps: Steps, calls: list[str]) -> Any:
    @steps.effect("charge")
    async def charge(order: str) -> str:
        calls.append(order)
        return f"ch_{order}"

    @steps.workflow("checkout")
    async def checkout(order: str) -> str:
        return await charge(order)

    return checkout


async def abandon(make_store: Any, orders: list[str]) -> list[Any]:
    """Runs admitted by a worker that died before its first effect, one per order."""

    def die(at: str) -> None:
        if at == "before_start":
            raise Dies(at)

    runs = []
    for order in orders:
        dead = Steps(await make_store(), instance="dead", lease_ttl=TTL, _boundary=die)
        checkout = register(dead, [])
        with pytest.raises(Dies):
            await checkout.start(order, order)
        run = await dead.store.admitted_as(order)
        assert run is not None
        runs.append(run)
    return runs


async def test_the_sweeper_reports_a_damaged_run_and_resumes_the_rest(
    make_store: Any, clock: FakeClock
) -> None:
    runs = await abandon(make_store, ["a", "b", "c"])
    store: SqlJournalStore = await make_store()
    await edit(store, runs[1], 1, b'"checkout"', b'"checkouT"')
    clock.advance(TTL + 1)
    calls: list[str] = []
    alive = Steps(store, instance="alive", lease_ttl=TTL)
    register(alive, calls)
    report = await alive.sweeper().drain()
    assert sorted(calls) == ["a", "c"]
    assert {r.run_id for r in report.resumed} == {runs[0], runs[2]}
    assert all(r.error is None for r in report.resumed)
    ((damaged, error),) = report.damaged
    assert damaged == runs[1] and isinstance(error, CorruptRecordError)
    # Left as it was found: still in the queue, reported again by the next sweep.
    assert await store.abandoned_runs(10) == [runs[1]]
    again = await alive.sweeper().drain()
    assert [run for run, _ in again.damaged] == [runs[1]] and again.resumed == []


async def test_the_operator_listing_names_a_damaged_run_and_lists_the_rest(
    make_store: Any, clock: FakeClock, database_url: str, capsys: Any
) -> None:
    from agentplane_journal.cli.main import main

    runs = await abandon(make_store, ["a", "b"])
    store: SqlJournalStore = await make_store()
    await edit(store, runs[0], 1, b'"checkout"', b'"checkouT"')
    states = {r.run_id: r for r in await open_runs(store)}
    assert states[runs[0]].state == "damaged" and "corrupt record" in states[runs[0]].error
    assert states[runs[1]].state in {"abandoned", "in_flight"}
    capsys.readouterr()
    args = ["steps", "--url", database_url, "--tenant", store.tenant]
    code = await asyncio.to_thread(main, args)
    out = capsys.readouterr().out
    assert code == 0
    assert f"{runs[0]}  damaged" in out and "does not verify: corrupt record" in out
    assert f"{runs[1]}  in_flight  checkout" in out


async def test_a_run_admitted_with_another_shape_is_damage_not_a_crash(
    make_store: Any, clock: FakeClock
) -> None:
    """A run admitted by another writer under the same capability, whose ``input`` is not a
    call (its chain intact): reported as damaged, never an ``AttributeError``."""
    from agentplane_journal import Append, RunId

    store: SqlJournalStore = await make_store()
    run = RunId.generate()
    lease = await store.acquire(run, "dead", TTL)
    await store.append(
        lease.epoch,
        [Append(run, "RunAdmitted", {"capability": "checkout", "input": [1, 2]})],
    )
    (good,) = await abandon(make_store, ["g"])
    clock.advance(TTL + 1)
    calls: list[str] = []
    alive = Steps(store, instance="alive", lease_ttl=TTL)
    register(alive, calls)
    report = await alive.sweeper().drain()
    assert calls == ["g"] and [r.run_id for r in report.resumed] == [good]
    assert [r for r, _ in report.damaged] == [run]
    states = {r.run_id: r.state for r in await open_runs(store)}
    assert states[run] == "damaged"


try:
    from langgraph.checkpoint.base import empty_checkpoint

    from agentplane_journal.langgraph import JournalSaver, thread_run
except ImportError:  # pragma: no cover - the extra is absent
    if os.environ.get("CI"):
        raise
    JournalSaver = None


@pytest.mark.skipif(JournalSaver is None, reason="langgraph is not installed")
async def test_the_saver_lists_and_deletes_around_a_damaged_thread(make_store: Any) -> None:
    store: SqlJournalStore = await make_store()
    saver = JournalSaver(store)
    for thread in ("t-good", "t-bad"):
        checkpoint = empty_checkpoint()
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        await saver.aput(config, checkpoint, {"source": "input", "run_id": "r1"}, {})
        await saver.arelease(thread)
    await edit(store, thread_run("t-bad"), 1, b'"t-bad"', b'"t-baD"')
    fresh = JournalSaver(await make_store())
    listed = [t async for t in fresh.alist(None)]
    assert {t.config["configurable"]["thread_id"] for t in listed} == {"t-good"}
    ((run, error),) = fresh.damaged
    assert run == thread_run("t-bad") and isinstance(error, CorruptRecordError)
    with pytest.raises(DamagedRunsError) as caught:
        await fresh.adelete_for_runs(["r1"])
    assert [r for r, _ in caught.value.damaged] == [thread_run("t-bad")]
    assert str(thread_run("t-bad")) in str(caught.value)
    # The healthy thread's checkpoint was deleted all the same.
    assert await fresh.aget_tuple({"configurable": {"thread_id": "t-good"}}) is None
    await fresh.aclose()
    await saver.aclose()
