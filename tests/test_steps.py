"""The durable-steps layer on both dialects: admission, exactly-once effects, honest doubt,
leases as a runtime uses them, recovery by a sweeper.

A crash is simulated in-process by a boundary hook raising :class:`Crash` (a
``BaseException``, so no handler of the layer sees it, as none would see SIGKILL); the
subprocess crash test with SIGKILL is ``tests/test_steps_crash.py``. External side effects
are counted in plain dicts outside the journal.

Every case runs on a tenant in each wire profile (``agentplane-0.4``, ``agentplane-0.22``):
the layer writes the tenant's records, so the protocol must hold in both byte formats.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from sqlalchemy import text

from agentplane_journal import (
    CorruptRecordError,
    DidNotHappen,
    EffectFailedError,
    EffectInDoubtError,
    Finished,
    Fresh,
    InFlight,
    Landed,
    NotInDoubtError,
    RunCancelledError,
    RunId,
    RunLostError,
    SafeToRetry,
    SqlJournalStore,
    Steps,
    StepUsageError,
    Unknown,
)

from support.clock import FakeClock

pytestmark = pytest.mark.slow

TTL = 30
PROFILES = ["agentplane-0.4", "agentplane-0.22"]


@pytest.fixture(params=PROFILES)
async def make_store(make_store: Any, request: pytest.FixtureRequest) -> Any:
    """conftest's ``make_store``, every handle opened in this case's wire profile (the first
    claims the empty tenant for it)."""

    async def make(**kw: Any) -> Any:
        kw.setdefault("profile", request.param)
        return await make_store(**kw)

    return make


class Crash(BaseException):
    """The process died here."""


def dying(store: SqlJournalStore, at: str, times: int = 1) -> Steps:
    """A worker that dies the first ``times`` times it reaches boundary ``at``."""
    return Steps(store, instance="dead", lease_ttl=TTL, _boundary=crash_at(at, times))


def crash_at(name: str, times: int = 1) -> Any:
    left = [times]

    def hook(at: str) -> None:
        if at == name and left[0] > 0:
            left[0] -= 1
            raise Crash(at)

    return hook


class Shop:
    """A payment provider and a mailer, counted outside the journal."""

    def __init__(self) -> None:
        self.charges: Counter[str] = Counter()
        self.mails: Counter[str] = Counter()
        self.reconciled: list[str] = []

    def build(self, steps: Steps, *, reconcile: bool = True) -> Any:
        shop = self

        async def check_charge(order: str, amount: int) -> Any:
            shop.reconciled.append(order)
            if shop.charges[order]:
                return Landed({"charge": f"ch_{order}", "amount": amount})
            return DidNotHappen()

        @steps.effect("charge", reconcile=check_charge if reconcile else None)
        async def charge(order: str, amount: int) -> dict[str, Any]:
            shop.charges[order] += 1
            return {"charge": f"ch_{order}", "amount": amount}

        @steps.effect("mail")
        async def mail(order: str, to: str) -> str:
            shop.mails[order] += 1
            return f"sent to {to}"

        @steps.workflow("checkout")
        async def checkout(order: str, amount: int) -> dict[str, Any]:
            receipt = await charge(order, amount)
            note = await mail(order, "a@example.com")
            return {"receipt": receipt, "note": note}

        return checkout


async def test_a_fresh_run_calls_each_effect_once_and_seals(store: SqlJournalStore) -> None:
    steps = Steps(store, instance="w1", lease_ttl=TTL)
    shop = Shop()
    checkout = shop.build(steps)
    admission = await checkout.start("order-1", "o1", 100)
    assert isinstance(admission, Fresh)
    assert admission.result == {
        "receipt": {"charge": "ch_o1", "amount": 100},
        "note": "sent to a@example.com",
    }
    assert shop.charges["o1"] == 1 and shop.mails["o1"] == 1
    run = admission.run_id
    kinds = [r.kind for r in await store.read(run)]
    # in 0.22 the result is a Note before RunSealed, which has no member for it (issue 36)
    result = ["Note"] if store.profile.canon_version is not None else []
    assert kinds == [
        "RunAdmitted",
        "EffectStarted",
        "EffectDone",
        "EffectStarted",
        "EffectDone",
        *result,
        "RunSealed",
    ]
    head = await store.verify(run)
    records = await store.read(run)
    assert records[-1].body["chain_head"] == records[-2].hash.hex()
    assert head == records[-1].hash
    assert await store.inclusion_proof(run) is not None
    assert await store.abandoned_runs(10) == []


async def test_one_run_per_admission_key(store: SqlJournalStore) -> None:
    steps = Steps(store, instance="w1", lease_ttl=TTL)
    shop = Shop()
    checkout = shop.build(steps)
    first = await checkout.start("order-2", "o2", 5)
    again = await checkout.start("order-2", "o2", 5)
    assert isinstance(first, Fresh) and isinstance(again, Finished)
    assert again.run_id == first.run_id
    assert again.outcome.status == "succeeded" and again.outcome.result == first.result
    assert shop.charges["o2"] == 1


async def test_a_running_key_is_in_flight(store: SqlJournalStore) -> None:
    steps = Steps(store, instance="w1", lease_ttl=TTL)
    gate = asyncio.Event()

    @steps.effect("wait")
    async def wait() -> int:
        await gate.wait()
        return 1

    @steps.workflow("slow")
    async def slow() -> int:
        return await wait()

    task = asyncio.create_task(slow.start("k"))
    for _ in range(200):
        if await store.admitted_as("k") is not None:
            break
        await asyncio.sleep(0.01)
    answer = await slow.start("k")
    assert isinstance(answer, InFlight)
    gate.set()
    done = await task
    assert isinstance(done, Fresh) and done.run_id == answer.run_id and done.result == 1


@pytest.mark.parametrize(
    "boundary", ["before_start", "after_start", "after_call", "after_result", "concluding"]
)
async def test_a_crash_at_each_boundary_is_resumed_to_the_same_outcome(
    make_store: Any, clock: FakeClock, boundary: str
) -> None:
    dead = dying(await make_store(), boundary)
    shop = Shop()
    checkout = shop.build(dead)
    with pytest.raises(Crash):
        await checkout.start("order-3", "o3", 7)
    clock.advance(TTL + 1)
    alive = Steps(await make_store(), instance="alive", lease_ttl=TTL)
    shop.build(alive)
    report = await alive.sweeper().drain()
    (run,) = await alive.store.runs_by_outcome("succeeded", 10)
    # Concluding is one transaction (RunSealed, seal, release): a crash before it leaves the
    # effects done and nothing concluded, so the run is resumed and only replays them.
    assert [r.run_id for r in report.resumed] == [run] and report.resumed[0].error is None
    assert shop.charges["o3"] == 1 and shop.mails["o3"] == 1
    assert shop.reconciled == (["o3"] if boundary in ("after_start", "after_call") else [])
    await alive.store.verify(run)
    again = await checkout.start("order-3", "o3", 7)
    assert isinstance(again, Finished)
    assert again.outcome.result == {
        "receipt": {"charge": "ch_o3", "amount": 7},
        "note": "sent to a@example.com",
    }
    assert await alive.store.abandoned_runs(10) == []


async def test_in_doubt_without_reconcile_stops_naming_the_effect(
    make_store: Any, clock: FakeClock
) -> None:
    dead = Steps(
        await make_store(), instance="dead", lease_ttl=TTL, _boundary=crash_at("after_call")
    )
    shop = Shop()
    checkout = shop.build(dead, reconcile=False)
    with pytest.raises(Crash):
        await checkout.start(None, "o4", 1)
    clock.advance(TTL + 1)
    alive = Steps(await make_store(), instance="alive", lease_ttl=TTL)
    shop.build(alive, reconcile=False)
    report = await alive.sweeper().drain()
    (resumed,) = report.resumed
    assert isinstance(resumed.error, EffectInDoubtError)
    assert resumed.error.effect == "charge" and "'charge'" in str(resumed.error)
    assert shop.charges["o4"] == 1  # never called a second time
    # Left open, unleased, waiting for a decision: not in the recovery queue.
    assert await alive.store.abandoned_runs(10) == []
    records = await alive.store.read(resumed.run_id)
    assert records[-1].kind == "EffectStarted"


async def test_an_unknown_reconciliation_is_journaled_and_stops(
    make_store: Any, clock: FakeClock
) -> None:
    dead = Steps(
        await make_store(), instance="dead", lease_ttl=TTL, _boundary=crash_at("after_start")
    )
    calls = Counter[str]()

    async def ask(x: int) -> Unknown:
        return Unknown("the provider's status API is down")

    @dead.effect("pay", reconcile=ask)
    async def pay(x: int) -> int:
        calls["pay"] += 1
        return x

    @dead.workflow("w")
    async def w(x: int) -> int:
        return await pay(x)

    with pytest.raises(Crash):
        await w.start(None, 3)
    clock.advance(TTL + 1)
    (run,) = await dead.store.abandoned_runs(10)
    with pytest.raises(EffectInDoubtError, match="status API is down"):
        await dead.resume(run)
    records = await dead.store.read(run)
    assert records[-1].kind == "EffectReconciled"
    assert records[-1].body["disposition"] == "in_doubt"
    assert calls["pay"] == 0


async def test_a_stop_request_met_by_did_not_happen_is_journaled_and_not_called(
    make_store: Any, clock: FakeClock
) -> None:
    """The reconciliation's "did not happen" is journaled in one transaction with the step
    boundary's stop check (the call would come next): a stop request recorded meanwhile
    still gets the answer journaled, then cancels the run, and the effect is not called.
    Without one, the effect is called once under the same start."""
    for stop in (True, False):
        await _did_not_happen(make_store, clock, stop)


async def _did_not_happen(make_store: Any, clock: FakeClock, stop: bool) -> None:
    """One round of the test above: with a stop request (``stop``) or without."""
    dead = Steps(
        await make_store(), instance="dead", lease_ttl=TTL, _boundary=crash_at("after_start")
    )
    calls = Counter[str]()

    async def ask(x: int) -> DidNotHappen:
        return DidNotHappen()

    @dead.effect("pay", reconcile=ask)
    async def pay(x: int) -> int:
        calls["pay"] += 1
        return x

    @dead.workflow("w")
    async def w(x: int) -> int:
        return await pay(x)

    with pytest.raises(Crash):
        await w.start(None, 3)
    clock.advance(TTL + 1)
    (run,) = await dead.store.abandoned_runs(10)
    if stop:
        await dead.cancel(run, "ops", "not any more")
        with pytest.raises(RunCancelledError, match="not any more"):
            await dead.resume(run)
    else:
        assert await dead.resume(run) == 3
    kinds = [r.kind for r in await dead.store.read(run) if r.kind != "Note"]
    tail = ["RunCancelled", "RunSealed"] if stop else ["EffectDone", "RunSealed"]
    assert kinds[-4:] == ["EffectStarted", "EffectReconciled", *tail], kinds
    assert kinds.count("EffectStarted") == 1
    assert calls["pay"] == (0 if stop else 1)
    await dead.store.verify(run)


async def test_safe_to_retry_is_retried_and_other_failures_are_not(store: SqlJournalStore) -> None:
    steps = Steps(store, instance="w1", lease_ttl=TTL)
    calls = Counter[str]()

    @steps.effect("flaky", attempts=3)
    async def flaky() -> str:
        calls["flaky"] += 1
        if calls["flaky"] < 3:
            raise SafeToRetry("503 before the request was accepted")
        return "ok"

    @steps.effect("broken")
    async def broken() -> str:
        calls["broken"] += 1
        raise TimeoutError("no answer")

    @steps.workflow("w")
    async def w() -> list[str]:
        out = [await flaky()]
        try:
            await broken()
        except EffectFailedError as error:
            out.append(error.disposition)
        return out

    admission = await w.start(None)
    assert isinstance(admission, Fresh) and admission.result == ["ok", "in_doubt"]
    assert calls == {"flaky": 3, "broken": 1}
    kinds = Counter(r.kind for r in await store.read(admission.run_id))
    assert kinds["EffectStarted"] == 4 and kinds["EffectFailed"] == 3


async def test_a_fenced_worker_does_nothing_after_it_lost_the_run(
    make_store: Any, clock: FakeClock
) -> None:
    old_store = await make_store()
    old = Steps(old_store, instance="old", lease_ttl=TTL)
    calls: list[str] = []
    gate = asyncio.Event()
    reached = asyncio.Event()

    @old.effect("first")
    async def first() -> int:
        calls.append("first")
        reached.set()
        await gate.wait()
        return 1

    @old.effect("second")
    async def second() -> int:
        calls.append("second")
        return 2

    @old.workflow("w")
    async def w() -> int:
        return await first() + await second()

    task = asyncio.create_task(w.start(None))
    await reached.wait()
    (run,) = await old_store.runs_by_outcome("x", 1) or [None]  # nothing concluded yet
    assert run is None
    clock.advance(TTL + 1)
    new_store = await make_store()
    (run,) = await new_store.abandoned_runs(10)
    await new_store.acquire(run, "thief", TTL)
    gate.set()
    with pytest.raises(RunLostError):
        await task
    assert calls == ["first"]  # the recorded result was refused, and nothing ran after it
    assert [r.kind for r in await new_store.read(run)] == ["RunAdmitted", "EffectStarted"]


async def test_cancellation_stops_between_steps(store: SqlJournalStore) -> None:
    steps = Steps(store, instance="w1", lease_ttl=TTL)
    calls: list[str] = []

    @steps.effect("one")
    async def one() -> int:
        calls.append("one")
        ctx_run = steps.store
        (run,) = [r for r, _ in await ctx_run.recent_runs(limit=1)]
        await steps.cancel(run, "ops", "wrong customer")
        return 1

    @steps.effect("two")
    async def two() -> int:
        calls.append("two")
        return 2

    @steps.workflow("w")
    async def w() -> int:
        return await one() + await two()

    with pytest.raises(RunCancelledError, match="wrong customer"):
        await w.start("c")
    assert calls == ["one"]
    (run,) = await store.runs_by_outcome("cancelled", 10)
    kinds = [r.kind for r in await store.read(run)]
    assert kinds[-2:] == ["RunCancelled", "RunSealed"]
    await store.verify(run)
    answer = await w.start("c")
    assert isinstance(answer, Finished) and answer.outcome.status == "cancelled"


async def test_two_sweepers_resume_each_run_once(make_store: Any, clock: FakeClock) -> None:
    dead = Steps(
        await make_store(), instance="dead", lease_ttl=TTL, _boundary=crash_at("after_result", 99)
    )
    shop = Shop()
    checkout = shop.build(dead)
    for i in range(4):
        with pytest.raises(Crash):
            await checkout.start(f"k{i}", f"o{i}", i)
    clock.advance(TTL + 1)
    sweepers = []
    for name in ("s1", "s2"):
        steps = Steps(await make_store(), instance=name, lease_ttl=TTL)
        shop.build(steps)
        sweepers.append(steps.sweeper())
    reports = await asyncio.gather(*(s.drain() for s in sweepers))
    resumed = [r.run_id for report in reports for r in report.resumed]
    assert len(resumed) == len(set(resumed)) == 4
    assert all(r.error is None for report in reports for r in report.resumed)
    assert all(shop.charges[f"o{i}"] == 1 and shop.mails[f"o{i}"] == 1 for i in range(4))


async def test_effects_outside_a_workflow_are_refused(store: SqlJournalStore) -> None:
    steps = Steps(store, instance="w1")

    @steps.effect("e")
    async def e() -> int:
        return 1

    with pytest.raises(StepUsageError, match="outside a workflow"):
        await e()
    assert isinstance(RunId.generate(), RunId)


async def test_an_operator_sees_open_runs_by_state(
    make_store: Any, clock: FakeClock, database_url: str, capsys: Any
) -> None:
    from agentplane_journal.cli.main import main
    from agentplane_journal.steps.status import open_runs

    for at, key in (("after_call", "doubt"), ("after_result", "gone")):
        dead = dying(await make_store(), at)
        Shop().build(dead, reconcile=False)
        with pytest.raises(Crash):
            await dead.workflows["checkout"].start(key, key, 1)
        clock.advance(TTL + 1)
        if key == "doubt":  # resumed, stopped in doubt, released
            alive = Steps(await make_store(), instance="alive", lease_ttl=TTL)
            Shop().build(alive, reconcile=False)
            (resumed,) = (await alive.sweeper().drain()).resumed
            assert isinstance(resumed.error, EffectInDoubtError)
    store: SqlJournalStore = await make_store()
    states = {r.run_id: r for r in await open_runs(store)}
    doubt, gone = await store.admitted_as("doubt"), await store.admitted_as("gone")
    assert doubt is not None and gone is not None
    assert states[doubt].state == "in_doubt" and states[doubt].in_doubt[0][0] == "charge"
    assert states[gone].state == "abandoned" and states[gone].owner == "dead"
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["steps", "--url", database_url, "--tenant", store.tenant])
    out = capsys.readouterr().out
    assert code == 0
    assert f"{doubt}  in_doubt" in out and "in doubt: charge ek:" in out
    # The command line reads the real clock, by which the dead worker's lease is still live.
    assert f"{gone}  in_flight  checkout  3 records owner=dead epoch=1" in out


async def test_the_heartbeat_notices_a_lost_lease_and_the_next_step_stops(
    make_store: Any, clock: FakeClock
) -> None:
    store: SqlJournalStore = await make_store()
    steps = Steps(store, instance="w1", lease_ttl=1, margin=0)  # a beat every 1/3 s
    gate, seen = asyncio.Event(), asyncio.Event()
    contexts: list[Any] = []

    @steps.effect("slow")
    async def slow() -> int:
        from agentplane_journal.steps.effect import current_run

        contexts.append(current_run.get())
        seen.set()
        await gate.wait()
        return 1

    @steps.workflow("w")
    async def w() -> int:
        return await slow()

    task = asyncio.create_task(w.start(None))
    await seen.wait()
    (ctx,) = contexts
    await asyncio.sleep(0.5)  # beats while the lease is ours: renewed, nothing lost
    assert ctx.lost is None
    clock.advance(2)
    await (await make_store()).acquire(ctx.run, "thief", 30)
    for _ in range(100):
        if ctx.lost is not None:
            break
        await asyncio.sleep(0.05)
    assert ctx.lost is not None and "renewal was refused" in ctx.lost
    gate.set()
    with pytest.raises(RunLostError):
        await task
    assert [r.kind for r in await store.read(ctx.run)] == ["RunAdmitted", "EffectStarted"]


async def test_a_workflow_that_swallows_a_stop_is_stopped_all_the_same(
    make_store: Any, clock: FakeClock
) -> None:
    dead = dying(await make_store(), "after_call")
    Shop().build(dead, reconcile=False)
    with pytest.raises(Crash):
        await dead.workflows["checkout"].start("k", "o5", 1)
    clock.advance(TTL + 1)
    alive = Steps(await make_store(), instance="alive", lease_ttl=TTL)
    shop = Shop()

    @alive.effect("charge")
    async def charge(order: str, amount: int) -> dict[str, Any]:
        shop.charges[order] += 1
        return {}

    @alive.workflow("checkout")
    async def checkout(order: str, amount: int) -> str:
        try:
            await charge(order, amount)
        except Exception:
            return "carried on"
        return "charged"

    (resumed,) = (await alive.sweeper().drain()).resumed
    assert isinstance(resumed.error, EffectInDoubtError)
    assert shop.charges["o5"] == 0
    assert (await alive.store.read(resumed.run_id))[-1].kind == "EffectStarted"


async def test_a_person_settles_an_effect_in_doubt_and_the_run_resumes(
    make_store: Any, clock: FakeClock
) -> None:
    dead = dying(await make_store(), "after_call")
    shop = Shop()
    shop.build(dead, reconcile=False)
    with pytest.raises(Crash):
        await dead.workflows["checkout"].start("k", "o6", 9)
    clock.advance(TTL + 1)
    alive = Steps(await make_store(), instance="alive", lease_ttl=TTL)
    shop.build(alive, reconcile=False)
    (resumed,) = (await alive.sweeper().drain()).resumed
    assert isinstance(resumed.error, EffectInDoubtError)
    key = resumed.error.effect_key
    await alive.settle(resumed.run_id, key, Landed({"charge": "ch_o6", "amount": 9}), "ops")
    result = await alive.resume(resumed.run_id)
    assert result["receipt"] == {"charge": "ch_o6", "amount": 9}
    assert shop.charges["o6"] == 1 and shop.mails["o6"] == 1
    settled = [r for r in await alive.store.read(resumed.run_id) if r.kind == "EffectReconciled"]
    assert [r.body["detail"] for r in settled] == ["settled by ops"]
    with pytest.raises(NotInDoubtError, match="not in doubt"):
        await alive.settle(resumed.run_id, key, DidNotHappen(), "ops")


async def test_a_workflow_whose_code_changed_is_stopped_before_calling(
    make_store: Any, clock: FakeClock
) -> None:
    from agentplane_journal import WorkflowDivergedError

    dead = dying(await make_store(), "after_result")
    Shop().build(dead)
    with pytest.raises(Crash):
        await dead.workflows["checkout"].start("k", "o7", 3)
    clock.advance(TTL + 1)
    alive = Steps(await make_store(), instance="alive", lease_ttl=TTL)
    calls: list[str] = []

    @alive.effect("refund")  # the new code calls something else first
    async def refund(order: str, amount: int) -> int:
        calls.append(order)
        return amount

    @alive.workflow("checkout")
    async def checkout(order: str, amount: int) -> int:
        return await refund(order, amount)

    (resumed,) = (await alive.sweeper().drain()).resumed
    assert isinstance(resumed.error, WorkflowDivergedError)
    assert "'charge'" in str(resumed.error) and calls == []


@pytest.mark.parametrize("path", ["index", "duplicate"])
async def test_an_admission_row_pointed_at_another_run_is_refused_not_answered(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """run_admission is a side table: pointing one key at another key's run (write access,
    no key) must not answer that run's outcome as this key's, whether the holder is found by
    the index read before admitting or named by the refused admission
    (``DuplicateAdmissionError``, the race in which the key was claimed in between)."""
    steps = Steps(store, instance="w1", lease_ttl=TTL)
    shop = Shop()
    checkout = shop.build(steps)
    alice = await checkout.start("order-alice", "alice", 100)
    await checkout.start("order-bob", "bob", 1)
    async with store.engine.begin() as conn:
        await conn.execute(
            text("UPDATE run_admission SET run_id = :r WHERE tenant = :t AND key = :k"),
            {"r": str(alice.run_id), "t": store.tenant, "k": "order-bob"},
        )
    if path == "duplicate":  # the index read answered before the claim committed

        async def not_yet(key: str) -> None:
            return None

        monkeypatch.setattr(store, "admitted_as", not_yet)
    with pytest.raises(CorruptRecordError, match="does not begin with the admission"):
        await checkout.start("order-bob", "bob", 1)
    assert shop.charges == Counter({"alice": 1, "bob": 1})  # nothing ran again
    # the key's own run is still answered as its own
    again = await checkout.start("order-alice", "alice", 100)
    assert isinstance(again, Finished) and again.run_id == alice.run_id
