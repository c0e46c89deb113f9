"""Reading and verifying a long run: time and peak memory, against the bare driver.

    python bench/read.py [--records 20000] [--pg-url postgresql+asyncpg://...]

For one run of N records on each backend (SQLite file; PostgreSQL, a throwaway cluster
started here unless --pg-url is given):

* floor: the bare driver fetching the run's rows (no hashing, no decoding);
* read: ``SqlJournalStore.read`` (every row re-hashed and decoded into a ``Record``);
* verify: ``SqlJournalStore.verify`` (read, then contiguity and links; each row hashed once).

The three are timed in interleaved rounds (``--rounds``; the machine may be shared): each
line gives the best and the median rate, the peak Python memory (tracemalloc, a separate
call), and the time as a multiple of the floor's (best over best, and the median over the
rounds of each round's ratio).

Then issue 32's two read targets, interleaved too: a short run's ``store.read`` (10
records, ``--short-calls`` reads a round) against a bare ``SELECT`` of its rows on a kept
connection (target: at most 4x), and read + verify in records/s against the bare read +
SHA-256 + ``json.loads`` of every row (target: 100k/s on SQLite). The machine's load
average is printed. Figures, never assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import aiosqlite
import asyncpg
from backends import postgres_backend, sqlite_backend

from agentplane_journal import Append, RunId, SqlJournalStore

SELECT = (
    "SELECT seq, prev_hash, hash, raw, key_id, signature FROM journal"
    " WHERE tenant = {} AND run_id = {} ORDER BY seq"
)
PAYLOAD = {"text": "a realistic note of a few dozen bytes", "step_output": {"ok": True, "n": 42}}


async def seconds(fn: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def cpu_seconds(fn: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """Wall and CPU seconds of one call; the CPU time is the whole process's (the driver's
    thread included), which a loaded machine's other processes do not inflate as they do
    the wall time."""
    start, cpu = time.perf_counter(), time.process_time()
    await fn()
    return time.perf_counter() - start, time.process_time() - cpu


async def peak_mib(fn: Callable[[], Awaitable[Any]]) -> float:
    """Peak traced Python memory of one call (tracemalloc slows it down; timed apart)."""
    tracemalloc.start()
    try:
        await fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


async def bench(
    name: str, url: str, floor: Callable[[str], Awaitable[Any]], n: int, rounds: int
) -> None:
    store = await SqlJournalStore.connect(url)
    run = RunId.generate()
    for start in range(0, n, 1000):
        await store.append(1, [Append(run, "Note", PAYLOAD) for _ in range(min(1000, n - start))])
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "floor": lambda: floor(str(run)),
        "read": lambda: store.read(run),
        "verify": lambda: store.verify(run),
    }
    for fn in calls.values():  # warm: connections, statement caches
        await fn()
    # Interleaved rounds (the machine is shared): each round times every call once, so a
    # burst of someone else's load lands on all of them; the ratio of each round is kept too.
    times: dict[str, list[float]] = {label: [] for label in calls}
    ratios: dict[str, list[float]] = {label: [] for label in calls}
    for _ in range(rounds):
        this = {label: await seconds(fn) for label, fn in calls.items()}
        for label, s in this.items():
            times[label].append(s)
            ratios[label].append(s / this["floor"])
    memory = {label: await peak_mib(fn) for label, fn in calls.items()}
    await store.close()
    base = min(times["floor"])
    for label in calls:
        best, median = min(times[label]), statistics.median(times[label])
        head = f"{name} {n}" if label == "floor" else ""
        line = (
            f"{head:<17} {label:>6}  best {best:6.3f}s {n / best:>9,.0f}/s"
            f"  median {n / median:>9,.0f}/s {memory[label]:6.1f} MiB"
        )
        if label != "floor":
            line += (
                f"  x{best / base:4.1f} (rounds' median x{statistics.median(ratios[label]):4.1f})"
                f" memory x{memory[label] / memory['floor']:4.1f}"
            )
        print(line)


async def short_bench(
    name: str,
    url: str,
    bare: Callable[[str], Awaitable[list[Any]]],
    rounds: int,
    calls: int,
    long_run: int,
) -> None:
    """``store.read`` of a 10-record run against ``bare``; read+verify against hash+parse."""
    store = await SqlJournalStore.connect(url)
    short = RunId.generate()
    for i in range(10):
        await store.append(1, [Append(short, "Note", {**PAYLOAD, "i": i})])
    long = RunId.generate()
    for start in range(0, long_run, 1000):
        n = min(1000, long_run - start)
        await store.append(1, [Append(long, "Note", PAYLOAD) for _ in range(n)])

    async def hashed_parsed() -> None:
        for row in await bare(str(long)):
            hashlib.sha256(bytes(row[1]) + bytes(row[3])).digest()
            json.loads(bytes(row[3]))

    async def read_verify() -> None:
        await store.read(long)
        await store.verify(long)

    async def many(fn: Callable[[], Awaitable[Any]]) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            await fn()
        return (time.perf_counter() - start) / calls

    ratios, reads, floors, verifies, bases = [], [], [], [], []
    verify_cpu, base_cpu, verify_ratios = [], [], []
    for fn in (lambda: bare(str(short)), lambda: store.read(short)):
        await many(fn)  # warm
    for _ in range(rounds):
        floor = await many(lambda: bare(str(short)))
        read = await many(lambda: store.read(short))
        floors.append(floor)
        reads.append(read)
        ratios.append(read / floor)
        base_wall, base_cpu_s = await cpu_seconds(hashed_parsed)
        both_wall, both_cpu = await cpu_seconds(read_verify)
        bases.append(long_run / base_wall)
        verifies.append(2 * long_run / both_wall)
        verify_ratios.append(base_wall * 2 / both_wall)
        base_cpu.append(long_run / base_cpu_s)
        verify_cpu.append(2 * long_run / both_cpu)
    await store.close()
    m = statistics.median
    print(
        f"{name}: store.read of 10 records {m(reads) * 1e6:.0f} us, bare SELECT"
        f" {m(floors) * 1e6:.0f} us: x{m(ratios):.2f} (rounds' median; target <= 4)"
    )
    print(
        f"{name}: read / verify of {long_run:,} records {m(verifies):,.0f} records/s, bare read"
        f" + sha256 + json.loads {m(bases):,.0f}/s: x{m(verify_ratios):.2f} (rounds' median;"
        " target >= 100,000/s on SQLite)"
    )
    print(
        f"{name}: the same per CPU second of this process (load-independent): read / verify"
        f" {m(verify_cpu):,.0f} records/s, bare {m(base_cpu):,.0f}/s"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds (default 9)")
    parser.add_argument("--pg-url", default=os.environ.get("AGENTPLANE_JOURNAL_BENCH_PG_URL"))
    parser.add_argument("--short-calls", type=int, default=300)
    parser.add_argument(
        "--only", choices=("sqlite", "postgresql"), help="run on one backend (default: both)"
    )
    args = parser.parse_args()
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")

    if args.only != "postgresql":
        await on_sqlite(args)
    if args.only != "sqlite":
        await on_postgresql(args)
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


async def on_sqlite(args: argparse.Namespace) -> None:
    async with sqlite_backend() as db:
        path = db.driver_target

        async def floor_sqlite(run: str) -> list[Any]:
            async with aiosqlite.connect(path) as conn:
                cursor = await conn.execute(SELECT.format("?", "?"), ("default", run))
                return list(await cursor.fetchall())

        await bench(db.name, db.url, floor_sqlite, args.records, args.rounds)
        async with aiosqlite.connect(path) as kept:

            async def bare_sqlite(run: str) -> list[Any]:
                cursor = await kept.execute(SELECT.format("?", "?"), ("default", run))
                return list(await cursor.fetchall())

            await short_bench(
                db.name, db.url, bare_sqlite, args.rounds, args.short_calls, args.records
            )


async def on_postgresql(args: argparse.Namespace) -> None:
    async with postgres_backend(args.pg_url) as db:
        dsn = db.driver_target

        async def floor_pg(run: str) -> list[Any]:
            conn = await asyncpg.connect(dsn)
            try:
                return list(await conn.fetch(SELECT.format("$1", "$2"), "default", run))
            finally:
                await conn.close()

        await bench(db.name, db.url, floor_pg, args.records, args.rounds)
        kept_pg = await asyncpg.connect(dsn)
        try:

            async def bare_pg(run: str) -> list[Any]:
                return list(await kept_pg.fetch(SELECT.format("$1", "$2"), "default", run))

            await short_bench(db.name, db.url, bare_pg, args.rounds, args.short_calls, args.records)
        finally:
            await kept_pg.close()


if __name__ == "__main__":
    asyncio.run(main())
