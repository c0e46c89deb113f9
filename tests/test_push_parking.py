"""Parking push registrations (issue 21, item 6), on SQLite and PostgreSQL.

agentplane 0.22.0 fixed "abandoning a push registration deleted the only cursor there was":
a receiver that answered permanently, or stayed silent past the retry ceiling, had its row
deleted, and with it the only record of how far that receiver got. Its push store now
parks such a row. Its conformance battery has no push checks, so the checks below restate
the push store's parking semantics (``src/store/postgres_push.rs``) in our own words:

* a parked registration keeps its cursor, is never served by ``due`` and is listed by
  ``parked``, in key order; parking counts the failed attempt and keeps the reason;
* ``unpark`` re-arms one at a given time, from the record never acknowledged, with its
  attempts reset; it answers whether it re-armed anything;
* ``put``, ``advance`` and ``retry`` re-arm a parked registration (the latest word wins);
* ``due`` serves the longest-due first, ties broken by (task, config id), and its query is
  served by the partial due index;
* a ``parked`` flag someone edited is reported, never guessed at, and the downgrade below
  the revision that added the flag refuses while a registration is parked.

The race (a parked row is never served once ``park`` has returned) is in
``test_push_races.py``. Every test runs with every logger at DEBUG, and no secret may
appear in any record (as in ``test_push.py``).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from agentplane_journal import CorruptRegistrationError, RunId
from agentplane_journal.db.models import VERSION_TABLE
from agentplane_journal.db.revision import HEAD_REVISION
from agentplane_journal.push.store import SqlPushStore
from agentplane_journal.push.values import MAX_ERROR_BYTES, PushRegistration

from support import logcheck
from support.migration_tools import alembic_ok, catalog, query, run_alembic, table_contents
from support.push import KEYS, SECRETS, config, full, key, sql, state
from support.stores import store_factory

MAX_ATTEMPTS = 2**31 - 1
LOG_TREE = "0002_log_tree"
VERSIONS = f"SELECT version_num FROM {VERSION_TABLE}"


@pytest.fixture(autouse=True)
def no_secret_in_logs() -> Iterator[logcheck.Capture]:
    with logcheck.no_secret_logged(SECRETS, KEYS) as capture:
        yield capture


@pytest.fixture
async def make_push(database_url: str, clock: Any) -> AsyncIterator[Callable[..., Any]]:
    async with store_factory(
        SqlPushStore, database_url, f"t{uuid.uuid4().hex[:12]}", clock
    ) as make:
        yield make


@pytest.fixture
async def push(make_push: Callable[..., Any]) -> SqlPushStore:
    return await make_push(secret_key=key())


@pytest.fixture
def private_url(
    dialect: str, request: pytest.FixtureRequest, sqlite_database: Callable[..., str]
) -> str:
    """A migrated database of this test's own (its schema may be changed or downgraded)."""
    if dialect == "sqlite":
        return sqlite_database()
    return request.getfixturevalue("pg_database")()


async def flag(store: SqlPushStore, task: RunId, id: str = "cfg") -> Any:
    """The stored ``parked`` value of one registration, as plain SQL reads it."""
    rows = await sql(
        store,
        "SELECT parked FROM push_delivery WHERE tenant = :t AND task_id = :task "
        "AND config_id = :id",
        t=store.tenant,
        task=str(task),
        id=id,
    )
    return rows[0][0]


async def set_flag(store: SqlPushStore, id: str, value: Any) -> None:
    await sql(
        store,
        "UPDATE push_delivery SET parked = :v WHERE tenant = :t AND config_id = :id",
        v=value,
        t=store.tenant,
        id=id,
    )


def ids(regs: list[PushRegistration]) -> list[str]:
    return [r.config.id for r in regs]


FAR = 10**12  # an `at` by which every registration of these tests is due


# -- park, parked, unpark ----------------------------------------------------------------


