"""A PostgreSQL writer's turn (``backends/postgresql/together.py``): the writes of several
tenants, admissions and conclusions that waited together, as their own statements inside one
transaction, one commit. What each member is told must be what landed: a member the server
refuses never takes the others down, and a turn lost before its ``COMMIT`` was sent wrote
nothing. Every turn is watched, so each test proves its members really shared one.
Seen red against broken mechanisms: see docs/performance.md.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from agentplane_journal import (
    CommitUnknownError,
    DuplicateEffectError,
    FencedError,
    RunId,
    SqlJournalStore,
)
from agentplane_journal.core.batch import chain_batch

from support.clock import FakeClock
from support.databases import dsn
from support.helpers import concluded, key, note, started
from support.races import until_waiting

pytestmark = [pytest.mark.postgres, pytest.mark.race]

BOUND = 10.0


@pytest.fixture
async def store(pg_battery_url: str, clock: FakeClock) -> AsyncIterator[SqlJournalStore]:
    opened = await SqlJournalStore.connect(
        pg_battery_url, tenant=f"turn{uuid.uuid4().hex[:10]}", clock=clock
    )
    yield opened
    await opened.close()


def watch(store: SqlJournalStore) -> list[list[tuple[RunId, str]]]:
    """Each turn from now on: (run, how it was answered)."""
    seen: list[list[tuple[RunId, str]]] = []
    writer = store._shared.writer
    answer = writer._answer

    def watching(group: list[Any], answers: list[Any]) -> None:
        seen.append([(r.run, type(a).__name__) for r, a in zip(group, answers, strict=True)])
        answer(group, answers)

    writer._answer = watching
    return seen


async def texts(store: SqlJournalStore, run: RunId) -> list[str]:
    return [r.body.get("text", r.kind) for r in await store.read(run)]


async def test_a_refused_member_of_a_turn_takes_none_of_the_others_down(
    store: SqlJournalStore,
) -> None:
    """Two tenants' appends, then a third tenant's duplicate effect start (the single-run
    statement does not check for it: the exactly-once index refuses it, which aborts the
    turn's transaction after the others' statements wrote). The others are rolled back and
    run again alone: each is written once and told so; the duplicate is told it is one and
    wrote nothing. Red with the abort not handled (the refusal swallowed, the aborted
    transaction's ``COMMIT`` taken for a commit): the others were told "written" for rows
    that were rolled back."""
    one, two, three = (store.for_tenant(f"t{i}{uuid.uuid4().hex[:8]}") for i in range(3))
    firsts = [RunId.generate() for _ in range(3)]
    seconds = [RunId.generate() for _ in range(3)]
    dup = RunId.generate()
    for tenant, runs in ((one, firsts), (two, seconds)):
        for run in runs:
            await tenant.append(0, [note(run, "warm")])
    await three.append(0, [note(dup, "warm"), started(dup, key(7))])
    for attempt in range(20):
        turns = watch(store)
        results = await asyncio.gather(
            *(one.append(0, [note(r, f"one {attempt}")]) for r in firsts),
            *(two.append(0, [note(r, f"two {attempt}")]) for r in seconds),
            three.append(0, [note(dup, f"dup {attempt}"), started(dup, key(7))]),
            return_exceptions=True,
        )
        *written, duplicate = results
        assert all(isinstance(w, list) and len(w) == 1 for w in written), written
        assert isinstance(duplicate, DuplicateEffectError), duplicate
        for tenant, runs, name in ((one, firsts, "one"), (two, seconds, "two")):
            for run in runs:
                assert (await texts(tenant, run)).count(f"{name} {attempt}") == 1
                await tenant.verify(run)
        assert f"dup {attempt}" not in await texts(three, dup)
        if any(len(t) == 7 for t in turns):
            return  # all seven shared one turn
    raise AssertionError("the seven writes never shared a turn")


@pytest.mark.parametrize("fault", ["drop the connection", "time out", "cancel the leader"])
async def test_a_turn_struck_mid_transaction_tells_each_member_what_landed(
    pg_battery_url: str, clock: FakeClock, fault: str
) -> None:
    """Tenant A's appends are written by the turn's first statement; tenant B's, its second,
    waits on a row another transaction inserted at B's next position (uncommitted); then
    the fault strikes. Whatever each member is told is what the journal holds: "written" is
    there once, a refusal wrote nothing, an unknown commit is one or the other. Red with a
    connection lost mid-turn answered as if autocommitted (A's appends told "written", the
    transaction that held them rolled back with the connection)."""
    options: dict[str, Any] = {}
    if fault == "time out":
        options["connect_args"] = {"server_settings": {"statement_timeout": "300"}}
    base = await SqlJournalStore.connect(
        pg_battery_url, tenant=f"turnf{uuid.uuid4().hex[:8]}", clock=clock, engine_options=options
    )
    a, b = base, base.for_tenant(f"turng{uuid.uuid4().hex[:8]}")
    intruder = await asyncpg.connect(dsn(pg_battery_url))
    try:
        runs_a = [RunId.generate() for _ in range(3)]
        run_b = RunId.generate()
        for run in runs_a:
            await a.append(0, [note(run, "warm")])
        head = (await b.append(0, [note(run_b, "warm")]))[-1]
        _, rows, _ = chain_batch(b.tenant, str(run_b), 0, 1, head.hash, [note(run_b, "x")], None)
        tx = intruder.transaction()
        await tx.start()
        await intruder.execute(
            "INSERT INTO journal (tenant, run_id, seq, epoch, kind, effect_key, prev_hash, hash,"
            " raw, key_id, signature, case_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,"
            " $11, $12)",
            *rows[0],
        )
        turns = watch(base)
        tasks = [
            *(asyncio.ensure_future(a.append(0, [note(r, "turn")])) for r in runs_a),
            asyncio.ensure_future(b.append(0, [note(run_b, "turn")])),
        ]
        await until_waiting(intruder, 1, tries=1000)  # B's statement, on the intruder's row
        if fault == "cancel the leader":
            for leader in list(base._shared.writer._leaders):
                leader.cancel()
        elif fault == "drop the connection":
            await intruder.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        else:
            await asyncio.sleep(0.5)
        await tx.rollback()
        _, pending = await asyncio.wait(tasks, timeout=BOUND)
        assert not pending, f"{len(pending)} appends hung"
        outcomes = [t.result() if t.exception() is None else t.exception() for t in tasks]
        assert turns and len(turns[0]) == 4, turns  # the four shared the struck turn
        for tenant, run, outcome in [
            *((a, r, o) for r, o in zip(runs_a, outcomes[:3], strict=True)),
            (b, run_b, outcomes[3]),
        ]:
            got = await texts(tenant, run)
            if isinstance(outcome, list):
                assert got.count("turn") == 1, (fault, outcome, got)
            elif isinstance(outcome, CommitUnknownError):
                assert got in (["warm"], ["warm", "turn"]), got
            else:
                assert got == ["warm"], (fault, outcome, got)
            await tenant.verify(run)
        await asyncio.wait_for(a.append(0, [note(runs_a[0], "after")]), BOUND)
    finally:
        await intruder.close()
        await base.close()


async def test_a_fenced_conclusion_among_a_turns_conclusions_breaks_none_of_the_others(
    store: SqlJournalStore, pg_battery_url: str, clock: FakeClock
) -> None:
    """Four conclusions of one tenant in one turn, sent together, each hashed onto the log
    the one before leaves; the second's run was taken over by another process meanwhile.
    It is fenced and writes nothing, so the two after it find the log is not what they
    were hashed onto and go to the general unit: each of the other three is sealed once,
    the log is what its seals re-derive, and the fenced run is not in it. Red with the
    answers mapped to the wrong members (the fenced caller told "sealed")."""
    other = await SqlJournalStore.connect(pg_battery_url, tenant=store.tenant, clock=clock)
    try:
        warm = RunId.generate()
        lease = await store.acquire(warm, "w", 300)
        await store.append(lease.epoch, [note(warm, "warm")])
        await store.conclude(lease.epoch, [concluded(warm, "succeeded")], "succeeded")
        runs = [RunId.generate() for _ in range(4)]
        epochs = {}
        for i, run in enumerate(runs):
            epochs[run] = (await store.acquire(run, "w", 1 if i == 1 else 300)).epoch
            await store.append(epochs[run], [note(run, "work")])
        clock.advance(5)  # the second run's lease lapses; its holder does not know
        await other.acquire(runs[1], "x", 300)
        turns = watch(store)
        results = await asyncio.gather(
            *(store.conclude(epochs[r], [concluded(r, "succeeded")], "succeeded") for r in runs),
            return_exceptions=True,
        )
        assert isinstance(results[1], FencedError), results[1]
        assert all(isinstance(r, tuple) for i, r in enumerate(results) if i != 1), results
        assert any(len(t) == 4 for t in turns), turns  # the four shared a turn
        audit = await store.audit_log()
        assert audit.ok and audit.size == 4, audit
        sealed = [run for run, _ in await store.sealed_runs()]
        assert sorted(map(str, sealed)) == sorted(map(str, [warm, runs[0], *runs[2:]]))
        assert await store.inclusion_proof(runs[1]) is None
    finally:
        await other.close()


@pytest.mark.parametrize("fault", ["drop the connection", "time out"])
async def test_conclusions_sent_together_and_struck_tell_each_what_landed(
    pg_battery_url: str, clock: FakeClock, fault: str
) -> None:
    """Four conclusions of one tenant, sent together without ``BEGIN`` (one implicit
    transaction), wait on a log node another transaction inserted at the next position
    (uncommitted); then the fault strikes. Lost, each is an unknown commit; refused (the
    timeout), the pipeline rolled back and each ran alone. Whatever each was told is what
    the log holds, and the log is whole. Red with a pipeline lost mid-flight answered as
    written (the four told "sealed", none in the log)."""
    options: dict[str, Any] = {}
    if fault == "time out":
        options["connect_args"] = {"server_settings": {"statement_timeout": "300"}}
    store = await SqlJournalStore.connect(
        pg_battery_url, tenant=f"turnc{uuid.uuid4().hex[:8]}", clock=clock, engine_options=options
    )
    intruder = await asyncpg.connect(dsn(pg_battery_url))
    try:
        warm = RunId.generate()
        lease = await store.acquire(warm, "w", 300)
        await store.append(lease.epoch, [note(warm, "warm")])
        await store.conclude(lease.epoch, [concluded(warm, "succeeded")], "succeeded")
        runs = [RunId.generate() for _ in range(4)]
        epochs = {}
        for run in runs:
            epochs[run] = (await store.acquire(run, "w", 300)).epoch
            await store.append(epochs[run], [note(run, "work")])
        tx = intruder.transaction()
        await tx.start()
        await intruder.execute(
            "INSERT INTO log_tree (tenant, level, idx, hash) VALUES ($1, 0, 1, $2)",
            store.tenant,
            bytes(32),
        )
        turns = watch(store)
        tasks = [
            asyncio.ensure_future(
                store.conclude(epochs[r], [concluded(r, "succeeded")], "succeeded")
            )
            for r in runs
        ]
        await until_waiting(intruder, 1, tries=1000)
        if fault == "drop the connection":
            await intruder.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        else:
            await asyncio.sleep(0.5)
        await tx.rollback()
        _, pending = await asyncio.wait(tasks, timeout=BOUND)
        assert not pending, f"{len(pending)} conclusions hung"
        outcomes = [t.result() if t.exception() is None else t.exception() for t in tasks]
        assert turns and len(turns[0]) == 4, turns  # the four were sent together
        sealed = {str(run) for run, _ in await store.sealed_runs()}
        for run, outcome in zip(runs, outcomes, strict=True):
            if isinstance(outcome, tuple):
                assert str(run) in sealed, (fault, outcome)
            elif not isinstance(outcome, CommitUnknownError):
                assert str(run) not in sealed, (fault, outcome)
        audit = await store.audit_log()
        assert audit.ok and audit.size == len(sealed), audit
    finally:
        await intruder.close()
        await store.close()
