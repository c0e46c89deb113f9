"""verify of one run with byte-bounded pages against count-only pages, interleaved.

    python bench/read_pages.py [--records 20000] [--rounds 15]

The count-only pages are the page loop as it was before pages were bounded by bytes
(``LIMIT 1000``, nothing else), patched in for its turns in the same process, so the ratio
is what the byte bound costs: ``new/old`` time of a 20,000-record run's ``verify`` (best
of the rounds, and the median of each round's ratio) and of a 5-record run's. Figures,
never assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from typing import Any

from backends import postgres_backend, sqlite_backend
from sqlalchemy import bindparam, select

from agentplane_journal import Append, Record, RunId, SqlJournalStore
from agentplane_journal.db.models import Journal
from agentplane_journal.db.statements import RECORD_COLUMNS, records_from_rows
from agentplane_journal.journal import reads as reads

PAYLOAD = {"text": "a realistic note of a few dozen bytes", "step_output": {"ok": True, "n": 42}}
NEW = reads.RunReads._pages


async def count_only_pages(
    self: Any, run: RunId, from_seq: int, size: int, budget: int, session: Any
) -> AsyncIterator[list[Record]]:
    """The page loop before the byte bound (``budget`` is ignored)."""
    stmt = (
        select(*RECORD_COLUMNS)
        .where(self._key(run), Journal.seq >= bindparam("from_seq"))
        .order_by(Journal.seq)
        .limit(size)
    )
    at = from_seq
    while True:

        async def unit(session: Any, at: int = at) -> list[Record]:
            rows = await reads.driver_rows(session, stmt, {"from_seq": at})
            return records_from_rows(rows)

        page = await self._unit(unit, read_only=True, session=session)
        if page:
            yield page
        if len(page) < size:
            return
        at = page[-1].seq + 1


async def bench(name: str, url: str, n: int, rounds: int) -> None:
    store = await SqlJournalStore.connect(url)
    run, small = RunId.generate(), RunId.generate()
    for start in range(0, n, 1000):
        await store.append(1, [Append(run, "Note", PAYLOAD) for _ in range(min(1000, n - start))])
    await store.append(1, [Append(small, "Note", PAYLOAD) for _ in range(5)])
    times: dict[str, list[float]] = {k: [] for k in ("old", "new", "old5", "new5")}
    try:
        for r in range(rounds + 1):  # round 0 warms up
            order = [("new", NEW), ("old", count_only_pages)]
            for label, impl in order if r % 2 else order[::-1]:
                reads.RunReads._pages = impl  # type: ignore[method-assign]
                start = time.perf_counter()
                await store.verify(run)
                long = time.perf_counter() - start
                start = time.perf_counter()
                for _ in range(50):
                    await store.verify(small)
                short = (time.perf_counter() - start) / 50
                if r:
                    times[label].append(long)
                    times[label + "5"].append(short)
    finally:
        reads.RunReads._pages = NEW  # type: ignore[method-assign]
        await store.close()
    for label in ("old", "new"):
        print(
            f"{name} verify {n}: {label} best {n / min(times[label]):9,.0f}/s"
            f" median {n / statistics.median(times[label]):9,.0f}/s"
            f" | 5-record run median {statistics.median(times[label + '5']) * 1e3:.2f} ms"
        )
    ratios = [a / b for a, b in zip(times["new"], times["old"], strict=True)]
    short_ratios = [a / b for a, b in zip(times["new5"], times["old5"], strict=True)]
    print(
        f"{name} new/old time: best {min(times['new']) / min(times['old']):.3f}"
        f" median of ratios {statistics.median(ratios):.3f};"
        f" 5-record run {statistics.median(short_ratios):.3f}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    async with sqlite_backend() as db:
        await bench(db.name, db.url, args.records, args.rounds)
    async with postgres_backend(None) as db:
        await bench(db.name, db.url, args.records, args.rounds)


if __name__ == "__main__":
    asyncio.run(main())
