"""The host's own session carries the store's statements: ``session=`` on every method.

A host application (its own declarative models, its own engine, a request-scoped
``AsyncSession`` handed out by a FastAPI-style dependency, without FastAPI itself) writes an
order and its journal record in one transaction of its own, on SQLite and PostgreSQL. The
store commits nothing in that session: commit keeps both, rollback drops both, and a refused
append (fenced, sealed) rolls back only the store's part, so the host decides.

Also here: ``append_atomic``'s ``work`` may not end the transaction it runs in, and on SQLite
the host's read-only transactions stay DEFERRED while the ones the store writes in hold the
write lock from their start.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Integer, Text, func, select, text
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from agentplane_journal import (
    WRITE_TRANSACTION,
    BackendError,
    FencedError,
    PushConfig,
    RunId,
    RunSealedError,
    SqlJournalStore,
    SqlPushStore,
    TransactionEndedError,
    begin_write,
    configure_engine,
)
from agentplane_journal.db.txcontrol import transaction_verb

from support.clock import FakeClock
from support.helpers import admitted, note


class ShopBase(DeclarativeBase):
    pass


class Order(ShopBase):
    __tablename__ = "shop_order"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    number: Mapped[str] = mapped_column(Text, unique=True)
    run_id: Mapped[str] = mapped_column(Text)


@dataclass
class Host:
    """The host application: its engine, its sessionmaker, and the store built on its engine."""

    dialect: str
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    store: SqlJournalStore
    url: str

    async def orders(self, run: RunId) -> list[str]:
        async with self.sessions() as session:
            stmt = select(Order.number).where(Order.run_id == str(run)).order_by(Order.number)
            return list((await session.execute(stmt)).scalars())


@pytest.fixture
async def host(dialect: str, database_url: str, clock: FakeClock) -> AsyncIterator[Host]:
    engine = configure_engine(create_async_engine(database_url))
    try:
        async with engine.begin() as conn:  # the host's own table, made the host's way
            await conn.run_sync(ShopBase.metadata.create_all)
        tenant = f"h{uuid.uuid4().hex[:12]}" if dialect == "postgresql" else "default"
        store = SqlJournalStore(engine, tenant=tenant, clock=clock)
        yield Host(
            dialect, engine, async_sessionmaker(engine, expire_on_commit=False), store, database_url
        )
        await store.close()  # as docs/host-guide.md says: the writer's connections back first
    finally:
        await engine.dispose()


# -- a request handler, FastAPI-dependency style ------------------------------------------


async def get_session(host: Host) -> AsyncIterator[AsyncSession]:
    """The request-scoped session dependency, as a host writes it for FastAPI."""
    async with host.sessions() as session:
        yield session


async def serve(host: Host, handler: Callable[[AsyncSession], Awaitable[Any]]) -> Any:
    """What the framework does around a handler: commit on success, roll back on error."""
    dependency = get_session(host)
    session = await anext(dependency)
    try:
        result = await handler(session)
        await session.commit()
        return result
    except BaseException:
        await session.rollback()
        raise
    finally:
        await dependency.aclose()


def place_order(host: Host, run: RunId, epoch: int, number: str) -> Any:
    async def handler(session: AsyncSession) -> Any:
        session.add(Order(number=number, run_id=str(run)))
        return await host.store.append(epoch, [note(run, f"order {number}")], session=session)

    return handler


async def test_a_committed_request_keeps_the_hosts_row_and_the_record(host: Host) -> None:
    run = RunId.generate()
    lease = await host.store.acquire(run, "shop", 60)
    written = await serve(host, place_order(host, run, lease.epoch, "A-1"))
    assert [r.seq for r in written] == [1]
    assert await host.orders(run) == ["A-1"]
    assert await host.store.read(run) == written
    await host.store.verify(run)


async def test_a_failed_request_drops_the_hosts_row_and_the_record(host: Host) -> None:
    run = RunId.generate()
    lease = await host.store.acquire(run, "shop", 60)
    order = place_order(host, run, lease.epoch, "A-2")

    async def handler(session: AsyncSession) -> None:
        await order(session)
        raise RuntimeError("payment declined")

    with pytest.raises(RuntimeError, match="payment declined"):
        await serve(host, handler)
    assert await host.orders(run) == []
    assert await host.store.read(run) == []
    assert await host.store.recent_runs() == []
    # and the run carries on from where the committed journal is
    assert [r.seq for r in await serve(host, place_order(host, run, lease.epoch, "A-3"))] == [1]


async def test_a_fenced_append_rolls_back_the_hosts_rows_too(host: Host, clock: FakeClock) -> None:
    run = RunId.generate()
    old = await host.store.acquire(run, "old", 1)
    await host.store.append(old.epoch, [admitted(run)])
    clock.advance(5)
    await host.store.acquire(run, "new", 60)

    with pytest.raises(FencedError):
        await serve(host, place_order(host, run, old.epoch, "A-4"))
    assert await host.orders(run) == []
    assert [r.seq for r in await host.store.read(run)] == [1]


async def test_a_refused_append_leaves_the_hosts_transaction_usable(
    host: Host, clock: FakeClock
) -> None:
    run = RunId.generate()
    lease = await host.store.acquire(run, "shop", 60)
    await host.store.seal(run, lease.epoch, "succeeded")

    async with host.sessions() as session:
        session.add(Order(number="A-5", run_id=str(run)))
        with pytest.raises(RunSealedError):
            await host.store.append(lease.epoch, [note(run)], session=session)
        # only the store's part was rolled back (to its savepoint); the host decides
        session.add(Order(number="A-6", run_id=str(run)))
        await session.commit()
    assert await host.orders(run) == ["A-5", "A-6"]
    assert await host.store.read(run) == []


async def test_a_fenced_append_in_an_open_host_transaction_holds_no_run_lock(
    host: Host, clock: FakeClock
) -> None:
    """PostgreSQL: ROLLBACK TO SAVEPOINT drops the run mutex the fenced writer took, so the
    new owner is not kept waiting by a host that has not ended its transaction yet. SQLite:
    the host's write transaction holds the database's write lock until it ends (that is
    what BEGIN IMMEDIATE is), so the new owner waits for exactly that."""
    run = RunId.generate()
    old = await host.store.acquire(run, "old", 1)
    clock.advance(5)
    new = await host.store.acquire(run, "new", 60)
    async with host.sessions() as session:
        with pytest.raises(FencedError):
            await host.store.append(old.epoch, [note(run, "stale")], session=session)
        owner = asyncio.create_task(host.store.append(new.epoch, [note(run, "new owner")]))
        if host.dialect == "postgresql":
            written = await asyncio.wait_for(owner, 10)
        else:
            await asyncio.sleep(0.5)
            assert not owner.done()
            await session.rollback()
            written = await asyncio.wait_for(owner, 30)
    assert [r.seq for r in written] == [1]


async def test_the_run_mutex_is_held_until_the_host_commits(host: Host) -> None:
    run = RunId.generate()
    lease = await host.store.acquire(run, "shop", 60)
    async with host.sessions() as session:
        await host.store.append(
            lease.epoch, [note(run, "in the host's transaction")], session=session
        )
        other = asyncio.create_task(host.store.append(lease.epoch, [note(run, "after")]))
        await asyncio.sleep(0.5)
        assert not other.done(), "a second writer got past the host's run mutex"
        await session.commit()
    written = await asyncio.wait_for(other, 30)
    assert [r.seq for r in written] == [2]
    await host.store.verify(run)


async def test_postgresql_a_repeatable_read_writer_queued_on_the_mutex_is_refused_not_forked(
    pg_battery_url: str, clock: FakeClock
) -> None:
    store = await SqlJournalStore.connect(pg_battery_url, tenant=f"rr{uuid.uuid4().hex[:8]}")
    rr = store.engine.execution_options(isolation_level="REPEATABLE READ")
    run = RunId.generate()
    try:
        await store.append(1, [admitted(run)])
        async with AsyncSession(rr) as first, AsyncSession(rr) as second:
            await store.append(1, [note(run, "first")], session=first)  # holds the mutex
            await second.execute(text("SELECT 1"))  # its snapshot predates first's commit
            queued = asyncio.create_task(store.append(1, [note(run, "second")], session=second))
            await asyncio.sleep(0.3)
            assert not queued.done()
            await first.commit()
            with pytest.raises(BackendError, match="40001"):
                await queued
        assert [r.body.get("text") for r in await store.read(run)] == [None, "first"]
        await store.verify(run)
    finally:
        await store.close()


async def test_every_method_runs_in_the_hosts_transaction(host: Host, clock: FakeClock) -> None:
    store = host.store
    run = RunId.generate()
    for keep in (False, True):
        async with host.sessions() as session:
            lease = await store.acquire(run, "shop", 60, session=session)
            await store.append(lease.epoch, [admitted(run)], session=session)
            assert await store.request_cancel(run, "ops", "stop", session=session)
            # reads in the same transaction see its uncommitted writes
            assert [r.seq for r in await store.read(run, session=session)] == [1]
            assert (await store.head(run, session=session)).seq == 1
            assert (await store.cancellation(run, session=session)) is not None
            assert [r for r, _ in await store.recent_runs(session=session)] == [run]
            head = await store.seal(run, lease.epoch, "succeeded", session=session)
            assert await store.verify(run, session=session) == head
            assert (await store.checkpoint(session=session)).size == 1
            assert await store.sealed_runs(session=session) == [(run, head)]
            assert await store.inclusion_proof(run, session=session) is not None
            assert await store.consistency_proof(1, session=session) == []
            assert await store.runs_by_outcome("succeeded", 5, session=session) == []
            await store.release_lease(run, lease.epoch, session=session)
            # nothing is visible outside the host's transaction yet
            assert await store.head(run) == (await store.head(RunId.generate()))
            assert (await store.checkpoint()).size == 0
            if keep:
                await session.commit()
            else:
                await session.rollback()
        if not keep:
            assert await store.read(run) == []
            assert await store.cancellation(run) is None
            assert await store.recent_runs() == []
    assert (await store.checkpoint()).size == 1
    assert (await store.head(run)).seq == 1
    assert await store.cancellation(run) is not None
    with pytest.raises(FencedError):  # released in the committed transaction
        await store.append(lease.epoch, [note(run)])


async def test_the_push_store_runs_in_the_hosts_transaction(host: Host, clock: FakeClock) -> None:
    push = SqlPushStore(
        host.engine, tenant=host.store.tenant, secret_key=bytes(range(32)), clock=clock
    )
    task = RunId.generate()
    config = PushConfig("hook", task, "https://receiver.example/hook", token="s3cret")
    for keep in (False, True):
        async with host.sessions() as session:
            await push.put(config, 1, session=session)
            await push.advance(task, "hook", 5, session=session)
            await push.retry(task, "hook", 10, "503", session=session)
            assert await push.get(task, "hook", session=session) == config
            assert await push.list(task, session=session) == [config]
            [due] = await push.due(10, 5, session=session)
            assert (due.next_seq, due.attempts) == (5, 1)
            assert (await push.reencrypt(session=session)).reencrypted == 0
            assert await push.get(task, "hook") is None  # not visible outside
            if keep:
                await session.commit()
            else:
                await session.rollback()
        if not keep:
            assert await push.list(task) == []
    assert await push.get(task, "hook") == config
    async with host.sessions() as session:
        await push.delete(task, "hook", session=session)
        await session.rollback()
    assert await push.get(task, "hook") == config


# -- refusals -----------------------------------------------------------------------------


async def test_a_session_on_another_database_is_refused(
    host: Host, dialect: str, sqlite_database: Callable[..., str], request: pytest.FixtureRequest
) -> None:
    other_url = (
        sqlite_database() if dialect == "sqlite" else request.getfixturevalue("pg_database")()
    )
    other = configure_engine(create_async_engine(other_url))
    run = RunId.generate()
    try:
        async with AsyncSession(other) as session:
            with pytest.raises(ValueError, match="its own database"):
                await host.store.append(1, [note(run)], session=session)
            with pytest.raises(ValueError, match="its own database"):
                await host.store.read(run, session=session)
    finally:
        await other.dispose()
    with pytest.raises(TypeError, match="AsyncSession"):
        await host.store.read(run, session=object())  # type: ignore[arg-type]
    async with AsyncSession() as unbound:
        with pytest.raises(ValueError, match="no bind"):
            await host.store.read(run, session=unbound)


async def test_a_session_on_another_engine_of_the_same_database_works(host: Host) -> None:
    run = RunId.generate()
    if host.dialect == "sqlite":  # unconfigured, it would not take the write lock at BEGIN
        bare = create_async_engine(host.url)
        try:
            async with AsyncSession(bare) as session:
                with pytest.raises(ValueError, match="configure_engine"):
                    await host.store.append(1, [note(run)], session=session)
        finally:
            await bare.dispose()
    second = configure_engine(create_async_engine(host.url))
    try:
        async with AsyncSession(second) as session:
            session.add(Order(number=f"B-{uuid.uuid4().hex[:6]}", run_id=str(run)))
            await host.store.append(1, [note(run)], session=session)
            await session.commit()
    finally:
        await second.dispose()
    assert len(await host.orders(run)) == 1
    assert [r.seq for r in await host.store.read(run)] == [1]


# -- append_atomic's work may not end its transaction ------------------------------------


@pytest.mark.parametrize("ending", ["commit", "rollback", "close"])
async def test_a_work_that_ends_the_transaction_gets_nothing_appended(
    host: Host, ending: str
) -> None:
    store = host.store
    run = RunId.generate()
    lease = await store.acquire(run, "shop", 60)
    await store.append(lease.epoch, [admitted(run)])
    number = f"C-{uuid.uuid4().hex[:6]}"

    async def work(session: AsyncSession) -> list[Any]:
        session.add(Order(number=number, run_id=str(run)))
        await getattr(session, ending)()
        return [note(run, "after the transaction ended")]

    with pytest.raises(TransactionEndedError) as caught:
        await store.append_atomic(run, lease.epoch, work)
    assert caught.value.run == run and "nothing of its batch" in str(caught.value)
    assert [r.seq for r in await store.read(run)] == [1]
    # what work committed itself stays committed; the records never join it
    assert await host.orders(run) == ([number] if ending == "commit" else [])


async def test_a_displaced_work_cannot_append_after_the_new_owner_sealed(
    host: Host, clock: FakeClock
) -> None:
    store = host.store
    run = RunId.generate()
    old = await store.acquire(run, "old", 1)
    await store.append(old.epoch, [admitted(run)])

    async def work(session: AsyncSession) -> list[Any]:
        await session.commit()  # releases the run mutex and the fence
        clock.advance(5)
        new = await store.acquire(run, "new", 60)
        await store.seal(run, new.epoch, "failed")
        return [note(run, "displaced writer")]

    with pytest.raises(TransactionEndedError):
        await store.append_atomic(run, old.epoch, work)
    records = await store.read(run)
    assert [r.kind for r in records] == ["RunAdmitted"]
    inclusion = await store.inclusion_proof(run)
    assert inclusion is not None and inclusion.seal == records[-1].hash
    assert await store.verify(run) == records[-1].hash


async def test_a_work_in_the_hosts_session_that_commits_it_is_refused(host: Host) -> None:
    store = host.store
    run = RunId.generate()

    async def work(session: AsyncSession) -> list[Any]:
        await session.commit()
        return [note(run)]

    async with host.sessions() as session:
        with pytest.raises(TransactionEndedError):
            await store.append_atomic(run, 1, work, session=session)
    assert await store.read(run) == []


async def test_a_work_in_the_hosts_session_commits_with_the_host(host: Host) -> None:
    store = host.store
    run = RunId.generate()
    number = f"D-{uuid.uuid4().hex[:6]}"

    async def work(session: AsyncSession) -> list[Any]:
        session.add(Order(number=number, run_id=str(run)))
        return [note(run)]

    async with host.sessions() as session:
        await store.append_atomic(run, 1, work, session=session)
        assert await store.read(run) == []  # not committed yet
        await session.commit()
    assert await host.orders(run) == [number]
    assert [r.seq for r in await store.read(run)] == [1]


# agentplane's postgres_atomic_member_cannot_end_the_transaction, on both dialects: a member
# of the atomic append may write in the transaction, never end or control it. SQLAlchemy does
# not see a COMMIT sent as SQL text (its transaction still looks open), so the anchor check
# above cannot: the statement is refused before it reaches the database (db/txcontrol.py).
TRANSACTION_CONTROL = [
    ("COMMIT", "COMMIT"),
    ("commit work", "COMMIT"),
    ("END", "END"),
    ("END TRANSACTION", "END"),
    ("ROLLBACK", "ROLLBACK"),
    ("ABORT", "ABORT"),
    ("ROLLBACK TO SAVEPOINT mine", "ROLLBACK"),
    ("BEGIN", "BEGIN"),
    ("START TRANSACTION", "START"),
    ("SAVEPOINT mine", "SAVEPOINT"),
    ("RELEASE SAVEPOINT mine", "RELEASE"),
    ("PREPARE TRANSACTION 'member'", "PREPARE TRANSACTION"),
    ("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", "SET TRANSACTION"),
    ("  /* a comment /* nested */ */ COMMIT", "COMMIT"),
    ("-- a comment\nROLLBACK", "ROLLBACK"),
    ("; COMMIT", "COMMIT"),
]


@pytest.mark.parametrize(("statement", "verb"), TRANSACTION_CONTROL)
async def test_an_atomic_member_cannot_end_the_transaction(
    host: Host, statement: str, verb: str
) -> None:
    store = host.store
    run = RunId.generate()
    lease = await store.acquire(run, "shop", 60)
    await store.append(lease.epoch, [admitted(run)])
    number = f"M-{uuid.uuid4().hex[:6]}"

    async def work(session: AsyncSession) -> list[Any]:
        session.add(Order(number=number, run_id=str(run)))
        await session.flush()  # the member's own row, written in the transaction first
        await session.execute(text(statement))
        return [note(run, "after the member's statement")]

    with pytest.raises(TransactionEndedError) as caught:
        await store.append_atomic(run, lease.epoch, work)
    assert caught.value.statement == verb and caught.value.run == run
    assert f"ran a {verb} statement" in str(caught.value)
    assert "refused before reaching the database" in str(caught.value)
    # Nothing half-written: not the member's row, not the records.
    assert await host.orders(run) == []
    assert [r.seq for r in await store.read(run)] == [1]
    # The transaction rolled back whole, run mutex included: the owner appends at once.
    assert [r.seq for r in await store.append(lease.epoch, [note(run)])] == [2]


@pytest.mark.parametrize(
    ("sql", "verb"),
    [
        *TRANSACTION_CONTROL,
        ("SELECT 1", None),
        ("SELECT 'COMMIT'", None),
        ("/* COMMIT */ SELECT 1", None),
        ("-- ROLLBACK\nSELECT 1", None),
        ("INSERT INTO commit_log VALUES (1)", None),
        ("COMMITMENT", None),
        ("PREPARE plan AS SELECT 1", None),
        ("SET LOCAL lock_timeout = '5s'", None),
        ("SET search_path TO app", None),
        ("PRAGMA foreign_keys", None),
        ("/* unterminated COMMIT", None),
        ("", None),
    ],
)
def test_which_statements_end_or_control_a_transaction(sql: str, verb: str | None) -> None:
    assert transaction_verb(sql) == verb


async def test_an_atomic_member_that_swallows_the_refusal_still_gets_nothing_appended(
    host: Host,
) -> None:
    store = host.store
    run = RunId.generate()
    number = f"S-{uuid.uuid4().hex[:6]}"

    async def work(session: AsyncSession) -> list[Any]:
        session.add(Order(number=number, run_id=str(run)))
        conn = await session.connection()
        try:
            await conn.exec_driver_sql("COMMIT")  # the driver-level text path, the same check
        except TransactionEndedError:
            pass  # a member that "handles" it and goes on
        return [note(run)]

    for session in (None, host.sessions()):
        if session is None:
            with pytest.raises(TransactionEndedError, match="ran a COMMIT statement"):
                await store.append_atomic(run, 1, work)
        else:
            async with session:
                with pytest.raises(TransactionEndedError, match="ran a COMMIT statement"):
                    await store.append_atomic(run, 1, work, session=session)
                await session.commit()  # the host commits what it has: nothing of the unit
    assert await host.orders(run) == []
    assert await store.read(run) == []


async def test_an_atomic_member_may_use_its_own_savepoints_and_mention_commit(
    host: Host,
) -> None:
    """What the check leaves alone: SQLAlchemy's own savepoints (``begin_nested()``, tracked
    by the session, so their fate is the transaction's), and statements that merely contain
    a transaction word."""
    store = host.store
    run = RunId.generate()
    kept, dropped = f"K-{uuid.uuid4().hex[:6]}", f"D-{uuid.uuid4().hex[:6]}"

    async def work(session: AsyncSession) -> list[Any]:
        async with session.begin_nested():
            session.add(Order(number=kept, run_id=str(run)))
        nested = await session.begin_nested()
        session.add(Order(number=dropped, run_id=str(run)))
        await session.flush()
        await nested.rollback()
        assert (await session.execute(text("SELECT 'COMMIT'"))).scalar_one() == "COMMIT"
        await session.execute(text("/* COMMIT */ SELECT 1"))
        return [note(run)]

    await store.append_atomic(run, 1, work)
    assert await host.orders(run) == [kept]
    assert [r.seq for r in await store.read(run)] == [1]


# -- SQLite: the host's engine -------------------------------------------------------------


@pytest.fixture
def sqlite_url(sqlite_database: Callable[..., str]) -> str:
    return sqlite_database()


@pytest.fixture
async def sqlite_host(sqlite_url: str, clock: FakeClock) -> AsyncIterator[Host]:
    engine = configure_engine(create_async_engine(sqlite_url))
    try:
        async with engine.begin() as conn:
            await conn.run_sync(ShopBase.metadata.create_all)
        store = SqlJournalStore(engine, clock=clock)
        yield Host("sqlite", engine, async_sessionmaker(engine), store, sqlite_url)
        await store.close()
    finally:
        await engine.dispose()


async def test_sqlite_read_only_host_transactions_stay_deferred(sqlite_host: Host) -> None:
    engine, store = sqlite_host.engine, sqlite_host.store
    run = RunId.generate()
    await store.append(1, [admitted(run)])
    async with AsyncSession(engine) as reader:
        # a read-only host transaction, open across another writer's append
        assert len(await store.read(run, session=reader)) == 1
        assert (await reader.execute(select(func.count()).select_from(Order))).scalar() == 0
        written = await asyncio.wait_for(store.append(1, [note(run)]), 10)
        assert [r.seq for r in written] == [2]
        # its snapshot is its own: it still sees one record
        assert len(await store.read(run, session=reader)) == 1


async def test_sqlite_a_write_in_a_transaction_that_began_as_a_read_is_refused(
    sqlite_host: Host,
) -> None:
    host, run = sqlite_host, RunId.generate()
    async with host.sessions() as session:
        await session.execute(select(Order.id))  # BEGIN (deferred), then a read
        with pytest.raises(ValueError, match="begin_write"):
            await host.store.append(1, [note(run)], session=session)
    assert await host.store.read(run) == []

    # begin_write first: read, write the host's row, append, commit
    async with host.sessions() as session:
        await begin_write(session)
        await session.execute(select(Order.id))
        session.add(Order(number="E-1", run_id=str(run)))
        await session.flush()
        await host.store.append(1, [note(run)], session=session)
        await session.commit()
    assert await host.orders(run) == ["E-1"]

    # or a sessionmaker whose engine asks for write transactions
    writes = async_sessionmaker(host.engine.execution_options(**{WRITE_TRANSACTION: True}))
    async with writes() as session:
        await session.execute(select(Order.id))
        await host.store.append(1, [note(run)], session=session)
        await session.commit()
    assert [r.seq for r in await host.store.read(run)] == [1, 2]

    async with host.sessions() as session:
        await session.execute(select(Order.id))
        with pytest.raises(ValueError, match="before the transaction's first statement"):
            await begin_write(session)


async def test_writers_in_host_sessions_that_read_first_queue_instead_of_failing(
    host: Host,
) -> None:
    """Each its own connection: read first (under begin_write), then append. On SQLite none
    is SQLITE_BUSY; on PostgreSQL begin_write is a plain BEGIN and the run mutex queues."""
    run, tag = RunId.generate(), uuid.uuid4().hex[:6]

    async def request(i: int) -> None:
        async with host.sessions() as session:
            await begin_write(session)
            await host.store.head(run, session=session)
            session.add(Order(number=f"F-{tag}-{i}", run_id=str(run)))
            await host.store.append(1, [note(run, str(i))], session=session)
            await session.commit()

    await asyncio.gather(*(request(i) for i in range(8)))
    assert [r.seq for r in await host.store.read(run)] == list(range(1, 9))
    assert len(await host.orders(run)) == 8


async def test_sqlite_an_engine_used_before_configuration_is_refused(sqlite_url: str) -> None:
    engine = create_async_engine(sqlite_url)
    try:
        async with engine.connect() as conn:  # the host used it first
            await conn.execute(text("SELECT 1"))
        with pytest.raises(ValueError, match="configure_engine"):
            SqlJournalStore(engine)
        with pytest.raises(ValueError, match="configure_engine"):
            configure_engine(engine)
        await engine.dispose()  # as the message says: then it can be configured
        store = SqlJournalStore(engine)
        assert await store.head(RunId.generate()) == await store.head(RunId.generate())
        await store.close()  # the host guide's shutdown order: the store, then the engine
    finally:
        await engine.dispose()


async def test_sqlite_a_connection_older_than_the_configuration_is_named_when_it_begins() -> None:
    """A pool without counts (StaticPool, SQLite's in-memory default) cannot be checked up
    front; its stray connection is refused when it begins a transaction, not used half set
    up."""
    engine = create_async_engine("sqlite+aiosqlite://")
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        configure_engine(engine)
        with pytest.raises(ValueError, match=r"has a connection opened before .*configure_engine"):
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
    finally:
        await engine.dispose()


async def test_sqlite_configuration_leaves_foreign_keys_as_the_host_has_them(
    sqlite_url: str, tmp_path: Path
) -> None:
    engine = configure_engine(create_async_engine(sqlite_url))
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(text("PRAGMA foreign_keys"))).scalar() == 0
            assert (await conn.execute(text("PRAGMA journal_mode"))).scalar() == "wal"
            assert (await conn.execute(text("PRAGMA busy_timeout"))).scalar() == 30000
            assert (await conn.execute(text("PRAGMA synchronous"))).scalar() == 2  # FULL
    finally:
        await engine.dispose()


# -- the ordinary handler: the host writes its row first, then appends --------------------


def write_then_append(host: Host, run: RunId, epoch: int, number: str) -> Any:
    async def handler(session: AsyncSession) -> Any:
        session.add(Order(number=number, run_id=str(run)))
        await session.flush()  # SQLite: a DEFERRED transaction that has now written
        return await host.store.append(epoch, [note(run, f"order {number}")], session=session)

    return handler


async def test_a_handler_that_writes_its_row_first_then_appends_commits_both(host: Host) -> None:
    run = RunId.generate()
    lease = await host.store.acquire(run, "shop", 60)
    written = await serve(host, write_then_append(host, run, lease.epoch, "W-1"))
    assert [r.seq for r in written] == [1]
    assert await host.orders(run) == ["W-1"]
    assert await host.store.read(run) == written


async def test_a_handler_that_writes_first_and_fails_drops_both(host: Host) -> None:
    run = RunId.generate()
    lease = await host.store.acquire(run, "shop", 60)
    handler = write_then_append(host, run, lease.epoch, "W-2")

    async def failing(session: AsyncSession) -> Any:
        await handler(session)
        raise RuntimeError("payment declined")

    with pytest.raises(RuntimeError):
        await serve(host, failing)
    assert await host.orders(run) == []
    assert await host.store.read(run) == []


async def test_a_fenced_append_after_the_hosts_write_rolls_back_its_begin_block(
    host: Host, clock: FakeClock
) -> None:
    run = RunId.generate()
    old = await host.store.acquire(run, "old", 1)
    clock.advance(5)
    await host.store.acquire(run, "new", 60)
    async with host.sessions() as session:
        with pytest.raises(FencedError):
            async with session.begin():
                session.add(Order(number="W-3", run_id=str(run)))
                await session.flush()
                await host.store.append(old.epoch, [note(run)], session=session)
    assert await host.orders(run) == []
    assert await host.store.read(run) == []


# -- a forgotten `session=`: an immediate answer instead of waiting on itself --------------


async def test_sqlite_a_store_write_without_session_inside_the_tasks_own_write_is_refused_at_once(
    sqlite_host: Host,
) -> None:
    host, run = sqlite_host, RunId.generate()
    async with host.sessions() as session:
        session.add(Order(number="S-1", run_id=str(run)))
        await session.flush()  # this task now holds the write lock
        for call in (
            lambda: host.store.append(1, [note(run)]),
            lambda: host.store.acquire(run, "web", 30),
            lambda: host.store.append_atomic(run, 1, _nothing),
        ):
            started = asyncio.get_running_loop().time()
            with pytest.raises(ValueError, match="session=session"):
                await soon(call())
            assert asyncio.get_running_loop().time() - started < 1
        await host.store.append(1, [note(run)], session=session)  # the right way works
        await session.commit()
    assert await host.orders(run) == ["S-1"]
    assert [r.seq for r in await host.store.read(run)] == [1]

    async with host.sessions() as session:
        await begin_write(session)  # holds the write lock from BEGIN
        with pytest.raises(ValueError, match="session=session"):
            await soon(host.store.append(1, [note(run)]))

    # a transaction that only read holds no lock: the store's own transaction goes ahead
    async with host.sessions() as session:
        await session.execute(select(Order.id))
        written = await soon(host.store.append(1, [note(run)]))
        assert [r.seq for r in written] == [2]
    # and once the write transaction ended, the task may write without session= again
    assert [r.seq for r in await host.store.append(1, [note(run)])] == [3]


async def _nothing(session: AsyncSession) -> list[Any]:
    return []


async def soon(call: Awaitable[Any]) -> Any:
    """``call`` within 5 s, in this task (``asyncio.wait_for`` runs it in a new task on 3.11,
    which has no transaction of its own open)."""
    async with asyncio.timeout(5):
        return await call


async def test_postgresql_a_store_write_on_a_run_the_tasks_transaction_holds_is_refused(
    pg_battery_url: str, clock: FakeClock
) -> None:
    engine = create_async_engine(pg_battery_url)
    store = SqlJournalStore(engine, tenant=f"own{uuid.uuid4().hex[:8]}", clock=clock)
    run, other = RunId.generate(), RunId.generate()
    try:
        async with AsyncSession(engine) as session:
            await store.append(1, [admitted(run)], session=session)  # holds run's mutex
            for call in (
                lambda: store.append(1, [note(run)]),
                lambda: store.append_atomic(run, 1, _nothing),
                lambda: store.seal(run, 1, "succeeded"),
                lambda: store.acquire(run, "web", 60),  # lease changes take the mutex too
                lambda: store.renew(run, "web", 1, 60),
                lambda: store.release_lease(run, 1),
            ):
                with pytest.raises(ValueError, match="run mutex"):
                    await soon(call())
            # another run: legal, and committed in the store's own transaction
            await soon(store.append(1, [admitted(other)]))
            await session.rollback()
        assert await store.read(run) == []
        assert [r.seq for r in await store.read(other)] == [1]

        # a refused (fenced) append took no mutex it still holds: no refusal afterwards
        first = await store.acquire(run, "web", 60)
        async with AsyncSession(engine) as session:
            with pytest.raises(FencedError):
                await store.append(99, [admitted(run)], session=session)
            lease = await soon(store.renew(run, "web", first.epoch, 60))
            await soon(store.append(lease.epoch, [admitted(run)]))
        await store.close()
    finally:
        await engine.dispose()
