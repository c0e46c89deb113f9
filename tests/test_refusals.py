"""Sharper refusals (issue 21, items 4 and the conformance checks), on both dialects.

agentplane 0.22.0's conformance battery and store, restated in our words:

* ``a_batch_spans_one_run``: a batch naming two runs is refused before any statement, on
  every append path, and nothing of it is written;
* a unique violation is classified by the constraint the database names: the exactly-once
  index is :class:`DuplicateEffectError`, the journal's primary key (a chain position taken
  by a writer that bypassed the run mutex) is :class:`AppendConflictError`, never the other;
* ``is_shared()`` says whether several processes may append to the store's durable state;
* ``the_discovery_index_pages_in_a_total_order``: ``recent_runs`` pages by ``(updated_at,
  run)`` descending, ties included, every run served exactly once.

(``postgres_atomic_member_cannot_end_the_transaction`` is in ``test_host_session.py``, beside
the other checks on ``append_atomic``'s work, with the host's own table.)
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import pytest
from sqlalchemy import event, insert, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.pool import StaticPool

from agentplane_journal import (
    AppendConflictError,
    Digest,
    DuplicateEffectError,
    EffectKey,
    Head,
    RunId,
    SqlJournalStore,
    StoreError,
)
from agentplane_journal.core.batch import COLUMNS, chain_batch
from agentplane_journal.db.dialect import PostgresDialect, SqliteDialect, dialect_for
from agentplane_journal.db.models import Journal
from agentplane_journal.db.violations import Collision, journal_collision

from support.clock import FakeClock
from support.databases import dsn
from support.helpers import admitted, key, note, started
from support.races import K, race, until_waiting
from support.stores import store_factory

# -- a batch spans one run ----------------------------------------------------------------


@pytest.fixture
async def cold(database_url: str, dialect: str, clock: FakeClock) -> AsyncIterator[Any]:
    """A store on an engine that has never opened a connection, and what it is asked to send:
    ``cold.connects`` counts connections opened, ``cold.statements`` statements sent."""
    engine = create_async_engine(database_url)
    seen: dict[str, int] = {"connects": 0, "statements": 0}

    def connected(*_: Any) -> None:
        seen["connects"] += 1

    def executed(*_: Any) -> None:
        seen["statements"] += 1

    event.listen(engine.sync_engine, "connect", connected)
    event.listen(engine.sync_engine, "before_cursor_execute", executed)
    tenant = f"t{uuid.uuid4().hex[:12]}" if dialect == "postgresql" else "default"
    store = SqlJournalStore(engine, tenant=tenant, clock=clock)
    try:
        yield type("Cold", (), {"store": store, "engine": engine, "seen": seen})
    finally:
        await engine.dispose()


async def test_a_batch_spans_one_run(cold: Any) -> None:
    """Two runs in one batch: refused (``ValueError`` naming both) before any connection is
    taken, on ``append``, ``append(session=)`` and ``append_atomic`` alike."""
    store, engine = cold.store, cold.engine
    a, b = RunId.generate(), RunId.generate()
    for batch in ([admitted(a), admitted(b)], [admitted(a), note(a), started(b, key(1))]):
        with pytest.raises(ValueError, match=f"batch spans runs {a} and {b}"):
            await store.append(1, batch)
        # The host's session: its transaction is never begun, its connection never taken.
        async with AsyncSession(engine) as session:
            with pytest.raises(ValueError, match="a batch is one run's atomic unit"):
                await store.append(1, batch, session=session)
            assert not session.in_transaction()
    # Nothing reached the database: no connection was ever opened.
    assert cold.seen == {"connects": 0, "statements": 0}

    # append_atomic learns its batch from work, inside the transaction: refused before the
    # journal is written, and work's own writes roll back with it.
    async def mixed(session: AsyncSession) -> list[Any]:
        await session.execute(text("SELECT 1"))
        return [note(a), note(b)]

    async def foreign(session: AsyncSession) -> list[Any]:
        return [note(b)]

    with pytest.raises(ValueError, match=f"batch spans runs {a} and {b}"):
        await store.append_atomic(a, 1, mixed)
    with pytest.raises(ValueError, match=f"work returned appends for {b}, but the unit is for {a}"):
        await store.append_atomic(a, 1, foreign)
    async with AsyncSession(engine) as session:  # in the host's transaction: its savepoint
        with pytest.raises(ValueError, match=f"batch spans runs {a} and {b}"):
            await store.append_atomic(a, 1, mixed, session=session)
        await session.commit()
    for run in (a, b):
        assert await store.read(run) == []
        assert await store.head(run) == Head(0, Digest.ZERO)
    # And a one-run batch still goes through afterwards.
    assert [r.seq for r in await store.append(1, [admitted(a), note(a)])] == [1, 2]


# -- unique violations, classified by constraint name ------------------------------------


def _next_rows(store: SqlJournalStore, run: RunId, head: Any, epoch: int = 1) -> list[Any]:
    """Valid journal rows (``COLUMNS`` order) for one note after ``head``: a record another
    writer could have written, chained and hashed like the store's own."""
    _, rows, _ = chain_batch(
        store.tenant,
        str(run),
        epoch,
        head.seq,
        head.hash,
        [note(run, "written behind the mutex")],
        None,
    )
    return rows


