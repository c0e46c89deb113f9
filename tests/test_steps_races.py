"""Durable steps under races on PostgreSQL: 16 workers and 2 sweepers, leases forced to lapse.

Every store is its own engine (``instances``, separate connections). The store clock and the
workers' local lease clock are one fake clock, and a chaos task keeps moving it past the
lease TTL while the runs are in flight, so leases lapse under running workers and the two
sweepers take runs over from them (and from each other) all the time. Judged after the race:

* **no effect started twice**: each effect of each run reached the outside world exactly
  once (a ledger outside the journal; ``reconcile`` reads it, as a provider's status API
  would), and no run holds two ``EffectStarted`` of one key;
* **no step after fencing**: every external call was made under an epoch whose
  ``EffectStarted`` (or ``did_not_happen`` reconciliation) committed under that same epoch,
  and never by a worker whose run had already been taken over (checked at the call, against
  the epochs the takeovers returned);
* **each abandoned run resumed once per takeover**: no two resumptions share a run and an
  epoch; every run concludes ``succeeded`` with the crash-free answer and verifies.

Seen red: with ``RunContext.check_deadline`` made a no-op, workers call effects after a
takeover (the at-the-call check fails); with the sweeper resuming without ``acquire``
(reusing the expired epoch), effects are performed twice.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from typing import Any

import pytest

from agentplane_journal import (
    DidNotHappen,
    EffectInDoubtError,
    Landed,
    RunId,
    RunLostError,
    SqlJournalStore,
    Steps,
)
from agentplane_journal.steps.effect import current_run
from agentplane_journal.steps.history import RunHistory

from support.clock import FakeClock

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TTL = 30
WORKERS = 16
SWEEPERS = 2


class World:
    """The outside world and what the test knows about leases, shared by every instance."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, RunId, int]] = []  # (order, effect, run, epoch)
        self.epochs: dict[RunId, int] = {}  # the newest epoch an acquire returned, per run
        self.late: list[tuple[str, str, RunId, int, int]] = []  # calls after a takeover

    def watch(self, store: SqlJournalStore) -> None:
        """Note every epoch an acquire on ``store`` returns (no database is faked)."""
        acquire = store.acquire

        async def noted(run: RunId, owner: str, ttl: Any, **kw: Any) -> Any:
            lease = await acquire(run, owner, ttl, **kw)
            self.epochs[run] = max(self.epochs.get(run, 0), lease.epoch)
            return lease

        store.acquire = noted  # type: ignore[method-assign]

    def build(self, steps: Steps) -> Any:
        world = self

        def call(order: str, effect: str) -> None:
            ctx = current_run.get()
            assert ctx is not None
            if world.epochs.get(ctx.run, 0) > ctx.epoch:
                world.late.append((order, effect, ctx.run, ctx.epoch, world.epochs[ctx.run]))
            world.calls.append((order, effect, ctx.run, ctx.epoch))

        def landed(order: str, effect: str) -> bool:
            return any(o == order and e == effect for o, e, _, _ in world.calls)

        async def check_charge(order: str) -> Any:
            return Landed(f"ch_{order}") if landed(order, "charge") else DidNotHappen()

        async def check_mail(order: str) -> Any:
            return Landed("sent") if landed(order, "mail") else DidNotHappen()

        @steps.effect("charge", reconcile=check_charge)
        async def charge(order: str) -> str:
            call(order, "charge")
            await asyncio.sleep(0)  # the answer comes back later: a window to crash in
            return f"ch_{order}"

        @steps.effect("mail", reconcile=check_mail)
        async def mail(order: str) -> str:
            call(order, "mail")
            await asyncio.sleep(0)
            return "sent"

        @steps.workflow("checkout")
        async def checkout(order: str) -> dict[str, str]:
            return {"charge": await charge(order), "mail": await mail(order)}

        return checkout


