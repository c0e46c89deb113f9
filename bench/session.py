"""What an append in the host's own session costs, and what its SAVEPOINT costs.

    python bench/session.py [--appends 300] [--rounds 9] [--pg-url postgresql+asyncpg://...]

One writer, one-record appends, on each backend (SQLite file; PostgreSQL, a throwaway
durable cluster unless --pg-url is given), in interleaved rounds of:

* own: ``store.append(epoch, batch)``, the store's own transaction;
* session: a host ``AsyncSession``, ``store.append(..., session=s)``, ``s.commit()``;
* no-savepoint: the same with the store's SAVEPOINT/RELEASE taken out (what the savepoint
  costs; not a mode the store offers).

Prints the median milliseconds per append and the ratio to ``own``. Figures, never
assertions; the machine's load moves them, the ratios less.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

from backends import postgres_backend, sqlite_backend
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal import Append, RunId, SqlJournalStore


class _NoSavepoint:
    async def commit(self) -> None:
        return None

    async def rollback(self) -> None:
        return None


async def _round(store: SqlJournalStore, mode: str, appends: int) -> float:
    run = RunId.generate()
    start = time.perf_counter()
    for i in range(appends):
        batch = [Append(run, "Note", {"text": f"note {i}"})]
        if mode == "own":
            await store.append(1, batch)
            continue
        async with AsyncSession(store.engine) as session:
            if mode == "no-savepoint":

                async def begin_nested(**_: Any) -> _NoSavepoint:
                    return _NoSavepoint()

                session.begin_nested = begin_nested  # type: ignore[method-assign]
            await store.append(1, batch, session=session)
            await session.commit()
    return (time.perf_counter() - start) / appends * 1000


async def bench(url: str, label: str, appends: int, rounds: int) -> None:
    store = await SqlJournalStore.connect(url)
    modes = ("own", "session", "no-savepoint")
    times: dict[str, list[float]] = {m: [] for m in modes}
    try:
        await _round(store, "own", 20)  # warm the pool and the statement caches
        for _ in range(rounds):
            for mode in modes:
                times[mode].append(await _round(store, mode, appends))
    finally:
        await store.close()
    own = statistics.median(times["own"])
    for mode in modes:
        median = statistics.median(times[mode])
        print(f"  {mode:13s} {median:7.3f} ms/append   x{median / own:.2f} of own")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--pg-url", default=os.environ.get("AGENTPLANE_JOURNAL_BENCH_PG_URL"))
    args = parser.parse_args()
    async with sqlite_backend() as backend:
        print(backend.settings)
        await bench(backend.url, backend.name, args.appends, args.rounds)
    async with postgres_backend(args.pg_url) as backend:
        print(backend.settings)
        await bench(backend.url, backend.name, args.appends, args.rounds)


if __name__ == "__main__":
    asyncio.run(main())