_HEAD = "SELECT seq, hash FROM journal WHERE tenant = $1 AND run_id = $2 ORDER BY seq DESC LIMIT 1"

#: Rounds of the rogue race at most (each round is one run; it stops at the first conflict).
ROUNDS = 50
#: How many records each rogue connection tries to write per round.
ROGUE_TRIES = 4

_INSERT = (
    f"INSERT INTO journal ({', '.join(COLUMNS)})"
    f" VALUES ({', '.join(f'${i}' for i in range(1, 13))})"
)


async def test_a_position_taken_inside_the_transaction_is_an_append_conflict(
    store: SqlJournalStore,
) -> None:
    """``work`` inserts a record at the next position itself (behind the store's back, after
    the head was read under the run mutex): the store's INSERT collides on the journal's
    primary key. That is a race, :class:`AppendConflictError`, even though the batch starts
    an effect: never :class:`DuplicateEffectError`, never a bare backend error."""
    run = RunId.generate()
    await store.append(1, [admitted(run)])
    head = await store.head(run)

    async def work(session: AsyncSession) -> list[Any]:
        row = dict(zip(COLUMNS, _next_rows(store, run, head)[0], strict=True))
        await session.execute(insert(Journal).values(**row))
        return [started(run, key(7))]

    with pytest.raises(AppendConflictError) as caught:
        await store.append_atomic(run, 1, work)
    error = caught.value
    assert not isinstance(error, DuplicateEffectError)
    assert (error.run, error.seq, error.constraint) == (run, 2, "journal_pkey")
    assert "raced another writer" in str(error) and "retry" in str(error)
    assert isinstance(error.__cause__, IntegrityError)
    # Refused: nothing of the transaction stayed, work's row included; a retry goes through.
    assert [r.seq for r in await store.read(run)] == [1]
    assert [r.seq for r in await store.append(1, [started(run, key(7))])] == [2]
    assert await store.verify(run) == (await store.head(run)).hash


async def test_an_append_conflict_in_the_hosts_session_leaves_it_usable(
    store: SqlJournalStore,
) -> None:
    run = RunId.generate()
    await store.append(1, [admitted(run)])
    head = await store.head(run)

    async def work(session: AsyncSession) -> list[Any]:
        row = dict(zip(COLUMNS, _next_rows(store, run, head)[0], strict=True))
        await session.execute(insert(Journal).values(**row))
        return [note(run)]

    async with AsyncSession(store.engine) as session:
        with pytest.raises(AppendConflictError):
            await store.append_atomic(run, 1, work, session=session)
        # Only the store's savepoint rolled back: the host's transaction goes on.
        await store.append(1, [note(run, "after the conflict")], session=session)
        await session.commit()
    assert [r.seq for r in await store.read(run)] == [1, 2]


@pytest.fixture
async def pg_stores(pg_battery_url: str, clock: FakeClock) -> AsyncIterator[Callable[..., Any]]:
    """``await pg_stores()``: a store on the PostgreSQL battery database, one tenant per test."""
    async with store_factory(
        SqlJournalStore, pg_battery_url, f"r{uuid.uuid4().hex[:12]}", clock
    ) as make:
        yield make


