"""Reading and verifying a long run: time and peak memory, against the bare driver.

    python bench/read.py [--records 20000] [--pg-url postgresql+asyncpg://...]

For one run of N records on each backend (SQLite file; PostgreSQL, a throwaway cluster
started here unless --pg-url is given):

* floor: the bare driver fetching the run's rows (no hashing, no decoding);
* read: ``SqlJournalStore.read`` (every row re-hashed and decoded into a ``Record``);
* verify: ``SqlJournalStore.verify`` (read, then contiguity and links; each row hashed once).

Prints seconds, records per second and peak Python memory (tracemalloc) for each, and the
ratios to the floor. Figures, never assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import os
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


async def measure(fn: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """Seconds (best of 3, untraced) and peak MiB (a separate, traced call) of one call."""
    seconds = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        await fn()
        seconds = min(seconds, time.perf_counter() - start)
    tracemalloc.start()
    await fn()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return seconds, peak


async def bench(name: str, url: str, floor: Callable[[str], Awaitable[Any]], n: int) -> None:
    store = await SqlJournalStore.connect(url)
    run = RunId.generate()
    for start in range(0, n, 1000):
        await store.append(1, [Append(run, "Note", PAYLOAD) for _ in range(min(1000, n - start))])
    base_s, base_m = await measure(lambda: floor(str(run)))
    read_s, read_m = await measure(lambda: store.read(run))
    ver_s, ver_m = await measure(lambda: store.verify(run))
    await store.close()
    print(
        f"{name:<10} {n} records: floor  {base_s:6.3f}s {n / base_s:>9,.0f} records/s"
        f" {base_m:6.1f} MiB"
    )
    for label, s, m in (("read", read_s, read_m), ("verify", ver_s, ver_m)):
        print(
            f"{'':<10} {label:>14} {s:6.3f}s {n / s:>9,.0f} records/s {m:6.1f} MiB"
            f"   time x{s / base_s:5.1f}, memory x{m / base_m:5.1f}"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--pg-url", default=os.environ.get("AGENTPLANE_JOURNAL_BENCH_PG_URL"))
    args = parser.parse_args()

    async with sqlite_backend() as db:
        path = db.driver_target

        async def floor_sqlite(run: str) -> list[Any]:
            async with aiosqlite.connect(path) as conn:
                cursor = await conn.execute(SELECT.format("?", "?"), ("default", run))
                return list(await cursor.fetchall())

        await bench(db.name, db.url, floor_sqlite, args.records)

    async with postgres_backend(args.pg_url) as db:
        dsn = db.driver_target

        async def floor_pg(run: str) -> list[Any]:
            conn = await asyncpg.connect(dsn)
            try:
                return list(await conn.fetch(SELECT.format("$1", "$2"), "default", run))
            finally:
                await conn.close()

        await bench(db.name, db.url, floor_pg, args.records)


if __name__ == "__main__":
    asyncio.run(main())