async def test_a_parked_registration_keeps_its_cursor_and_is_never_due(
    push: SqlPushStore,
) -> None:
    task = RunId.generate()
    await push.put(full(task), 3)
    await push.put(full(task, "bystander"), 1)
    await push.advance(task, "cfg", 7)
    await push.retry(task, "cfg", 40, "HTTP 503")

    assert await push.park(task, "cfg", "HTTP 410 Gone") is None
    # The cursor and the next attempt time stay; the failed attempt counts; the reason stays.
    assert await state(push, task) == (7, 2, 40, "HTTP 410 Gone")
    assert bool(await flag(push, task)) is True
    assert ids(await push.due(FAR, 10)) == ["bystander"]
    assert ids(await push.due(40, 10)) == ["bystander"]
    # The registration itself is still there: get and list still answer it.
    assert await push.get(task, "cfg") == full(task)
    assert [c.id for c in await push.list(task)] == ["bystander", "cfg"]

    [reg] = await push.parked(10)
    assert reg == PushRegistration(full(task), 7, 2, 40, "HTTP 410 Gone", parked=True)
    assert (await push.parked(10)).unavailable == ()
    [served] = await push.due(FAR, 10)
    assert served.parked is False and served.config.id == "bystander"

    # Parking again counts again; the reason is the latest one.
    await push.park(task, "cfg", "still gone")
    assert await state(push, task) == (7, 3, 40, "still gone")


async def test_unpark_rearms_from_the_record_never_acknowledged(push: SqlPushStore) -> None:
    task = RunId.generate()
    await push.put(full(task), 5)
    await push.advance(task, "cfg", 9)
    for n in range(3):
        await push.retry(task, "cfg", 100 + n, f"timeout {n}")
    await push.park(task, "cfg", "past the ceiling")
    assert await state(push, task) == (9, 4, 102, "past the ceiling")

    assert await push.unpark(task, "cfg", 500) is True
    # Due at the given time, attempts counted afresh, the cursor and the reason kept.
    assert await state(push, task) == (9, 0, 500, "past the ceiling")
    assert bool(await flag(push, task)) is False
    assert await push.parked(10) == []
    assert await push.due(499, 10) == []
    [reg] = await push.due(500, 10)
    assert (reg.next_seq, reg.attempts, reg.parked) == (9, 0, False)

    # Nothing parked by that name: False, and nothing changes.
    assert await push.unpark(task, "cfg", 7) is False
    assert await state(push, task) == (9, 0, 500, "past the ceiling")
    assert await push.unpark(task, "missing", 7) is False
    assert await push.unpark(RunId.generate(), "cfg", 7) is False
    # Unparking to "now" (0) makes it due at once.
    await push.park(task, "cfg", "again")
    assert await push.unpark(str(task), "cfg", 0) is True
    assert ids(await push.due(0, 10)) == ["cfg"]


async def test_put_advance_and_retry_rearm_a_parked_registration(push: SqlPushStore) -> None:
    """agentplane 0.22.0's rule: the latest word about a registration wins."""
    task = RunId.generate()
    for id in ("put", "advance", "retry", "delete"):
        await push.put(full(task, id), 4)
        await push.park(task, id, "gone")
    assert ids(await push.parked(10)) == ["advance", "delete", "put", "retry"]
    assert await push.due(FAR, 10) == []

    await push.put(full(task, "put"), 99)  # re-registering: due at once, cursor kept
    await push.advance(task, "advance", 6)  # the receiver answered after all
    await push.retry(task, "retry", 30, "HTTP 503")  # keep trying
    await push.delete(task, "delete")  # the operator's removal: row and cursor gone

    assert [
        (r.config.id, r.next_seq, r.attempts, r.next_attempt_at) for r in await push.due(FAR, 10)
    ] == [
        ("advance", 6, 0, 0),
        ("put", 4, 0, 0),
        ("retry", 4, 2, 30),
    ]
    assert await push.parked(10) == []
    assert await push.get(task, "delete") is None