async def test_postgresql_an_append_racing_a_writer_behind_the_mutex_is_an_append_conflict(
    pg_stores: Callable[..., Any], pg_battery_url: str
) -> None:
    """A second connection writes the next record without the run mutex and holds it
    uncommitted; the store's append (the general unit of work: a fresh store knows no head)
    reads the head under the mutex, inserts, waits on that row, and collides when it commits.
    Then a warmed store's hot statement meets the same race and retries on the general path,
    which reads the new head: a race is retryable, and retried where the store can."""
    store = await pg_stores()
    run = RunId.generate()
    await store.append(1, [admitted(run)])
    rogue = await asyncpg.connect(dsn(pg_battery_url))
    try:
        # 1. The general unit of work: the primary key names the race.
        fresh = await pg_stores()
        tx = rogue.transaction()
        await tx.start()
        await rogue.execute(_INSERT, *_next_rows(store, run, await store.head(run))[0])
        append = asyncio.create_task(fresh.append(1, [started(run, key(1))]))
        await until_waiting(rogue, 1, give_up=append)
        assert not append.done(), "the append did not wait on the uncommitted row"
        await tx.commit()
        with pytest.raises(AppendConflictError) as caught:
            await append
        assert (caught.value.run, caught.value.seq) == (run, 2)
        assert caught.value.constraint == "journal_pkey"
        assert [r.seq for r in await store.read(run)] == [1, 2]  # the rogue's record only

        # 2. The hot statement (a store that wrote the run last knows its head): the same
        # collision sends the append to the general unit, which chains onto the new head.
        warm = await pg_stores()
        await warm.append(1, [note(run, "warm")])  # general (no head known), then it knows
        tx = rogue.transaction()
        await tx.start()
        await rogue.execute(_INSERT, *_next_rows(store, run, await store.head(run))[0])
        hot = asyncio.create_task(warm.append(1, [started(run, key(2))]))
        await until_waiting(rogue, 1, give_up=hot)
        await tx.commit()
        assert [r.seq for r in await hot] == [5]
        assert await store.verify(run) == (await store.head(run)).hash
    finally:
        await rogue.close()


def _effect(n: int) -> EffectKey:
    return EffectKey.derive(0, "forward", n, 1, "probe", n.to_bytes(4, "big"))


async def _race_round(
    stores: list[SqlJournalStore], rogues: list[asyncpg.Connection], run: RunId, base: int
) -> tuple[list[Any], list[Any]]:
    """One round: each store appends one ``EffectStarted`` (keys ``base``, ``base + 1``, ...)
    to ``run`` while each rogue connection writes a record after the head it reads."""
    probe = stores[0]

    def appender(i: int) -> Callable[[], Any]:
        # Each store is new to this run (no known head): the general unit of work.
        return lambda: stores[i].append(1, [started(run, _effect(base + i))])

    def rogue(conn: asyncpg.Connection) -> Callable[[], Any]:
        async def call() -> list[str]:
            outcomes = []
            for _ in range(ROGUE_TRIES):  # several tries each: more chances to cut in
                seq, hash_ = await conn.fetchrow(_HEAD, probe.tenant, str(run))
                head = Head(seq, Digest(bytes(hash_)))
                try:
                    await conn.execute(_INSERT, *_next_rows(probe, run, head)[0])
                except asyncpg.UniqueViolationError:
                    outcomes.append("lost")  # a store append or another rogue was first
                else:
                    outcomes.append("wrote")
            return outcomes

        return call

    results = await race(*(appender(i) for i in range(len(stores))), *(rogue(c) for c in rogues))
    return results[: len(stores)], results[len(stores) :]


@pytest.mark.race
async def test_postgresql_appends_racing_rogue_writers_conflict_and_never_duplicate(
    pg_stores: Callable[..., Any], pg_battery_url: str
) -> None:
    """K store instances each append one ``EffectStarted`` (distinct keys) to one run while K
    rogue connections insert valid records after the head they read, without the run mutex.
    Every store append either lands or is an :class:`AppendConflictError`; none is a
    :class:`DuplicateEffectError` (no key ever repeats) or a bare ``BackendError``, and the
    chain stays whole. Rounds repeat until at least one conflict was seen (bounded)."""
    stores = [await pg_stores() for _ in range(K)]
    rogues = [await asyncpg.connect(dsn(pg_battery_url)) for _ in range(K)]
    probe = stores[0]
    conflicts = 0
    try:
        for round_ in range(ROUNDS):
            run = RunId.generate()
            await probe.append(1, [admitted(run)])
            appended, rogue_results = await _race_round(stores, rogues, run, round_ * K)
            wrong = [
                r
                for r in appended
                if isinstance(r, BaseException) and not isinstance(r, AppendConflictError)
            ]
            assert not wrong, f"round {round_}: {wrong[:3]}"
            assert all(isinstance(r, list) for r in rogue_results), rogue_results[:3]
            rogue_wrote = sum(r.count("wrote") for r in rogue_results)
            conflicts += sum(isinstance(r, AppendConflictError) for r in appended)
            records = await probe.read(run)
            assert [r.seq for r in records] == list(range(1, len(records) + 1))
            assert await probe.verify(run) == records[-1].hash
            landed = sum(isinstance(r, list) for r in appended)
            assert sum(r.kind == "EffectStarted" for r in records) == landed
            assert len(records) == 1 + landed + rogue_wrote
            if conflicts:
                break
        assert conflicts, f"no append ever collided with a rogue writer in {ROUNDS} rounds"
    finally:
        for conn in rogues:
            await conn.close()


