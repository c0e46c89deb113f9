"""A durable-steps run's transactions, counted (both dialects): at most two per effect and
two per workflow (issue 33). Before, a 3-step workflow was 15 transactions: the admission
lookup, the lease and ``RunAdmitted`` apart, a cancellation read before each effect, and
``RunSealed``, the seal and the release apart. Now it is the admission (lease, key,
``RunAdmitted``), each effect's start with its cancellation check, each result, and the
conclusion (``RunSealed``, seal, release): 8. Counted at the client
(:mod:`counting`: SQLAlchemy's events, the driver's own calls, SQLite's trace).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentplane_journal import (
    Finished,
    Fresh,
    InFlight,
    JournalUnavailableError,
    RunCancelledError,
    SqlJournalStore,
    Steps,
)
from agentplane_journal.core.batch import RELEASED_OWNER
from agentplane_journal.tlog.merkle import leaf_hash, root, verify_inclusion

from support.counting import counting
from support.faults import refused

TTL = 30


@pytest.fixture(autouse=True)
def no_recording_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Count what a process without a tracing SDK asks: ``tests/test_steps_spans.py`` sets a
    recording provider for the rest of its process (an xdist worker), and a recording
    conclusion span reads the run's inclusion proof, one read transaction more (the one
    "seen under load" before it was traced to the test order)."""
    from agentplane_journal.steps import spans

    monkeypatch.setattr(spans, "_tracer", lambda: None)


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
    # The log's first seal (its counter row) and the writer's first read of the log.
    await three.start("warm2", 0)
    with counting(store.engine) as counts:
        fresh = await three.start("k1", 1)
    assert fresh.result == 1
    # Every write transaction (each a commit, a WAL flush) is one of the eight. One read
    # transaction more was seen on each dialect after tests/test_steps_spans.py in the same
    # process (see no_recording_spans); reads keep one spare, ``counts.reads`` names it.
    assert counts.commits == 8 <= 2 * 3 + 2, counts
    assert counts.transactions - counts.commits <= 1, counts.reads
    if store.engine.dialect.name == "sqlite":
        # The admission, each effect's start and result, and the conclusion (its records,
        # outcome, seal into the log and release): one hop to SQLite's thread each (was 48
        # with the conclusion a general unit of work, 146 before issue 33).
        assert counts.hops <= 12, counts
    else:
        # PostgreSQL: one statement per transaction: the admission (mutex row, key, lease,
        # RunAdmitted), each effect's start and result, the conclusion (RunSealed, outcome,
        # the run's leaf and nodes in the log, release). Was 20 with the admission and the
        # conclusion general units of work.
        assert counts.statements == 8, counts
    again = await three.start("k1", 1)
    assert isinstance(again, Finished) and again.outcome.result == 1


async def test_eight_workflows_at_once_share_their_commits(store: SqlJournalStore) -> None:
    """Eight 3-step workflows at once: their admissions, starts, results and conclusions
    share commits (SQLite: the writer's group commit; PostgreSQL: the writer's turns, one
    transaction each), far fewer than the 64 they are one at a time; every run concluded
    and sealed into the log once. Red on PostgreSQL with the turns split back into one
    statement per admission and conclusion (28 commits; 8 now, as on SQLite)."""
    three = three_steps(Steps(store, instance="w1", lease_ttl=TTL))
    await three.start("warm", 0)
    with counting(store.engine) as counts:
        done = await asyncio.gather(*(three.start(f"k{i}", i) for i in range(8)))
    assert [d.result for d in done] == [(i + 1) * 2 - 3 for i in range(8)]
    assert counts.commits <= 20, counts
    audit = await store.audit_log()
    assert audit.ok and audit.size == 9, audit


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


async def test_a_refused_admission_leaves_nothing_behind(store: SqlJournalStore) -> None:
    """The lease, the key and RunAdmitted are one transaction: refused, none of them is
    written (before, the lease was its own transaction and outlived a refused admission)."""
    three = three_steps(Steps(store, instance="w1", lease_ttl=TTL))
    async with refused(store, "RunAdmitted"):
        with pytest.raises(JournalUnavailableError) as caught:
            await three.start("k", 1)
    assert caught.value.stage == "its RunAdmitted"
    assert await store.admitted_as("k") is None
    assert await store.lease_of(caught.value.run) is None
    assert await store.read(caught.value.run) == []
    fresh = await three.start("k", 1)
    assert isinstance(fresh, Fresh) and fresh.result == 1


async def test_concurrent_admissions_of_one_key_in_one_process_run_it_once(
    store: SqlJournalStore,
) -> None:
    """Eight starts of one key at once (on SQLite they share the writer's transactions, each
    in its own savepoint): one run, its effects called once, the others told about it."""
    steps = Steps(store, instance="w1", lease_ttl=TTL)
    calls: list[int] = []

    @steps.effect("count")
    async def count(x: int) -> int:
        calls.append(x)
        return x

    @steps.workflow("once")
    async def once(x: int) -> int:
        return await count(x)

    answers = await asyncio.gather(*(once.start("same", 7) for _ in range(8)))
    fresh = [a for a in answers if isinstance(a, Fresh)]
    assert len(fresh) == 1 and calls == [7]
    assert all(a.run_id == fresh[0].run_id for a in answers)
    assert all(isinstance(a, (InFlight, Finished)) for a in answers if a is not fresh[0])


