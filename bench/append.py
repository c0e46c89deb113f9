"""Appends per second: this store against the bare driver and eventsourcing, in one run.

    pip install -e '.[bench]'
    python bench/append.py [--seconds 1] [--rounds 7] [--pg-url postgresql+asyncpg://...]

For each backend (a SQLite file; PostgreSQL, a throwaway cluster started here with
``fsync``, ``synchronous_commit`` and ``full_page_writes`` on unless ``--pg-url`` is given)
and for 1 and 8 concurrent writers, each writer on its own run (or aggregate), one record of
~150 bytes per append, each append its own durable transaction:

* ``store``: ``SqlJournalStore.append`` of one record to a leased run (canonical JSON,
  chaining, fencing, the run mutex, activity, all in one transaction), as configured by
  default (group commit: concurrent appends share a commit; SQLite one transaction, each
  append in its own savepoint, PostgreSQL one statement, each run checked on its own);
* ``store nogroup``: the same with ``group_commit=False`` (each append its own commit;
  PostgreSQL: up to 8 statements in flight, one per writer);
* ``tx floor``: the bare driver, ``BEGIN`` / ``INSERT`` of a precomputed journal row /
  ``COMMIT`` (SQLite: ``BEGIN IMMEDIATE``): the least a transaction of one row costs;
* ``autocommit``: the bare driver, one autocommitted ``INSERT``: the least a row costs;
* ``sqlite3 tx`` (SQLite only): the same ``BEGIN IMMEDIATE`` / ``INSERT`` / ``COMMIT`` with
  the blocking ``sqlite3`` module, same pragmas, on one thread per writer as eventsourcing
  runs: no event loop and no thread hop, the physical floor of a durable SQLite append on
  this file system (one WAL write and its ``fsync`` per commit);
* ``es aggregate`` / ``es application``: eventsourcing's ``AggregateRecorder`` (one
  optimistic-concurrency insert, the same job as an append) and ``ApplicationRecorder``
  (the same plus its global notification order, what an eventsourcing ``Application`` uses),
  PostgreSQL through ``psycopg[binary]`` (its fastest driver), SQLite through ``sqlite3``;
  blocking APIs, so 8 writers are 8 threads.

Rounds are interleaved (every contender runs once per round, in a rotating order) so load
from elsewhere on the machine spreads over all of them; the table shows each contender's
median appends/s with its min-max over the rounds, then the ratios of the medians. The
durability settings each contender really ran with are printed first. Figures, never
assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import sqlite3
import statistics
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiosqlite
import asyncpg
from backends import Backend, postgres_backend, sqlite_backend
from sqlalchemy import text
from sqlalchemy.engine import make_url

from agentplane_journal import Append, Digest, Record, RunId, SqlJournalStore

COLUMNS = (
    "tenant, run_id, seq, epoch, kind, effect_key, prev_hash, hash, raw, key_id, signature, case_id"
)
INSERT = f"INSERT INTO journal ({COLUMNS}) VALUES ({{}})"
PAYLOAD = {"text": "a realistic note of a few dozen bytes", "step_output": {"ok": True, "n": 42}}
SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
RAW = Record.seal(Append(RunId.generate(), "Note", PAYLOAD).body(1, 1), Digest.ZERO).raw


def template(tenant: str, run: RunId) -> list[Any]:
    """A journal row for the bare-driver floors; only ``seq`` (index 2) changes per insert."""
    rec = Record.seal(Append(run, "Note", PAYLOAD).body(1, 1), Digest.ZERO)
    return [tenant, str(run), 1, 1, "Note", None, bytes(rec.prev_hash), bytes(rec.hash)]


def floor_row(base: list[Any], seq: int) -> tuple[Any, ...]:
    row = list(base)
    row[2] = seq
    return (*row, RAW, None, None, None)


# -- one contender: opened once per (backend, writers), then timed once per round ---------


@dataclass
class Contender:
    """``one(w)`` appends once for writer ``w`` (a coroutine function, or a blocking one
    run on one thread per writer); ``close()`` releases what ``open`` took."""

    name: str
    one: Callable[[int], Any]
    close: Callable[[], Awaitable[None]]
    settings: str = ""
    rates: list[float] = field(default_factory=list)


async def timed(contender: Contender, writers: int, seconds: float) -> float:
    """Run ``one(w)`` in a loop on each writer for ``seconds``; appends per second."""
    counts = [0] * writers
    if inspect.iscoroutinefunction(contender.one):
        deadline = time.perf_counter() + seconds

        async def loop(w: int) -> None:
            while time.perf_counter() < deadline:
                await contender.one(w)
                counts[w] += 1

        start = time.perf_counter()
        await asyncio.gather(*(loop(w) for w in range(writers)))
        return sum(counts) / (time.perf_counter() - start)

    def thread_loop(w: int, deadline: float) -> None:
        while time.perf_counter() < deadline:
            contender.one(w)
            counts[w] += 1

    def run_threads() -> float:
        start = time.perf_counter()
        threads = [
            threading.Thread(target=thread_loop, args=(w, start + seconds)) for w in range(writers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(counts) / (time.perf_counter() - start)

    return await asyncio.to_thread(run_threads)


# -- this store --------------------------------------------------------------------------


async def open_store(db: Backend, writers: int, *, group: bool = True) -> Contender:
    options = {"group_commit": group} if has_group_commit() else {}
    store = await SqlJournalStore.connect(db.url, tenant=f"store{uuid.uuid4().hex[:8]}", **options)
    runs = [RunId.generate() for _ in range(writers)]
    epochs = [(await store.acquire(r, f"writer-{w}", 3600)).epoch for w, r in enumerate(runs)]

    async def one(w: int) -> None:
        await store.append(epochs[w], [Append(runs[w], "Note", PAYLOAD)])

    settings = ""
    if db.name == "sqlite":
        async with store.engine.connect() as conn:
            mode = (await conn.execute(text("PRAGMA journal_mode"))).scalar()
            sync = (await conn.execute(text("PRAGMA synchronous"))).scalar()
            settings = f"journal_mode={mode}, synchronous={SYNCHRONOUS[sync]}"
    return Contender("store" if group else "store nogroup", one, store.close, settings)


# -- the bare driver ---------------------------------------------------------------------


async def open_sqlite_floor(db: Backend, writers: int, *, transaction: bool) -> Contender:
    conns = [
        await aiosqlite.connect(db.driver_target, isolation_level=None) for _ in range(writers)
    ]
    for c in conns:
        await c.execute("PRAGMA journal_mode=WAL")
        await c.execute("PRAGMA synchronous=FULL")
        await c.execute("PRAGMA busy_timeout=30000")
    tenant = f"floor{uuid.uuid4().hex[:8]}"
    bases = [template(tenant, RunId.generate()) for _ in range(writers)]
    seqs = [0] * writers
    sql = INSERT.format(", ".join("?" * 12))

    async def one(w: int) -> None:
        seqs[w] += 1
        if transaction:
            await conns[w].execute("BEGIN IMMEDIATE")
            await conns[w].execute(sql, floor_row(bases[w], seqs[w]))
            await conns[w].execute("COMMIT")
        else:
            await conns[w].execute(sql, floor_row(bases[w], seqs[w]))

    async def close() -> None:
        for c in conns:
            await c.close()

    name = "tx floor" if transaction else "autocommit"
    return Contender(name, one, close, "journal_mode=wal, synchronous=FULL (set)")


async def open_sqlite3_floor(db: Backend, writers: int) -> Contender:
    """The blocking floor: what eventsourcing's recorder pays, minus its own work."""
    conns = []
    for _ in range(writers):
        # Threads of each round are new: the connection is used from whichever thread runs.
        c = sqlite3.connect(db.driver_target, isolation_level=None, check_same_thread=False)
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=FULL")
        c.execute("PRAGMA busy_timeout=30000")
        conns.append(c)
    tenant = f"sqlite3{uuid.uuid4().hex[:8]}"
    bases = [template(tenant, RunId.generate()) for _ in range(writers)]
    seqs = [0] * writers
    sql = INSERT.format(", ".join("?" * 12))

    def one(w: int) -> None:
        seqs[w] += 1
        conn = conns[w]
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(sql, floor_row(bases[w], seqs[w]))
        conn.execute("COMMIT")

    async def close() -> None:
        for c in conns:
            c.close()

    return Contender("sqlite3 tx", one, close, "journal_mode=wal, synchronous=FULL (set)")