async def _violations(url: str) -> dict[str, BaseException]:
    """Real unique violations as SQLAlchemy raises them: the journal's exactly-once index,
    the journal's primary key, and ``run_activity``'s primary key (not the journal's)."""
    engine = create_async_engine(url)
    tenant = f"v{uuid.uuid4().hex[:10]}"
    run = RunId.generate()
    store = SqlJournalStore(engine, tenant=tenant)
    caught: dict[str, BaseException] = {}
    try:
        await store.append(1, [started(run, key(1))])
        row = (await store.read(run))[0]
        base = {
            "tenant": tenant,
            "run_id": str(run),
            "epoch": 1,
            "prev_hash": bytes(row.prev_hash),
            "hash": bytes(row.hash),
            "raw": row.raw,
        }
        statements = {
            "effect": insert(Journal).values(
                **base, seq=2, kind="EffectStarted", effect_key=key(1).hex()
            ),
            "position": insert(Journal).values(**base, seq=1, kind="Note", effect_key=None),
            "elsewhere": text(
                "INSERT INTO run_activity (tenant, run_id, updated_at) VALUES (:t, :r, 0)"
            ).bindparams(t=tenant, r=str(run)),
        }
        for name, statement in statements.items():
            async with engine.connect() as conn:
                with pytest.raises(IntegrityError) as error:
                    await conn.execute(statement)
                caught[name] = error.value
                await conn.rollback()
    finally:
        await engine.dispose()
    return caught


async def test_the_classifier_reads_the_constraint_name_from_each_driver(
    database_url: str, dialect: str
) -> None:
    """Both dialects, both error shapes (SQLAlchemy's ``IntegrityError`` and the driver's own,
    as the hot paths see it): the index name decides, and another table's key is not ours."""
    caught = await _violations(database_url)
    assert set(caught) == {"effect", "position", "elsewhere"}
    engine = create_async_engine(database_url)
    d = dialect_for(engine)
    await engine.dispose()
    for name, expected in (
        ("effect", (Collision.EFFECT_STARTED, "journal_effect_started")),
        ("position", (Collision.CHAIN_POSITION, "journal_pkey")),
        ("elsewhere", None),
    ):
        exc = caught[name]
        driver = getattr(exc, "driver_exception", None) or exc.orig  # type: ignore[attr-defined]
        assert journal_collision(d, exc) == expected, name
        assert journal_collision(d, driver) == expected, name
    if dialect == "sqlite":
        # What SQLite says, for the record: no index name, the columns.
        assert "journal.tenant, journal.run_id, journal.effect_key" in str(caught["effect"])
        assert "journal.tenant, journal.run_id, journal.seq" in str(caught["position"])
    # Not a unique violation at all: nothing.
    assert journal_collision(d, ValueError("no")) is None


def test_sqlite_names_the_unique_index_by_its_columns_when_a_table_has_several() -> None:
    """SQLite reports a unique index by its columns (a partial one too), or as ``index 'x'``
    for one on expressions; with two unique indexes on one table the columns decide."""
    from sqlalchemy import Column, Index, Integer, MetaData, Table
    from sqlalchemy import text as sql_text

    metadata = MetaData()
    table = Table(
        "pair",
        metadata,
        Column("id", Integer, primary_key=True),
        Column("a", Integer),
        Column("b", Integer),
        Index("pair_a", "a", unique=True, sqlite_where=sql_text("a > 0")),
        Index("pair_b", "b", unique=True),
    )
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE pair (id INTEGER PRIMARY KEY, a INTEGER, b INTEGER)")
    conn.execute("CREATE UNIQUE INDEX pair_a ON pair (a) WHERE a > 0")
    conn.execute("CREATE UNIQUE INDEX pair_b ON pair (b)")
    conn.execute("INSERT INTO pair VALUES (1, 1, 1)")
    d = SqliteDialect()
    found = {}
    for label, row in (("a", (2, 1, 2)), ("b", (3, 3, 1)), ("pk", (1, 4, 4))):
        with pytest.raises(sqlite3.IntegrityError) as caught:
            conn.execute("INSERT INTO pair VALUES (?, ?, ?)", row)
        found[label] = d.constraint(caught.value, table)
    assert found == {"a": "pair_a", "b": "pair_b", "pk": table.primary_key.name}
    conn.close()
    assert PostgresDialect().constraint(ValueError("x"), table) is None


