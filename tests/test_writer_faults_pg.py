"""The PostgreSQL append writer under locks held elsewhere, lost connections and cancellation.

Two promises (issue: every promise holds on the hot paths): an append never waits on a lock
held for a *different* run, and nothing in one process waits on itself; and every append
handed to the writer is answered exactly once, within a bounded time, whatever else
arrives. Each test bounds every wait with a timeout, so a hang is a failure, not a stall.
Seen red on the code before the fix: the two lock tests (the writer's one connection waited
on run R's lock with every other run's append queued behind it), the wakeup test (the
append was never answered) and the closed-connection test (``CommitUnknownError``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal import BackendError, CommitUnknownError, RunId, SqlJournalStore
from agentplane_journal.backends.postgresql import writer as pgpath
from agentplane_journal.core.batch import chain_batch

from support.clock import FakeClock
from support.databases import dsn
from support.helpers import note
from support.races import until_waiting

pytestmark = [pytest.mark.postgres, pytest.mark.race]

BOUND = 10.0  # seconds: any append not answered by then has hung


@pytest.fixture
async def writer(pg_battery_url: str, clock: FakeClock) -> AsyncIterator[SqlJournalStore]:
    store = await SqlJournalStore.connect(
        pg_battery_url, tenant=f"faults{uuid.uuid4().hex[:10]}", clock=clock
    )
    yield store
    await store.close()


async def warm(store: SqlJournalStore, *runs: RunId) -> None:
    """The store appends once to each run, so it knows their heads (the hot path)."""
    for run in runs:
        await store.append(0, [note(run, "warm")])


async def hold(url: str, sql: str, *args: Any) -> tuple[asyncpg.Connection, Any]:
    """Another transaction that runs ``sql`` and keeps its locks until rolled back."""
    conn = await asyncpg.connect(dsn(url))
    tx = conn.transaction()
    await tx.start()
    await conn.execute(sql, *args)
    return conn, tx


async def test_a_run_locked_elsewhere_never_stalls_appends_to_other_runs(
    writer: SqlJournalStore, pg_battery_url: str
) -> None:
    held, other = RunId.generate(), RunId.generate()
    await warm(writer, held, other)
    conn, tx = await hold(
        pg_battery_url,
        "SELECT 1 FROM run_activity WHERE tenant = $1 AND run_id = $2 FOR UPDATE",
        writer.tenant,
        str(held),
    )
    try:
        blocked = asyncio.create_task(writer.append(0, [note(held, "waits")]))
        await until_waiting(pg_battery_url, 1)
        for i in range(5):  # alone, and in groups with the blocked run's append
            await asyncio.wait_for(writer.append(0, [note(other, f"free {i}")]), BOUND)
        assert not blocked.done()
    finally:
        await tx.rollback()
        await conn.close()
    await asyncio.wait_for(blocked, BOUND)
    await writer.verify(held)
    assert [r.body["text"] for r in await writer.read(held)] == ["warm", "waits"]


async def test_a_host_holding_a_run_appends_to_another_run_without_its_session(
    writer: SqlJournalStore,
) -> None:
    """The host's transaction holds run R (a ``session=`` append); another task's append to
    R waits for it; the host then appends to run S without ``session=``: it must not wait
    on its own transaction through the writer."""
    r, s = RunId.generate(), RunId.generate()
    await warm(writer, r, s)
    async with AsyncSession(writer.engine) as session, session.begin():
        await writer.append(0, [note(r, "host")], session=session)
        other_task = asyncio.create_task(writer.append(0, [note(r, "behind the host")]))
        await asyncio.sleep(0.2)  # its statement is in flight (or waiting in the general unit)
        await asyncio.wait_for(writer.append(0, [note(s, "outside")]), BOUND)
    await asyncio.wait_for(other_task, BOUND)
    texts = [rec.body["text"] for rec in await writer.read(r)]
    assert texts == ["warm", "host", "behind the host"]


async def test_an_append_arriving_as_the_leader_finishes_is_answered(
    writer: SqlJournalStore,
) -> None:
    """Handed to the writer after its leader's last turn but before the leader's task has
    been reaped: it must get a leader of its own."""
    run = RunId.generate()
    await warm(writer, run)
    w = writer._shared.writer
    lead = w._lead
    arrived: list[pgpath.Request] = []

    def arrive() -> None:  # what Writer.append does before it awaits, synchronously
        head = writer._shared.writer._heads.get(writer.tenant, str(run))
        records, rows, _ = chain_batch(
            writer.tenant, str(run), 0, head[0], head[1], [note(run, "late")], None
        )
        future = asyncio.get_running_loop().create_future()
        request = pgpath.Request(
            writer.tenant, run, 0, writer._now(), head, records, rows, [], future
        )
        w._pending.append(request)
        w._spawn()
        arrived.append(request)

    async def leading() -> None:
        await lead()
        if not arrived:  # runs after this task is done, before its done callbacks
            asyncio.get_running_loop().call_soon(arrive)

    w._lead = leading  # type: ignore[method-assign]
    await writer.append(0, [note(run, "first")])
    for _ in range(100):  # the leader gives its connection back, then finishes
        if arrived:
            break
        await asyncio.sleep(0.01)
    assert arrived, "the late append was not handed over"
    records = await asyncio.wait_for(arrived[0].future, BOUND)
    assert [r.body["text"] for r in records] == ["late"]


async def test_a_pooled_connection_closed_by_the_server_is_not_an_unknown_commit(
    pg_battery_url: str, clock: FakeClock
) -> None:
    store = await SqlJournalStore.connect(
        pg_battery_url,
        tenant=f"closed{uuid.uuid4().hex[:10]}",
        clock=clock,
        engine_options={"pool_size": 1, "max_overflow": 0},
    )
    try:
        run = RunId.generate()
        await warm(store, run)
        async with store.engine.connect() as c:
            pid = (await c.exec_driver_sql("SELECT pg_backend_pid()")).scalar_one()
        admin = await asyncpg.connect(dsn(pg_battery_url))
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        finally:
            await admin.close()
        await asyncio.sleep(0.3)  # the client sees the connection close while it is idle
        written = await asyncio.wait_for(store.append(0, [note(run, "after")]), BOUND)
        assert [r.body["text"] for r in await store.read(run)] == ["warm", "after"]
        assert written[0].seq == 2
    finally:
        await store.close()


class Ledger:
    """Every answer the writer gives, by request: none may come twice."""

    def __init__(self, store: SqlJournalStore) -> None:
        self.answers: dict[int, int] = {}
        w = store._shared.writer
        answer = w._answer

        def counting(group: list[Any], answers: list[Any]) -> None:
            for r in group:
                if not r.future.done():
                    self.answers[id(r)] = self.answers.get(id(r), 0) + 1
            answer(group, answers)

        w._answer = counting  # type: ignore[method-assign]

    def check(self) -> None:
        assert all(n == 1 for n in self.answers.values()), "an append was answered twice"


async def settle(store: SqlJournalStore, runs: list[RunId], outcomes: list[Any]) -> None:
    """Nothing lost: what returned records is there once; a refusal wrote nothing; an
    unknown outcome is one or the other, never half."""
    for run, outcome in zip(runs, outcomes, strict=True):
        texts = [r.body["text"] for r in await store.read(run)]
        if isinstance(outcome, list):
            assert texts.count(outcome[0].body["text"]) == 1
        elif isinstance(outcome, CommitUnknownError):
            assert len(texts) in (1, 2)
        else:
            assert isinstance(outcome, BackendError), repr(outcome)
            assert texts == ["warm"], texts
        await store.verify(run)


@pytest.mark.parametrize("fault", ["cancel the leader", "drop the connection", "time out"])
async def test_the_writer_under_faults_answers_every_append_once(
    pg_battery_url: str, clock: FakeClock, fault: str
) -> None:
    """A group's statement waits on a table lock (not a row lock, which it would skip);
    then the fault strikes. Every append of the group and every one queued behind it is
    answered once, in bounded time, and what it was told is what the journal holds."""
    options: dict[str, Any] = {}
    if fault == "time out":
        options["connect_args"] = {"server_settings": {"statement_timeout": "300"}}
    store = await SqlJournalStore.connect(
        pg_battery_url,
        tenant=f"faults{uuid.uuid4().hex[:10]}",
        clock=clock,
        engine_options=options,
    )
    try:
        runs = [RunId.generate() for _ in range(6)]
        await warm(store, *runs)
        ledger = Ledger(store)
        conn, tx = await hold(pg_battery_url, "LOCK TABLE journal IN ACCESS EXCLUSIVE MODE")
        try:
            first = [
                asyncio.create_task(store.append(0, [note(r, f"first {i}")]))
                for i, r in enumerate(runs[:3])
            ]
            await until_waiting(pg_battery_url, 1)
            queued = [
                asyncio.create_task(store.append(0, [note(r, f"queued {i}")]))
                for i, r in enumerate(runs[3:])
            ]
            await asyncio.sleep(0.05)
            if fault == "cancel the leader":
                for leader in list(store._shared.writer._leaders):
                    leader.cancel()
            elif fault == "drop the connection":
                await conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            else:
                await asyncio.sleep(0.5)
        finally:
            await tx.rollback()
            await conn.close()
        _, pending = await asyncio.wait([*first, *queued], timeout=BOUND)
        assert not pending, f"{len(pending)} appends hung"
        outcomes = [
            t.result() if t.exception() is None else t.exception() for t in [*first, *queued]
        ]
        ledger.check()
        await settle(store, [*runs[:3], *runs[3:]], outcomes)
        # And the writer still works.
        await asyncio.wait_for(store.append(0, [note(runs[0], "after")]), BOUND)
    finally:
        await store.close()