async def test_a_stop_request_in_a_group_of_starts_stops_only_its_run(
    store: SqlJournalStore,
) -> None:
    """Six runs reach their second effect together, so their starts share a group commit
    (one statement on PostgreSQL, one transaction on SQLite); the one with a stop request
    writes nothing and is cancelled, the other five start and finish."""
    steps = Steps(store, instance="w1", lease_ttl=TTL)
    arrived: list[int] = []
    together = asyncio.Event()

    @steps.effect("first")
    async def first(i: int) -> int:
        if i == 0:
            await steps.cancel(current_run_id(), "operator", "only this one")
        arrived.append(i)
        if len(arrived) == 6:
            together.set()
        await together.wait()
        return i

    @steps.effect("second")
    async def second(i: int) -> int:
        return i

    @steps.workflow("pair")
    async def pair(i: int) -> int:
        return await second(await first(i))

    answers = await asyncio.gather(
        *(pair.start(f"g{i}", i) for i in range(6)), return_exceptions=True
    )
    assert isinstance(answers[0], RunCancelledError), answers[0]
    assert [a.result for a in answers[1:] if isinstance(a, Fresh)] == [1, 2, 3, 4, 5]
    for i in range(6):
        run = await store.admitted_as(f"g{i}")
        assert run is not None
        kinds = [r.kind for r in await store.read(run)]
        assert kinds.count("EffectStarted") == (1 if i == 0 else 2), (i, kinds)


async def test_concurrent_conclusions_leave_the_log_as_one_at_a_time_would(
    store: SqlJournalStore,
) -> None:
    """Conclusions arriving together (SQLite: one group commit, each its own savepoint,
    its seal through the log's own statements on the writer's thread) and ones through the
    general unit of work, interleaved: the stored tree is what the seals re-derive (the audit
    compares every node), its root is RFC 6962's over the sealed heads in log order, every
    run's inclusion proof verifies, and each run's outcome row and released lease are there."""
    steps = Steps(store, instance="w1", lease_ttl=TTL)
    three = three_steps(steps)
    await three.start("warm", 0)
    general = store._writer.conclude  # the general unit for every other batch of runs

    async def no_hot_path(*args: Any, **kwargs: Any) -> None:
        return None

    for batch in range(4):
        if batch % 2:
            store._writer.conclude = no_hot_path  # type: ignore[method-assign]
        else:
            store._writer.conclude = general  # type: ignore[method-assign]
        done = await asyncio.gather(*(three.start(f"k{batch}-{i}", i) for i in range(8)))
        assert [d.result for d in done] == [(i + 1) * 2 - 3 for i in range(8)]
    store._writer.conclude = general  # type: ignore[method-assign]
    audit = await store.audit_log()
    assert audit.ok and audit.size == 33, audit
    sealed = await store.sealed_runs()
    checkpoint = await store.checkpoint()
    assert checkpoint.size == 33 and checkpoint.root == root([leaf_hash(h) for _, h in sealed])
    for position, (run, head) in enumerate(sealed):
        proof = await store.inclusion_proof(run)
        assert proof is not None and proof.index == position and proof.seal == head
        assert verify_inclusion(leaf_hash(head), position, 33, list(proof.proof), checkpoint.root)
        lease = await store.lease_of(run)
        assert lease is not None and lease[0] == RELEASED_OWNER and lease[2] == 0
    assert len(await store.runs_by_outcome("succeeded", 100)) == 33


async def test_two_writers_concluding_into_one_log_keep_it_whole(
    make_store: Any,
) -> None:
    """Two stores on their own engines (two processes' writers, each with its own known log on
    PostgreSQL and its own thread on SQLite) conclude 12 runs each at once into one tenant's
    log: each one-statement conclusion finds the log the other moved and leaves the run to the
    general unit, or hashes onto the current log. The log is what its seals re-derive, its
    root RFC 6962's over the sealed heads, every run in it once. Red on PostgreSQL with the
    conclusion statement's log checks removed (`ctr.fresh`, the counter's, the size's and
    the frontier's) and its counter lock waited for: a leaf hashed onto the log the other
    writer had moved collides with that writer's leaf (``log_tree_pkey``)."""
    a: SqlJournalStore = await make_store()
    b: SqlJournalStore = await make_store()
    assert a.engine is not b.engine
    flows = [three_steps(Steps(s, instance=f"w{i}", lease_ttl=TTL)) for i, s in enumerate((a, b))]
    for flow in flows:
        await flow.start(f"warm-{id(flow)}", 0)
        await flow.start(f"warm2-{id(flow)}", 0)
    for _ in range(3):
        done = await asyncio.gather(
            *(flow.start(f"r-{id(flow)}-{i}-{_}", i) for flow in flows for i in range(4))
        )
        assert all(d.result is not None for d in done)
    audit = await a.audit_log()
    assert audit.ok and audit.size == 28, audit
    sealed = await a.sealed_runs()
    assert len({run for run, _ in sealed}) == 28
    checkpoint = await b.checkpoint()
    assert checkpoint.size == 28 and checkpoint.root == root([leaf_hash(h) for _, h in sealed])