async def open_pg_floor(db: Backend, writers: int, *, transaction: bool) -> Contender:
    conns = [await asyncpg.connect(db.driver_target) for _ in range(writers)]
    tenant = f"floor{uuid.uuid4().hex[:8]}"
    bases = [template(tenant, RunId.generate()) for _ in range(writers)]
    seqs = [0] * writers
    sql = INSERT.format(", ".join(f"${i}" for i in range(1, 13)))

    async def one(w: int) -> None:
        seqs[w] += 1
        if transaction:
            async with conns[w].transaction():  # BEGIN, INSERT, COMMIT: three round trips
                await conns[w].execute(sql, *floor_row(bases[w], seqs[w]))
        else:
            await conns[w].execute(sql, *floor_row(bases[w], seqs[w]))

    async def close() -> None:
        for c in conns:
            await c.close()

    return Contender("tx floor" if transaction else "autocommit", one, close)


# -- eventsourcing -----------------------------------------------------------------------


async def open_eventsourcing(db: Backend, writers: int, *, application: bool) -> Contender:
    from eventsourcing.persistence import StoredEvent

    table = f"es_{'app' if application else 'agg'}_{uuid.uuid4().hex[:8]}"
    settings = ""
    if db.name == "sqlite":
        from eventsourcing.sqlite import (
            SQLiteAggregateRecorder,
            SQLiteApplicationRecorder,
            SQLiteDatastore,
        )

        datastore: Any = SQLiteDatastore(
            db_name=f"{db.scratch}/eventsourcing.db", pool_size=writers, max_overflow=0
        )
        cls: Any = SQLiteApplicationRecorder if application else SQLiteAggregateRecorder
        # eventsourcing sets no synchronous pragma: it runs at the build's default.
        with datastore.transaction(commit=False) as c:
            c.execute("PRAGMA journal_mode")
            mode = c.fetchone()[0]
            c.execute("PRAGMA synchronous")
            sync = SYNCHRONOUS[c.fetchone()[0]]
            settings = f"journal_mode={mode}, synchronous={sync} (the build's default; not set)"
    else:
        from eventsourcing.postgres import (
            PostgresAggregateRecorder,
            PostgresApplicationRecorder,
            PostgresDatastore,
        )

        url = make_url(db.url)
        datastore = PostgresDatastore(
            dbname=url.database or "postgres",
            host=url.host or "127.0.0.1",
            port=url.port or 5432,
            user=url.username or "postgres",
            password=url.password or "",
            pool_size=writers,
        )
        cls = PostgresApplicationRecorder if application else PostgresAggregateRecorder
    recorder = cls(datastore, events_table_name=table)
    await asyncio.to_thread(recorder.create_table)
    aggregates = [uuid.uuid4() for _ in range(writers)]
    versions = [0] * writers

    def one(w: int) -> None:
        versions[w] += 1
        recorder.insert_events(
            [StoredEvent(aggregates[w], versions[w], "bench:Note", RAW)]  # type: ignore[arg-type]
        )

    async def close() -> None:
        await asyncio.to_thread(datastore.close)

    return Contender(f"es {'application' if application else 'aggregate'}", one, close, settings)


