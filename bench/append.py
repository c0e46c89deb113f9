"""Appends per second: this store against the bare driver, in the same run.

    python bench/append.py [--seconds 3] [--pg-url postgresql+asyncpg://...]

For each backend (SQLite file through aiosqlite; PostgreSQL through asyncpg, a throwaway
cluster started here unless --pg-url is given) and for 1 and 8 concurrent writers, each on
its own run:

* floor: the bare driver, one ``INSERT`` of a precomputed journal row per append, committed
  on its own (no ORM, no hashing, no checks): what the database costs at minimum;
* store: ``SqlJournalStore.append`` of one record per call (canonical JSON, chaining,
  fencing, the run mutex, activity, all in one transaction).

Prints appends/s for both and the ratio store/floor. A figure, never an assertion.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import aiosqlite
import asyncpg
from backends import postgres_backend, sqlite_backend

from agentplane_journal import Append, Digest, Record, RunId, SqlJournalStore

INSERT = (
    "INSERT INTO journal (tenant, run_id, seq, epoch, kind, effect_key, prev_hash, hash, raw,"
    " key_id, signature, case_id) VALUES ({})"
)
PAYLOAD = {"text": "a realistic note of a few dozen bytes", "step_output": {"ok": True, "n": 42}}


def row(tenant: str, run: RunId, seq: int) -> tuple:
    rec = Record.seal(Append(run, "Note", PAYLOAD).body(seq, 1), Digest.ZERO)
    return (
        tenant,
        str(run),
        seq,
        1,
        "Note",
        None,
        bytes(rec.prev_hash),
        bytes(rec.hash),
        rec.raw,
        None,
        None,
        None,
    )


async def timed(writers: int, seconds: float, one: object) -> float:
    """Run ``one(writer, i)`` in a loop on each writer for ``seconds``; appends per second."""
    deadline = time.perf_counter() + seconds
    counts = [0] * writers

    async def loop(w: int) -> None:
        i = 0
        while time.perf_counter() < deadline:
            i += 1
            await one(w, i)  # type: ignore[operator]
        counts[w] = i

    start = time.perf_counter()
    await asyncio.gather(*(loop(w) for w in range(writers)))
    return sum(counts) / (time.perf_counter() - start)


async def floor_sqlite(path: str, writers: int, seconds: float, tenant: str) -> float:
    conns = [await aiosqlite.connect(path, isolation_level=None) for _ in range(writers)]
    for c in conns:
        await c.execute("PRAGMA journal_mode=WAL")
        await c.execute("PRAGMA busy_timeout=30000")
    runs = [RunId.generate() for _ in range(writers)]
    sql = INSERT.format(", ".join("?" * 12))

    async def one(w: int, i: int) -> None:
        await conns[w].execute(sql, row(tenant, runs[w], i))  # autocommit: INSERT + COMMIT

    try:
        return await timed(writers, seconds, one)
    finally:
        for c in conns:
            await c.close()


async def floor_pg(dsn: str, writers: int, seconds: float, tenant: str) -> float:
    conns = [await asyncpg.connect(dsn) for _ in range(writers)]
    runs = [RunId.generate() for _ in range(writers)]
    sql = INSERT.format(", ".join(f"${i}" for i in range(1, 13)))

    async def one(w: int, i: int) -> None:
        await conns[w].execute(sql, *row(tenant, runs[w], i))  # autocommit: INSERT + COMMIT

    try:
        return await timed(writers, seconds, one)
    finally:
        for c in conns:
            await c.close()


async def store_rate(url: str, writers: int, seconds: float, tenant: str) -> float:
    store = await SqlJournalStore.connect(url, tenant=tenant)
    runs = [RunId.generate() for _ in range(writers)]

    async def one(w: int, i: int) -> None:
        await store.append(1, [Append(runs[w], "Note", PAYLOAD)])

    try:
        return await timed(writers, seconds, one)
    finally:
        await store.close()


async def bench(name: str, url: str, floor: object, seconds: float) -> None:
    for writers in (1, 8):
        f = await floor(writers, seconds, f"floor{writers}")  # type: ignore[operator]
        s = await store_rate(url, writers, seconds, f"store{writers}")
        print(
            f"{name:<10} {writers:>2} writer(s)  floor {f:>8.0f}/s   store {s:>8.0f}/s"
            f"   store/floor {s / f:5.2f}"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--pg-url", default=os.environ.get("AGENTPLANE_JOURNAL_BENCH_PG_URL"))
    args = parser.parse_args()

    async with sqlite_backend() as db:
        path = db.driver_target
        await bench(db.name, db.url, lambda w, s, t: floor_sqlite(path, w, s, t), args.seconds)
    async with postgres_backend(args.pg_url) as db:
        dsn = db.driver_target
        await bench(db.name, db.url, lambda w, s, t: floor_pg(dsn, w, s, t), args.seconds)


if __name__ == "__main__":
    asyncio.run(main())
