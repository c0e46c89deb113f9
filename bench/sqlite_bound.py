"""Where one SQLite writer's append goes: the blocking floor, one thread hop, the store.

    python bench/sqlite_bound.py [--appends 500] [--rounds 15]

One process, one database file, one connection of the store's engine, interleaved rounds
(medians): ``blocking`` is a ``BEGIN IMMEDIATE`` / ``INSERT`` / ``COMMIT`` of a precomputed
row run right on the event loop's thread (what a blocking recorder such as eventsourcing's
pays: the commit's ``fdatasync`` and SQLite's own work); ``es aggregate`` is eventsourcing's
``SQLiteAggregateRecorder`` inserting the same record's bytes as one stored event on that
thread (its own file beside ours, WAL, the build's default ``synchronous``: ``FULL``, as
the store sets); ``one hop`` is the ``blocking`` function run through aiosqlite's thread, as
every call of an async store must be (the least an append can cost without blocking the
event loop); ``store`` is ``SqlJournalStore.append`` of one record to a leased run, whose
transaction is one such hop. The differences are the hop's cost and each one's own work
beyond it. Each line also gives the event loop's thread's own CPU per append
(``time.thread_time``): a blocking variant's includes SQLite's work, a hop's the hand-off
and whatever the store does on the loop. Figures, never assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from eventsourcing.persistence import StoredEvent

from agentplane_journal import Append, Digest, Record, RunId, SqlJournalStore, upgrade
from agentplane_journal.backends.sqlite.writer import _INSERT

PAYLOAD = {"text": "a realistic note of a few dozen bytes", "step_output": {"ok": True, "n": 42}}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=500, help="appends per round")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    n = args.appends
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{tmp}/bound.db"
        await upgrade(url)
        store = await SqlJournalStore.connect(url, tenant="bound")
        run = RunId.generate()
        epoch = (await store.acquire(run, "writer", 3600)).epoch
        await store.append(epoch, [Append(run, "Note", PAYLOAD)])
        raw = Record.seal(Append(run, "Note", PAYLOAD).body(1, 1), Digest.ZERO).raw
        try:
            async with store.engine.connect() as conn:
                driver = (await conn.get_raw_connection()).driver_connection
                sqlite = driver._conn  # aiosqlite's sqlite3 connection (private, since 0.17)
                seq = 0

                def transaction() -> None:
                    nonlocal seq
                    seq += 1
                    row = ("floor", "run", seq, 1, "Note", None, b"p" * 32, b"h" * 32, raw)
                    sqlite.execute("BEGIN IMMEDIATE")
                    sqlite.execute(_INSERT, (*row, None, None, None))
                    sqlite.execute("COMMIT")

                async def blocking() -> None:
                    for _ in range(n):
                        transaction()

                recorder, close_es = _eventsourcing(tmp)
                aggregate, version = uuid.uuid4(), 0

                async def eventsourcing() -> None:
                    nonlocal version
                    for _ in range(n):
                        version += 1
                        recorder.insert_events(
                            [StoredEvent(aggregate, version, "bound:Note", raw)]  # type: ignore[arg-type]
                        )

                async def one_hop() -> None:
                    for _ in range(n):
                        await driver._execute(transaction)

                async def through_store() -> None:
                    for _ in range(n):
                        await store.append(epoch, [Append(run, "Note", PAYLOAD)])

                runs: dict[str, Callable[[], Awaitable[None]]] = {
                    "blocking": blocking,
                    "es aggregate": eventsourcing,
                    "one hop": one_hop,
                    "store": through_store,
                }
                times: dict[str, list[float]] = {name: [] for name in runs}
                cpu: dict[str, list[float]] = {name: [] for name in runs}
                names = list(runs)
                for r in range(args.rounds):
                    for name in names[r % len(names) :] + names[: r % len(names)]:
                        start, used = time.perf_counter(), time.thread_time()
                        await runs[name]()
                        times[name].append((time.perf_counter() - start) / n * 1e6)
                        cpu[name].append((time.thread_time() - used) / n * 1e6)
                close_es()
        finally:
            await store.close()
    m = {name: statistics.median(t) for name, t in times.items()}
    print(f"one SQLite writer, µs per append (median of {args.rounds} interleaved rounds):")
    for name, t in times.items():
        print(
            f"  {name:<12} {m[name]:5.0f} µs = {1e6 / m[name]:5.0f}/s  ({min(t):.0f}-{max(t):.0f});"
            f" the event loop's thread {statistics.median(cpu[name]):4.0f} µs of CPU"
        )
    print(
        f"  one hop costs {m['one hop'] - m['blocking']:.0f} µs; the store's own work beyond"
        f" floor + hop {m['store'] - m['one hop']:.0f} µs; eventsourcing's own work beyond the"
        f" floor {m['es aggregate'] - m['blocking']:.0f} µs"
    )
    print(
        f"  store / es aggregate {m['es aggregate'] / m['store']:.2f}x;"
        f" one hop with no work of its own / es aggregate {m['es aggregate'] / m['one hop']:.2f}x"
    )


def _eventsourcing(tmp: str) -> tuple[Any, Callable[[], None]]:
    """eventsourcing's SQLite aggregate recorder on its own file beside ours, at the build's
    default ``synchronous`` (``FULL`` here, as the store sets), WAL as it sets."""
    from eventsourcing.sqlite import SQLiteAggregateRecorder, SQLiteDatastore

    datastore = SQLiteDatastore(db_name=f"{tmp}/eventsourcing.db", pool_size=1, max_overflow=0)
    recorder = SQLiteAggregateRecorder(datastore, events_table_name="bound_events")
    recorder.create_table()
    return recorder, datastore.close


if __name__ == "__main__":
    asyncio.run(main())