# -- the run -----------------------------------------------------------------------------


def has_group_commit() -> bool:
    return "group_commit" in inspect.signature(SqlJournalStore.connect).parameters


async def open_all(db: Backend, writers: int) -> list[Contender]:
    floor = open_sqlite_floor if db.name == "sqlite" else open_pg_floor
    contenders = [
        await open_store(db, writers),
        await floor(db, writers, transaction=True),
        await floor(db, writers, transaction=False),
        await open_eventsourcing(db, writers, application=False),
        await open_eventsourcing(db, writers, application=True),
    ]
    if db.name == "sqlite":
        contenders.insert(3, await open_sqlite3_floor(db, writers))
    if has_group_commit():
        contenders.insert(1, await open_store(db, writers, group=False))
    return contenders


def cell(rates: list[float]) -> str:
    return f"{statistics.median(rates):>6.0f} ({min(rates):.0f}-{max(rates):.0f})"


async def bench(db: Backend, seconds: float, rounds: int) -> dict[int, dict[str, float]]:
    print(f"\n{db.name}: {db.settings}")
    medians: dict[int, dict[str, float]] = {}
    for writers in (1, 8):
        contenders = await open_all(db, writers)
        try:
            for c in contenders:  # warm-up: connections, statement caches, first pages
                await timed(c, writers, min(seconds, 0.3))
            for r in range(rounds):
                order = contenders[r % len(contenders) :] + contenders[: r % len(contenders)]
                for c in order:
                    c.rates.append(await timed(c, writers, seconds))
        finally:
            for c in contenders:
                await c.close()
        if writers == 1:
            for c in contenders:
                if c.settings:
                    print(f"  {c.name:<14} {c.settings}")
        print(f"  {writers} writer(s), appends/s, median (min-max) of {rounds} rounds:")
        for c in contenders:
            print(f"    {c.name:<14} {cell(c.rates)}")
        medians[writers] = {c.name: statistics.median(c.rates) for c in contenders}
    return medians


def ratios(name: str, medians: dict[int, dict[str, float]]) -> None:
    print(f"\n{name} ratios of medians:")
    for store in ("store", "store nogroup"):
        if store not in medians[1]:
            continue
        for writers in (1, 8):
            m = medians[writers]
            parts = [
                f"{m[store] / m[other]:.2f}x {other}"
                for other in m
                if not other.startswith("store")
            ]
            print(f"  {store:<12} {writers} writer(s): " + ", ".join(parts))
        print(f"  {store:<12} 8 writers / 1 writer: {medians[8][store] / medians[1][store]:.2f}x")
    floor, es = medians[1].get("sqlite3 tx"), medians[1].get("es aggregate")
    if floor and es:  # where the 1-writer target sits against the physical floor
        print(
            f"  1 writer: 1.2x es aggregate = {1.2 * es:.0f}/s"
            f" = {1.2 * es / floor:.2f}x the blocking sqlite3 tx floor ({floor:.0f}/s);"
            f" es aggregate itself {es / floor:.2f}x it"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--pg-url", default=os.environ.get("AGENTPLANE_JOURNAL_BENCH_PG_URL"))
    parser.add_argument("--only", choices=("sqlite", "postgresql"))
    args = parser.parse_args()

    results = {}
    if args.only in (None, "sqlite"):
        async with sqlite_backend() as db:
            results[db.name] = await bench(db, args.seconds, args.rounds)
    if args.only in (None, "postgresql"):
        async with postgres_backend(args.pg_url) as db:
            results[db.name] = await bench(db, args.seconds, args.rounds)
    for name, medians in results.items():
        ratios(name, medians)


if __name__ == "__main__":
    asyncio.run(main())