#: Runs in the race; the issue's 200 with STEPS_RACE_RUNS=200 (the figures in the report).
RUNS = int(os.environ.get("STEPS_RACE_RUNS", "48"))


@pytest.mark.parametrize("runs", [RUNS])
async def test_workers_and_sweepers_with_lapsing_leases(
    instances: Any, clock: FakeClock, runs: int
) -> None:
    world = World()
    stores: list[SqlJournalStore] = await instances(WORKERS + SWEEPERS)
    steps = []
    for i, store in enumerate(stores):
        world.watch(store)
        s = Steps(store, instance=f"i{i}", lease_ttl=TTL, margin=0, clock=clock)
        world.build(s)
        steps.append(s)
    workers, sweepers = steps[:WORKERS], steps[WORKERS:]
    lost: Counter[str] = Counter()
    done = asyncio.Event()

    async def work(i: int) -> None:
        checkout = workers[i].workflows["checkout"]
        for n in range(i, runs, WORKERS):
            try:
                await checkout.start(f"order-{n}", f"order-{n}")
            except (RunLostError, EffectInDoubtError) as error:
                lost[type(error).__name__] += 1

    async def chaos() -> None:
        while not done.is_set():
            await asyncio.sleep(0.2)  # a few runs' time: some finish, many are taken over
            clock.advance(TTL + 1)

    resumed: list[tuple[RunId, int]] = []

    async def sweep(s: Steps) -> None:
        while not done.is_set():
            report = await s.sweeper().drain()
            resumed.extend((r.run_id, r.epoch) for r in report.resumed)
            await asyncio.sleep(0.005)

    background = [asyncio.create_task(chaos())] + [asyncio.create_task(sweep(s)) for s in sweepers]
    await asyncio.gather(*(work(i) for i in range(WORKERS)))
    done.set()
    await asyncio.gather(*background)
    # What is still abandoned is finished by one last sweep, with the clock past every lease.
    clock.advance(TTL + 1)
    for _ in range(5):
        report = await sweepers[0].sweeper().drain()
        resumed.extend((r.run_id, r.epoch) for r in report.resumed)
        if not report.resumed and not report.concluded:
            break

    assert world.late == [], f"calls after a takeover: {world.late[:5]}"
    per_effect = Counter((order, effect) for order, effect, _, _ in world.calls)
    twice = [k for k, n in per_effect.items() if n > 1]
    assert not twice, f"effects performed twice: {twice[:5]}"
    assert len(resumed) == len(set(resumed)), "a run resumed twice at one epoch"
    store = stores[0]
    expected = {"charge": "ch_{}", "mail": "sent"}
    for n in range(runs):
        order = f"order-{n}"
        run = await store.admitted_as(order)
        assert run is not None, order
        records = await store.read(run)
        await store.verify(run)
        assert records[-1].kind == "RunSealed", (order, [r.kind for r in records])
        assert records[-1].body["outcome"] == "succeeded"
        assert RunHistory.of(records).result() == {
            "charge": expected["charge"].format(order),
            "mail": "sent",
        }
        assert per_effect[(order, "charge")] == 1 and per_effect[(order, "mail")] == 1
        started = Counter(r.effect_key for r in records if r.kind == "EffectStarted")
        assert max(started.values()) == 1
        # Every call was made under an epoch that had journaled the right to make it.
        for o, effect, r, epoch in world.calls:
            if r != run:
                continue
            licensed = [
                rec
                for rec in records
                if rec.epoch == epoch
                and (
                    (rec.kind == "EffectStarted" and rec.body["descriptor"]["kind"] == effect)
                    or (
                        rec.kind == "EffectReconciled"
                        and rec.body["disposition"] == "did_not_happen"
                    )
                )
            ]
            assert licensed, (o, effect, epoch)
    assert await store.abandoned_runs(10) == []
    print(
        f"{runs} runs: {len(world.calls)} effect calls, {len(resumed)} takeovers resumed, "
        f"workers stopped: {dict(lost)}"
    )