async def test_parked_is_bounded_and_pages_in_key_order(push: SqlPushStore) -> None:
    tasks = sorted(RunId.generate() for _ in range(4))
    parked: list[tuple[RunId, str]] = []
    rng = random.Random(21)
    for task in tasks:
        for id in ("b", "a", "c"):
            await push.put(config(task, id), 1)
            if rng.random() < 0.6:
                await push.park(task, id, "gone")
                parked.append((task, id))
    parked.sort()
    assert len(parked) >= 3

    listed = await push.parked(len(parked) + 5)
    assert [(r.config.task, r.config.id) for r in listed] == parked
    assert all(r.parked for r in listed)
    assert ids(await push.parked(2)) == [id for _, id in parked[:2]]
    assert await push.parked(0) == []

    # Paging with `after` (the last pair of the previous page) reassembles the list: no
    # registration twice, none skipped, including after one is unparked between pages.
    pages: list[tuple[RunId, str]] = []
    after: tuple[RunId, str] | None = None
    while page := await push.parked(2, after=after):
        pages += [(r.config.task, r.config.id) for r in page]
        after = (page[-1].config.task, page[-1].config.id)
    assert pages == parked
    first = await push.parked(1)
    await push.unpark(parked[0][0], parked[0][1], 0)
    rest = await push.parked(10, after=(first[0].config.task, first[0].config.id))
    assert [(r.config.task, r.config.id) for r in rest] == parked[1:]
    # The text form of a task is accepted as after's task, as everywhere.
    assert ids(await push.parked(10, after=(str(parked[0][0]), parked[0][1]))) == [
        id for _, id in parked[1:]
    ]