# -- is_shared ------------------------------------------------------------------------------


async def test_is_shared_says_whether_other_processes_can_append(
    make_store: Callable[..., Any], dialect: str
) -> None:
    store = await make_store()
    # PostgreSQL: a server. A SQLite file: several processes append to it safely
    # (test_sqlite_processes.py). The answer is about the database, so every handle agrees.
    assert store.is_shared() is True
    assert store.for_tenant("acme").is_shared() is True


@pytest.mark.parametrize(
    "url",
    [
        "sqlite+aiosqlite://",
        "sqlite+aiosqlite:///:memory:",
        "sqlite+aiosqlite:///file:journal?mode=memory&cache=shared&uri=true",
    ],
)
async def test_an_in_memory_sqlite_store_is_not_shared(url: str) -> None:
    """Nothing outside this process can reach an in-memory database; deciding that runs no
    statement (the engine never connects)."""
    engine = create_async_engine(url, poolclass=StaticPool)
    opened: list[Any] = []
    event.listen(engine.sync_engine, "connect", lambda *a: opened.append(a))
    try:
        assert SqlJournalStore(engine).is_shared() is False
        assert opened == []
    finally:
        await engine.dispose()


@pytest.mark.parametrize(
    ("url", "shared"),
    [
        ("sqlite+aiosqlite:///journal.db", True),
        ("sqlite+aiosqlite:////var/lib/app/journal.db", True),
        ("sqlite+aiosqlite:///file:journal.db?uri=true", True),
        ("sqlite+aiosqlite:///file:journal.db?mode=ro&uri=true", True),
        ("sqlite+aiosqlite://", False),
        ("sqlite+aiosqlite:///:memory:", False),
        ("sqlite+aiosqlite:///file::memory:?uri=true", False),
        ("sqlite+aiosqlite:///file:journal?mode=memory&cache=shared&uri=true", False),
        ("sqlite+aiosqlite:///file:?mode=memory&uri=true", False),
        ("postgresql+asyncpg://u@h/db", True),
    ],
)
def test_the_dialect_object_decides_is_shared_from_the_url(url: str, shared: bool) -> None:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    dialect: Any = (
        PostgresDialect() if parsed.get_backend_name() == "postgresql" else SqliteDialect()
    )
    assert dialect.is_shared(parsed) is shared


# -- the discovery index pages in a total order --------------------------------------------


async def test_the_discovery_index_pages_in_a_total_order(
    store: SqlJournalStore, clock: FakeClock
) -> None:
    """Runs written in the same second tie on ``updated_at`` (the clock has whole seconds on
    both databases, so ties are ordinary): ``recent_runs`` orders by ``(updated_at, run)``
    descending, the limit is a limit, and paging two at a time reassembles the index exactly,
    every run once, whatever page boundary falls inside a tie."""
    written: list[RunId] = []
    for i in range(9):
        if i in (4, 7):
            clock.advance(1)  # three groups of ties: 4, 3 and 2 runs
        run = RunId.generate()
        await store.append(1, [admitted(run)])
        written.append(run)
    whole = await store.recent_runs(limit=100)
    assert {r for r, _ in whole} == set(written) and len(whole) == 9
    assert whole == sorted(whole, key=lambda p: (p[1], str(p[0])), reverse=True)
    assert len({at for _, at in whole}) == 3  # the ties are real
    assert len(await store.recent_runs(limit=2)) == 2
    for size in (1, 2, 3, 4):
        paged: list[tuple[RunId, int]] = []
        after = None
        while page := await store.recent_runs(after=after, limit=size):
            assert len(page) <= size
            paged.extend(page)
            after = page[-1]
        assert paged == whole, f"pages of {size} did not reassemble the index"
    # A cursor in the middle of a tie resumes strictly below it.
    first_tie = [p for p in whole if p[1] == whole[0][1]]
    below = await store.recent_runs(after=first_tie[1], limit=100)
    assert below == whole[2:]


async def test_refusals_are_store_errors_a_caller_can_branch_on() -> None:
    error = AppendConflictError(RunId.generate(), 3, "journal_pkey")
    assert isinstance(error, StoreError) and not isinstance(error, DuplicateEffectError)
    assert error.seq == 3 and error.constraint == "journal_pkey"
    assert "nothing of this batch was written" in str(error)
