"""The unit of work's fence (``RunWrites.lock_run``): every write that goes through a unit of
work takes the run mutex, then refuses a holder whose epoch is not the lease's, on both
dialects.

The hot path fences in its own statement (tests/test_leases.py); these are the other routes:
a batch that concludes the run, ``append_atomic``, ``seal``, ``conclude`` and an append in
the host's own transaction. Written against the mutants of ``lock_run`` that survived the
lease tests (tools/mutation.py fence): each route refuses a stale epoch, leaves the run as
it was, chains onto the head it read, and keeps the run's activity row as the hot path does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from agentplane_journal import FencedError, RunId, RunSealedError, SqlJournalStore

from support.clock import FakeClock
from support.helpers import admitted, concluded, note

LEASE = 300
SHORT = 1

Route = Callable[[SqlJournalStore, RunId, int], Awaitable[object]]


async def _concluding(store: SqlJournalStore, run: RunId, epoch: int) -> object:
    return await store.append(epoch, [note(run, "last"), concluded(run, "succeeded")])


async def _atomic(store: SqlJournalStore, run: RunId, epoch: int) -> object:
    async def work(session: AsyncSession) -> list[object]:
        return [note(run, "atomic")]

    return await store.append_atomic(run, epoch, work)  # type: ignore[arg-type]


async def _seal(store: SqlJournalStore, run: RunId, epoch: int) -> object:
    return await store.seal(run, epoch, "succeeded")


async def _conclude(store: SqlJournalStore, run: RunId, epoch: int) -> object:
    return await store.conclude(epoch, [concluded(run, "succeeded")], "succeeded")


async def _hosted(store: SqlJournalStore, run: RunId, epoch: int) -> object:
    sessions = async_sessionmaker(store.engine, expire_on_commit=False)
    async with sessions() as session, session.begin():
        return await store.append(epoch, [note(run, "hosted")], session=session)


ROUTES: dict[str, Route] = {
    "a concluding batch": _concluding,
    "append_atomic": _atomic,
    "seal": _seal,
    "conclude": _conclude,
    "the host's transaction": _hosted,
}


async def _taken_over(store: SqlJournalStore, clock: FakeClock) -> tuple[RunId, int, int]:
    """A run whose first holder's lease lapsed and was taken: (run, old epoch, new epoch)."""
    run = RunId.generate()
    old = await store.acquire(run, "instance-a", SHORT)
    await store.append(old.epoch, [admitted(run), note(run, "by a")])
    clock.advance(SHORT)
    new = await store.acquire(run, "instance-b", LEASE)
    return run, old.epoch, new.epoch


@pytest.mark.parametrize("route", list(ROUTES))
async def test_a_displaced_holder_is_fenced_on_every_route_and_writes_nothing(
    store: SqlJournalStore, clock: FakeClock, route: str
) -> None:
    run, old, new = await _taken_over(store, clock)
    before = [r.hash for r in await store.read(run)]
    with pytest.raises(FencedError) as fenced:
        await ROUTES[route](store, run, old)
    assert (fenced.value.run, fenced.value.held, fenced.value.current) == (run, old, new)
    assert [r.hash for r in await store.read(run)] == before
    assert await store.inclusion_proof(run) is None
    await ROUTES[route](store, run, new)  # the current holder goes through


@pytest.mark.parametrize("route", list(ROUTES))
async def test_a_released_lease_fences_its_own_epoch_on_every_route(
    store: SqlJournalStore, route: str
) -> None:
    run = RunId.generate()
    lease = await store.acquire(run, "instance-a", LEASE)
    await store.append(lease.epoch, [admitted(run)])
    await store.release_lease(run, lease.epoch)
    with pytest.raises(FencedError):
        await ROUTES[route](store, run, lease.epoch)
    assert len(await store.read(run)) == 1


@pytest.mark.parametrize("route", ["a concluding batch", "append_atomic", "the host's transaction"])
async def test_every_route_chains_onto_the_head_it_read_under_the_mutex(
    store: SqlJournalStore, route: str
) -> None:
    run = RunId.generate()
    lease = await store.acquire(run, "instance-a", LEASE)
    first = await store.append(lease.epoch, [admitted(run), note(run)])  # the hot path
    await ROUTES[route](store, run, lease.epoch)
    records = await store.read(run)
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    assert records[2].prev_hash == first[-1].hash
    assert await store.verify(run) == records[-1].hash


@pytest.mark.parametrize("route", ["a concluding batch", "append_atomic", "the host's transaction"])
async def test_a_sealed_run_refuses_every_route_after_the_fence(
    store: SqlJournalStore, route: str
) -> None:
    run = RunId.generate()
    lease = await store.acquire(run, "instance-a", LEASE)
    await store.append(lease.epoch, [admitted(run)])
    await store.seal(run, lease.epoch, "succeeded")
    with pytest.raises(RunSealedError):
        await ROUTES[route](store, run, lease.epoch)
    assert len(await store.read(run)) == 1


async def test_a_unit_of_work_moves_the_runs_activity_forward(
    store: SqlJournalStore, clock: FakeClock
) -> None:
    """A run written only through units of work (never the hot path) is listed as recently
    active at the time of its last write, as one written by the hot path is."""
    run = RunId.generate()
    lease = await store.acquire(run, "instance-a", LEASE)
    assert run not in dict(await store.recent_runs())
    await _atomic(store, run, lease.epoch)
    first = dict(await store.recent_runs())[run]
    assert first == int(clock.now)
    clock.advance(60)
    await _hosted(store, run, lease.epoch)
    assert dict(await store.recent_runs())[run] == first + 60
    clock.advance(60)
    await _concluding(store, run, lease.epoch)
    assert dict(await store.recent_runs())[run] == first + 120


async def test_a_call_that_would_wait_on_the_tasks_own_unit_is_refused(
    store: SqlJournalStore, dialect: str
) -> None:
    """Inside the host's transaction that wrote a run, a call on that run without
    ``session=`` would wait for the run mutex the task itself holds (PostgreSQL) or for
    the write lock (SQLite): refused before any statement, saying to pass the session."""
    run, other = RunId.generate(), RunId.generate()
    lease = await store.acquire(run, "instance-a", LEASE)
    second = await store.acquire(other, "instance-a", LEASE)
    sessions = async_sessionmaker(store.engine, expire_on_commit=False)
    async with sessions() as session, session.begin():
        await store.append(lease.epoch, [note(run, "hosted")], session=session)
        why = "holds the run mutex of " + str(run) if dialect == "postgresql" else "write lock"
        with pytest.raises(ValueError, match=why):
            await store.append(lease.epoch, [note(run, "would wait")])
        if dialect == "postgresql":  # another run's mutex is free: no wait, no refusal
            await store.append(second.epoch, [note(other, "elsewhere")])
    assert [r.kind for r in await store.read(run)] == ["Note"]