async def test_park_counts_like_retry_and_keeps_a_bounded_reason(push: SqlPushStore) -> None:
    task = RunId.generate()
    await push.put(config(task), 1)
    await sql(
        push,
        "UPDATE push_delivery SET attempts = :n WHERE tenant = :t",
        n=MAX_ATTEMPTS - 1,
        t=push.tenant,
    )
    await push.park(task, "cfg", "é" * 5000)
    assert await state(push, task) == (1, MAX_ATTEMPTS, 0, "é" * (MAX_ERROR_BYTES // 2))
    await push.park(task, "cfg", "bad\x00byte")  # saturates instead of overflowing
    assert await state(push, task) == (1, MAX_ATTEMPTS, 0, "bad\ufffdbyte")
    [reg] = await push.parked(1)
    assert reg.attempts == MAX_ATTEMPTS


async def test_unknown_registrations_and_other_tenants_are_untouched(push: SqlPushStore) -> None:
    other = push.for_tenant("other-" + push.tenant)
    task = RunId.generate()
    await push.put(full(task), 3)
    await other.park(task, "cfg", "not yours")
    await push.park(task, "missing", "nothing here")
    await push.park(RunId.generate(), "cfg", "nothing here")
    assert await other.parked(10) == []
    assert await other.unpark(task, "cfg", 0) is False
    assert await state(push, task) == (3, 0, 0, None)
    assert ids(await push.due(0, 10)) == ["cfg"]

    await push.park(task, "cfg", "gone")
    assert await other.parked(10) == [] and await other.unpark(task, "cfg", 0) is False
    assert ids(await push.parked(10)) == ["cfg"]


async def test_bad_arguments_are_refused_before_the_database(push: SqlPushStore) -> None:
    task = RunId.generate()
    await push.put(config(task), 5)
    refused: list[tuple[type[Exception], Callable[[], Any]]] = [
        (TypeError, lambda: push.park(task, "cfg", None)),  # type: ignore[arg-type]
        (ValueError, lambda: push.park(task, "", "e")),
        (ValueError, lambda: push.park("run_nonsense", "cfg", "e")),
        (ValueError, lambda: push.unpark(task, "cfg", -1)),
        (TypeError, lambda: push.unpark(task, "cfg", 1.5)),  # type: ignore[arg-type]
        (ValueError, lambda: push.unpark(task, "cfg", 2**63)),
        (ValueError, lambda: push.parked(-1)),
        (TypeError, lambda: push.parked(True)),
        (TypeError, lambda: push.parked(10, after=str(task))),  # type: ignore[arg-type]
        (TypeError, lambda: push.parked(10, after=(task,))),  # type: ignore[arg-type]
        (ValueError, lambda: push.parked(10, after=("not-a-run", "cfg"))),
        (ValueError, lambda: push.parked(10, after=(task, "a\x00b"))),
    ]
    for error, call in refused:
        with pytest.raises(error):
            await call()
    assert await state(push, task) == (5, 0, 0, None)
    assert bool(await flag(push, task)) is False
    with pytest.raises(TypeError, match="parked must be True or False"):
        PushRegistration(config(task), 1, 0, 0, None, parked=1)  # type: ignore[arg-type]


async def test_parking_joins_the_hosts_transaction(push: SqlPushStore) -> None:
    task = RunId.generate()
    await push.put(full(task), 2)
    sessions = async_sessionmaker(push.engine, expire_on_commit=False)
    async with sessions() as session:
        await push.park(task, "cfg", "gone", session=session)
        assert ids(await push.parked(10, session=session)) == ["cfg"]
        assert await push.due(FAR, 10, session=session) == []
        await session.rollback()
    assert bool(await flag(push, task)) is False
    assert ids(await push.due(FAR, 10)) == ["cfg"]

    session2: AsyncSession
    async with sessions() as session2, session2.begin():
        await push.park(task, "cfg", "gone", session=session2)
    assert ids(await push.parked(10)) == ["cfg"]
    async with sessions() as session2:
        assert await push.unpark(task, "cfg", 0, session=session2) is True
        await session2.rollback()
    assert ids(await push.parked(10)) == ["cfg"]


# -- what abandoning does now ------------------------------------------------------------------


async def test_a_worker_that_gives_up_parks_and_the_tail_is_delivered_after_unpark(
    push: SqlPushStore,
) -> None:
    """The 0.22.0 fix as a scenario: a receiver down past the ceiling loses nothing.

    The worker's policy (the docs' example): a permanent answer, or a failure that reaches
    the ceiling, parks; anything else retries. Before 0.22.0 that branch deleted the row.
    """
    ceiling = 3
    task = RunId.generate()
    await push.put(full(task), 1)
    await push.advance(task, "cfg", 4)  # records 1..3 acknowledged
    now = 0
    for _ in range(10):
        due = await push.due(now, 10)
        if not due:
            break
        [reg] = due
        if reg.attempts + 1 >= ceiling:
            await push.park(task, "cfg", f"no answer after {ceiling} attempts")
        else:
            await push.retry(task, "cfg", now + 2**reg.attempts, "timeout")
        now += 100
    assert await push.due(now, 10) == []
    [parked] = await push.parked(10)
    assert (parked.next_seq, parked.attempts) == (4, ceiling)
    assert parked.last_error == f"no answer after {ceiling} attempts"

    # The receiver is back: the operator re-arms it and delivery resumes at seq 4.
    assert await push.unpark(task, "cfg", now) is True
    [reg] = await push.due(now, 10)
    assert (reg.next_seq, reg.attempts, reg.parked) == (4, 0, False)

    # A permanent answer parks at once, whatever the attempts.
    await push.park(task, "cfg", "HTTP 410 Gone")
    assert ids(await push.parked(10)) == ["cfg"]
    # The operator's explicit delete is still there, and it does drop the cursor.
    await push.delete(task, "cfg")
    assert await push.parked(10) == [] and await push.get(task, "cfg") is None


# -- due's order and its index -----------------------------------------------------------------


async def test_due_serves_the_longest_due_first_whatever_the_name(push: SqlPushStore) -> None:
    """Starvation by name: a receiver whose key sorts last is still served when it has
    waited longest, and ties on the time are broken by (task, config id)."""
    early, late = sorted([RunId.generate(), RunId.generate()])
    for n in range(5):
        await push.put(config(early, f"a{n}"), 1)
        await push.retry(early, f"a{n}", 10 + n, "e")
    await push.put(config(late, "z"), 1)
    await push.retry(late, "z", 3, "e")  # due longest
    await push.put(config(late, "y"), 1)
    await push.retry(late, "y", 10, "e")  # ties with early/a0: task breaks the tie
    await push.put(config(early, "b"), 1)
    await push.retry(early, "b", 10, "e")  # ties with early/a0: the config id breaks it
    await push.put(config(early, "0-parked"), 1)
    await push.park(early, "0-parked", "gone")  # due at 0 if it were not parked

    [first] = await push.due(100, 1)
    assert (first.config.task, first.config.id) == (late, "z")
    order = [(r.next_attempt_at, r.config.task, r.config.id) for r in await push.due(100, 100)]
    assert order == sorted(order)
    assert order[:4] == [(3, late, "z"), (10, early, "a0"), (10, early, "b"), (10, late, "y")]
    assert "0-parked" not in [id for _, _, id in order]


async def due_statements(push: SqlPushStore) -> list[tuple[str, Any]]:
    """The SELECTs ``due`` runs, as sent to the driver."""
    seen: list[tuple[str, Any]] = []

    def grab(conn: Any, cursor: Any, statement: str, params: Any, *args: Any) -> None:
        if statement.lstrip().startswith("SELECT") and "push_delivery" in statement:
            seen.append((statement, params))

    event.listen(push.engine.sync_engine, "before_cursor_execute", grab)
    try:
        await push.due(FAR, 10)
    finally:
        event.remove(push.engine.sync_engine, "before_cursor_execute", grab)
    return seen


async def test_due_is_served_by_the_partial_due_index(push: SqlPushStore, dialect: str) -> None:
    """Both of due's queries walk ``push_delivery_due`` in order: no scan, no sort.

    The index is partial (``WHERE NOT parked``); a query the planner cannot prove implies
    that predicate could not use it at all. On PostgreSQL the planner is told to avoid
    sequential scans, bitmap scans and sorts, so only the due index can serve it sorted.
    """
    task = RunId.generate()
    for n in range(3):
        await push.put(config(task, f"c{n}"), 1)
    await push.park(task, "c1", "gone")
    statements = await due_statements(push)
    assert len(statements) == 2  # the due page and the SQLite type check
    async with push.engine.connect() as conn:
        for statement, params in statements:
            assert "NOT parked" in statement
            if dialect == "sqlite":
                plan = [
                    r[-1]
                    for r in await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)
                ]
                assert plan == [plan[0]] and plan[0].startswith(
                    "SEARCH push_delivery USING INDEX push_delivery_due (tenant=? AND "
                ), plan
            else:
                for setting in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
                    await conn.exec_driver_sql(f"SET LOCAL {setting} = off")
                raw = await conn.get_raw_connection()
                rows = await raw.driver_connection.fetch(  # type: ignore[union-attr]
                    "EXPLAIN " + statement, *params
                )
                plan = [r[0] for r in rows]
                assert any("Index Scan using push_delivery_due" in line for line in plan), plan
                assert not any("Sort" in line or "Seq Scan" in line for line in plan), plan
        await conn.rollback()


# -- hostile rows: a flag someone edited -------------------------------------------------------


async def test_a_flipped_flag_delays_or_resumes_delivery_and_leaks_nothing(
    push: SqlPushStore,
) -> None:
    """What a lie in ``parked`` costs: a delivery delayed, or resumed from the kept cursor."""
    task = RunId.generate()
    await push.put(full(task, "running"), 5)
    await push.put(full(task, "stopped"), 8)
    await push.park(task, "stopped", "gone")

    await set_flag(push, "running", True)
    await set_flag(push, "stopped", False)
    [resumed] = await push.due(FAR, 10)
    # Resumed where its receiver stopped acknowledging: duplicates at most, no gap.
    assert (resumed.config, resumed.next_seq, resumed.parked) == (full(task, "stopped"), 8, False)
    [delayed] = await push.parked(10)
    assert (delayed.config, delayed.next_seq) == (full(task, "running"), 5)
    assert await push.unpark(task, "running", 0) is True
    assert ids(await push.due(FAR, 10)) == ["running", "stopped"]


async def test_an_edited_flag_is_reported_never_guessed(
    push: SqlPushStore, dialect: str, no_secret_in_logs: logcheck.Capture
) -> None:
    """On SQLite any value fits in the column; each odd one is a CorruptRegistrationError
    in the ``.unavailable`` of every listing that meets it, and ``unpark`` repairs it."""
    if dialect != "sqlite":
        pytest.skip("PostgreSQL's boolean column holds true and false only (NULL: below)")
    task = RunId.generate()
    await push.put(full(task, "good"), 1)
    odd: dict[str, Any] = {
        "two": 2,
        "minus-one": -1,
        "half": 0.5,
        "text-yes": "yes",
        "text-true": "true",
        "blob-one": b"\x01",
        "blob-zero": b"\x00",
        "huge": 2**62,
    }
    for id, value in odd.items():
        await push.put(full(task, id), 1)
        await set_flag(push, id, value)
    due = await push.due(FAR, 10)
    parked = await push.parked(10)
    assert ids(due) == ["good"] and parked == []
    reported: dict[str, set[str]] = {}
    for where, listing in (("due", due), ("parked", parked)):
        for u in listing.unavailable:
            assert isinstance(u.error, CorruptRegistrationError), u
            assert "parked flag" in u.reason and u.config_id in u.reason
            reported.setdefault(u.config_id, set()).add(where)
    # Every odd row is reported by one queue or both; none is served, none hidden.
    assert set(reported) == set(odd)
    assert "parked flag is 2," in str(next(u for u in parked.unavailable if u.config_id == "two"))
    assert any("a str" in u.reason for u in parked.unavailable)
    assert sum("left out of" in line for line in no_secret_in_logs.lines) >= len(odd)

    for id in odd:
        assert await push.unpark(task, id, 0) is True
    assert await flag(push, task, "two") == 0
    assert ids(await push.due(FAR, 20)) == sorted(["good", *odd])
    assert (await push.due(FAR, 20)).unavailable == ()


async def test_a_null_flag_is_reported_by_parked(private_url: str, dialect: str) -> None:
    """A NULL flag is neither parked nor ``NOT parked``: neither queue would serve it, so
    ``parked()`` reports it. It takes a schema change (NOT NULL dropped) to store one."""
    push = await SqlPushStore.connect(private_url, secret_key=key())
    try:
        task = RunId.generate()
        await push.put(full(task, "good"), 1)
        await push.put(full(task, "nulled"), 1)
        if dialect == "sqlite":
            with logcheck.current().paused():
                async with push.engine.begin() as conn:
                    await conn.exec_driver_sql("PRAGMA writable_schema = ON")
                    changed = await conn.exec_driver_sql(
                        "UPDATE sqlite_master SET sql = replace(sql, "
                        "'parked BOOLEAN DEFAULT false NOT NULL', 'parked BOOLEAN') "
                        "WHERE name = 'push_delivery'"
                    )
                    assert changed.rowcount == 1
            await push.engine.dispose()  # reopen: the edited schema is read afresh
        else:
            await sql(push, "ALTER TABLE push_delivery ALTER COLUMN parked DROP NOT NULL")
        await set_flag(push, "nulled", None)
        assert await flag(push, task, "nulled") is None

        assert ids(await push.due(FAR, 10)) == ["good"]
        listing = await push.parked(10)
        assert listing == []
        [bad] = listing.unavailable
        assert bad.config_id == "nulled" and isinstance(bad.error, CorruptRegistrationError)
        assert "parked flag is NULL" in bad.reason
        assert await push.unpark(task, "nulled", 0) is True
        assert ids(await push.due(FAR, 10)) == ["good", "nulled"]
    finally:
        await push.close()


# -- the downgrade below 0003 ------------------------------------------------------------------


@pytest.mark.slow
async def test_the_downgrade_refuses_while_a_registration_is_parked(private_url: str) -> None:
    """Dropping the column would make a parked registration due again: refused, nothing
    changed; once it is unparked the downgrade runs, and the cursor survives it."""
    task = RunId.generate()
    push = await SqlPushStore.connect(private_url)
    try:
        await push.put(config(task, "parked"), 7)
        await push.put(config(task, "running"), 3)
        await push.park(task, "parked", "gone")
    finally:
        await push.close()
    before = (await catalog(private_url), await table_contents(private_url, ["push_delivery"]))
    versions = await query(private_url, VERSIONS)
    assert versions == [(HEAD_REVISION,)]

    refused = run_alembic("downgrade", LOG_TREE, url=private_url)
    assert refused.returncode != 0
    assert "1 push registration(s) are parked" in refused.stderr
    assert "nothing was changed" in refused.stderr and "SqlPushStore.unpark" in refused.stderr
    after = (await catalog(private_url), await table_contents(private_url, ["push_delivery"]))
    assert after == before
    assert await query(private_url, VERSIONS) == (versions)

    push = await SqlPushStore.connect(private_url)
    try:
        assert await push.unpark(task, "parked", 0) is True
    finally:
        await push.close()
    alembic_ok("downgrade", LOG_TREE, url=private_url)
    assert await query(private_url, VERSIONS) == [(LOG_TREE,)]
    rows = await query(
        private_url,
        "SELECT config_id, next_seq, attempts FROM push_delivery ORDER BY config_id",
    )
    assert rows == [("parked", 7, 0), ("running", 3, 0)]
    assert "parked" not in str(await catalog(private_url))
    alembic_ok("upgrade", "head", url=private_url)  # and back: nothing parked
    assert await query(private_url, "SELECT count(*) FROM push_delivery WHERE parked") == [(0,)]
