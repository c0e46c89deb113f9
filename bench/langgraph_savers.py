"""LangGraph checkpoints per second: ``JournalSaver`` against LangGraph's own async savers.

(Not ``bench/langgraph.py``: with bench/ on the path, that file would shadow LangGraph's
namespace package.)

    pip install -e '.[bench,langgraph]'
    python bench/langgraph_savers.py [--rounds 5] [--threads 20] [--depth 10] [--pg-url ...]

For each backend (a SQLite file; PostgreSQL, a throwaway cluster started here with ``fsync``,
``synchronous_commit`` and ``full_page_writes`` on unless ``--pg-url`` is given), in the
same run:

* ``journal``: :class:`agentplane_journal.langgraph.JournalSaver` on a
  :class:`SqlJournalStore` (each put a record: canonical JSON, chained, fenced under the
  thread's lease, one durable transaction; each read verifies the whole thread);
* ``langgraph``: ``AsyncSqliteSaver`` (its own file beside ours) or ``AsyncPostgresSaver``
  (psycopg 3, the same database), tables made by their ``setup()``.

A round writes ``--threads`` fresh threads ``--depth`` checkpoints deep, one writer, each
put with a pending write as a graph step makes (``put`` + ``put_writes``, counted as one
step), then reads each thread's latest checkpoint (``get_tuple``) ``--depth`` times. Rounds
are interleaved (the contenders take turns, in a rotating order) so load from elsewhere on
the machine spreads over both; the table shows each median with its min-max, then the
ratio journal / langgraph. Then the same turns again with the contenders taking turns
thread by thread (``paired_round``): on a loaded machine a round-level interleave leaves
each contender its own bursts of load, and the paired ratio is the steadier one. Figures,
never assertions.

Then, in interleaved rounds too (issue 32's targets):

* turns/s with ``--concurrency`` (8) threads written at once by one saver (``0`` skips it;
  it runs whatever ``--cold`` says);
* cold ``get_tuple`` of a thread 10, 100 and 1,000 checkpoints deep: ``journal`` is a new
  ``JournalSaver`` (no verified point: the whole chain), ``journal-shared`` a new one with
  ``share_verified=True`` after another saver of the process verified the thread (its
  point: docs/guides/langgraph.md's trust model), ``journal-lean`` a new one with
  ``lean_resume=True`` (no verified point: the newest checkpoint and the records it names,
  langgraph/lean.py); LangGraph's savers keep no state, so
  theirs is a ``get_tuple`` by the open saver;
* ``list`` of the last 10 checkpoints of a ``--list-depth`` (1,000) checkpoint thread:
  ``journal`` a new saver (it reads the thread), ``journal-warm`` the saver that wrote it,
  ``journal-lean`` a new one with ``lean_resume=True`` (read back from the head,
  langgraph/lean_list.py), LangGraph's open saver;
* memory per 1,000 idle threads past ``--idle`` WARM threads (tracemalloc from the saver's
  start), ours against LangGraph's;
* the machine's load average, before and after.

``--skip-turns`` runs the list and memory parts alone.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from backends import Backend, postgres_backend, sqlite_backend
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from agentplane_journal.langgraph import JournalSaver

Opener = Callable[[Backend], AbstractAsyncContextManager[BaseCheckpointSaver[Any]]]


@asynccontextmanager
async def journal(backend: Backend) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    async with JournalSaver.from_url(backend.url) as saver:
        yield saver


@asynccontextmanager
async def langgraph(backend: Backend) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    if backend.name == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(f"{backend.scratch}/lg.db") as saver:
            await saver.setup()
            yield saver
    else:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(backend.driver_target) as saver:
            await saver.setup()
            yield saver


async def one_round(
    saver: BaseCheckpointSaver[Any], threads: int, depth: int
) -> tuple[float, float]:
    """(steps/s, gets/s) for ``threads`` fresh threads ``depth`` checkpoints deep."""
    ids = [f"bench-{uuid.uuid4().hex}" for _ in range(threads)]
    start = time.perf_counter()
    for thread in ids:
        config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        for step in range(depth):
            config = await _turn(saver, config, step)
    wrote = time.perf_counter()
    for thread in ids:
        for _ in range(depth):
            got = await saver.aget_tuple({"configurable": {"thread_id": thread}})
            assert got is not None and got.checkpoint["channel_values"]["step"] == depth - 1
    read = time.perf_counter()
    steps = threads * depth
    return steps / (wrote - start), steps / (read - wrote)


async def paired_round(
    savers: dict[str, BaseCheckpointSaver[Any]], threads: int, depth: int, flip: bool
) -> dict[str, tuple[float, float]]:
    """Steps/s of each saver, taking turns thread by thread (one thread's ``depth`` turns
    on one, then a thread on the other, the order flipped every thread), so a burst of load
    from elsewhere falls on both within milliseconds: the ratio a loaded machine can give.
    With it, the event loop's thread's CPU per turn (``time.thread_time``: the figure load
    barely moves; both savers run their SQL on a thread of their own, aiosqlite's on
    SQLite, so neither's database work is in it)."""
    spent = dict.fromkeys(savers, 0.0)
    cpu = dict.fromkeys(savers, 0.0)
    names = list(savers)
    for t in range(threads):
        for name in names if (t % 2 == 0) != flip else names[::-1]:
            thread = f"paired-{uuid.uuid4().hex}"
            config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            start, start_cpu = time.perf_counter(), time.thread_time()
            for step in range(depth):
                config = await _turn(savers[name], config, step)
            spent[name] += time.perf_counter() - start
            cpu[name] += time.thread_time() - start_cpu
    steps = threads * depth
    return {name: (steps / spent[name], cpu[name] / steps * 1e6) for name in names}


async def concurrent_round(saver: BaseCheckpointSaver[Any], threads: int, depth: int) -> float:
    """Turns/s with ``threads`` threads written at once (each ``depth`` turns)."""

    async def one(thread: str) -> None:
        config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        for step in range(depth):
            config = await _turn(saver, config, step)

    start = time.perf_counter()
    await asyncio.gather(*(one(f"bench-{uuid.uuid4().hex}") for _ in range(threads)))
    return threads * depth / (time.perf_counter() - start)


async def _turn(saver: BaseCheckpointSaver[Any], config: Any, step: int) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6(clock_seq=-1))
    checkpoint["channel_values"] = {
        "messages": [f"message {i} of step {step}: " + "x" * 60 for i in range(3)],
        "step": step,
    }
    checkpoint["channel_versions"] = {"messages": step + 1, "step": step + 1}
    config = await saver.aput(
        config,
        checkpoint,
        {"source": "loop", "step": step, "parents": {}},
        {"messages": step + 1, "step": step + 1},
    )
    await saver.aput_writes(config, [("messages", ["reply"])], str(uuid.uuid4()))
    return config


async def deep_thread(saver: BaseCheckpointSaver[Any], depth: int) -> str:
    thread = f"deep-{depth}-{uuid.uuid4().hex}"
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    await saver.aget_tuple(config)  # as a graph reads its thread before it writes
    for step in range(depth):
        config = await _turn(saver, config, step)
    return thread


async def cold_get(saver: BaseCheckpointSaver[Any], name: str, thread: str, tries: int) -> float:
    """Median seconds of a cold ``get_tuple`` (see the module) over ``tries``."""
    times = []
    config = {"configurable": {"thread_id": thread}}
    for _ in range(tries):
        reader = saver
        if name.startswith("journal"):
            assert isinstance(saver, JournalSaver)
            reader = JournalSaver(
                saver.store,
                share_verified=name == "journal-shared",
                lean_resume=name == "journal-lean",
            )
        gc.disable()  # another contender's garbage (a 1,000-record replay) is not this one's
        try:
            start = time.perf_counter()
            got = await reader.aget_tuple(config)
            times.append(time.perf_counter() - start)
        finally:
            gc.enable()
        assert got is not None
    return statistics.median(times)


async def bench_many(backend: Backend, rounds: int, concurrency: int) -> None:
    """Turns/s with ``concurrency`` threads written at once, interleaved rounds."""
    async with journal(backend) as j, langgraph(backend) as lg:
        savers: dict[str, BaseCheckpointSaver[Any]] = {"journal": j, "langgraph": lg}
        many: dict[str, list[float]] = {name: [] for name in savers}
        names = list(savers)
        for r in range(rounds):
            for name in names[r % 2 :] + names[: r % 2]:
                many[name].append(await concurrent_round(savers[name], concurrency, 5))
        print(f"  {concurrency} threads at once, turns/s (put+put_writes), {rounds} rounds:")
        for name in names:
            print(f"    {name:<10} {spread(many[name])}")
        ratio = statistics.median(many["journal"]) / statistics.median(many["langgraph"])
        print(f"    journal / langgraph: {ratio:.2f}x")


async def bench_cold(backend: Backend, rounds: int, depths: list[int]) -> None:
    async with journal(backend) as j, langgraph(backend) as lg:
        savers: dict[str, BaseCheckpointSaver[Any]] = {"journal": j, "langgraph": lg}
        names = list(savers)
        threads = {
            (name, depth): await deep_thread(savers[name], depth)
            for depth in depths
            for name in names
        }
        for depth in depths:  # the process's verified point, for journal-shared
            await JournalSaver(j.store, share_verified=True).aget_tuple(
                {"configurable": {"thread_id": threads[("journal", depth)]}}
            )
        print("  cold get_tuple, ms (median of rounds):")
        contenders = ["journal", "journal-shared", "journal-lean", "langgraph"]
        for depth in depths:
            got: dict[str, list[float]] = {name: [] for name in contenders}
            for r in range(rounds):
                for name in contenders[r % 4 :] + contenders[: r % 4]:
                    saver = savers["langgraph" if name == "langgraph" else "journal"]
                    key = ("langgraph" if name == "langgraph" else "journal", depth)
                    got[name].append(await cold_get(saver, name, threads[key], 3))
            cells = "  ".join(
                f"{name} {statistics.median(got[name]) * 1e3:7.2f}" for name in contenders
            )
            peer = statistics.median(got["langgraph"])
            ratios = ", ".join(
                f"{name} {statistics.median(got[name]) / peer:.1f}x" for name in contenders[:3]
            )
            print(f"    {depth:>5} checkpoints: {cells}   (/ langgraph: {ratios})")


async def timed_list(saver: BaseCheckpointSaver[Any], name: str, thread: str, limit: int) -> float:
    """Seconds of one ``list`` of the thread's last ``limit`` checkpoints (see bench_list)."""
    reader = saver
    if name in ("journal", "journal-lean"):
        assert isinstance(saver, JournalSaver)
        reader = JournalSaver(saver.store, lean_resume=name == "journal-lean")
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    gc.disable()
    try:
        start = time.perf_counter()
        got = [t async for t in reader.alist(config, limit=limit)]
        took = time.perf_counter() - start
    finally:
        gc.enable()
    assert len(got) == limit
    return took


async def bench_list(backend: Backend, rounds: int, depth: int, limit: int) -> None:
    """``list`` of the last ``limit`` checkpoints of a ``depth``-checkpoint thread, as
    ``get_state_history`` pages it: ``journal`` a new saver (it reads the thread),
    ``journal-warm`` the saver that wrote it (from its kept view), ``journal-lean`` a new
    one with ``lean_resume=True`` (read back from the head), LangGraph's open saver."""
    print(f"  list of the last {limit} of a {depth}-checkpoint thread, ms (median of rounds):")
    async with journal(backend) as j, langgraph(backend) as lg:
        thread = {"journal": await deep_thread(j, depth), "langgraph": await deep_thread(lg, depth)}
        contenders = ["journal", "journal-warm", "journal-lean", "langgraph"]
        got: dict[str, list[float]] = {name: [] for name in contenders}
        for r in range(rounds):
            for name in contenders[r % 4 :] + contenders[: r % 4]:
                saver = lg if name == "langgraph" else j
                which = thread["langgraph" if name == "langgraph" else "journal"]
                got[name].append(await timed_list(saver, name, which, limit))
        peer = statistics.median(got["langgraph"])
        for name in contenders:
            median = statistics.median(got[name])
            print(
                f"    {name:<13} {median * 1e3:8.2f}  ({min(got[name]) * 1e3:.2f}-"
                f"{max(got[name]) * 1e3:.2f})  / langgraph {median / peer:.1f}x"
            )


async def _idle_touch(saver: BaseCheckpointSaver[Any], thread: str) -> None:
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    config = await saver.aput(config, empty_checkpoint(), {"step": 1}, {})
    assert await saver.aget_tuple(config) is not None
    if isinstance(saver, JournalSaver):
        await saver.arelease(thread)  # the thread goes idle


async def bench_idle(backend: Backend, warm: int, more: int) -> None:
    """Memory a saver holds per idle thread (a put and a get, then left): tracemalloc from
    the saver's start, so what its bounded caches evict is counted as freed; the growth
    over ``more`` threads after ``warm`` (past every bound, 4,096 threads), per 1,000."""
    print(f"  memory per 1,000 idle threads after {warm} (tracemalloc, MiB):")
    for name, opener in (("journal", journal), ("langgraph", langgraph)):
        tracemalloc.start()
        try:
            async with opener(backend) as saver:
                base = tracemalloc.get_traced_memory()[0]
                for i in range(warm):
                    await _idle_touch(saver, f"idle-{uuid.uuid4().hex}-{i}")
                gc.collect()
                held = tracemalloc.get_traced_memory()[0]
                for i in range(more):
                    await _idle_touch(saver, f"idle-{uuid.uuid4().hex}-{i}")
                gc.collect()
                grown = tracemalloc.get_traced_memory()[0] - held
        finally:
            tracemalloc.stop()
        print(
            f"    {name:<10} {grown / more * 1000 / 2**20:+6.2f} per 1,000 past {warm}"
            f"   (held at {warm}: {(held - base) / 2**20:.1f})"
        )


async def _sqlite_durability(saver: BaseCheckpointSaver[Any]) -> str:
    """The journal mode and ``synchronous`` the saver's SQLite connection really runs with
    (both sides must commit alike: WAL, ``FULL``, one ``fsync`` per commit)."""
    if isinstance(saver, JournalSaver):
        async with saver.store.engine.connect() as conn:
            mode = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
            sync = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar()
    else:
        conn_ = saver.conn  # type: ignore[attr-defined]  # AsyncSqliteSaver's aiosqlite connection
        async with conn_.execute("PRAGMA journal_mode") as cur:
            mode = (await cur.fetchone())[0]
        async with conn_.execute("PRAGMA synchronous") as cur:
            sync = (await cur.fetchone())[0]
    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    return f"journal_mode={mode}, synchronous={names.get(sync, sync)}"


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):8.0f}  ({min(values):.0f}-{max(values):.0f})"


async def bench(
    backend: Backend,
    rounds: int,
    threads: int,
    depth: int,
    concurrency: int = 8,
    cold_depths: list[int] | None = None,
    list_depth: int = 0,
    idle: tuple[int, int] | None = None,
) -> None:
    contenders: dict[str, Opener] = {"journal": journal, "langgraph": langgraph}
    puts: dict[str, list[float]] = {name: [] for name in contenders}
    gets: dict[str, list[float]] = {name: [] for name in contenders}
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    durability: list[str] = []
    async with journal(backend) as j, langgraph(backend) as lg:
        savers = {"journal": j, "langgraph": lg}
        if backend.name == "sqlite":
            durability = [await _sqlite_durability(j), await _sqlite_durability(lg)]
        await one_round(j, 2, 2)  # warm both: connections, statements
        await one_round(lg, 2, 2)
        names = list(contenders)
        for r in range(rounds):
            for name in names[r % 2 :] + names[: r % 2]:
                put, get = await one_round(savers[name], threads, depth)
                puts[name].append(put)
                gets[name].append(get)
        paired: dict[str, list[float]] = {name: [] for name in contenders}
        loop_cpu: dict[str, list[float]] = {name: [] for name in contenders}
        for r in range(rounds):
            for name, (rate, us) in (
                await paired_round(savers, threads, depth, r % 2 == 1)
            ).items():
                paired[name].append(rate)
                loop_cpu[name].append(us)
    print(f"\n{backend.name}: {backend.settings}")
    if durability:
        print(f"  journal:   {durability[0]}")
        print(f"  langgraph: {durability[1]}")
    print(f"  load average before: {load}")
    print(f"  {threads} threads x {depth} checkpoints a round, {rounds} rounds, one writer")
    print("  contender     steps/s (put+put_writes)     get_tuple/s")
    for name in contenders:
        print(f"  {name:<10} {spread(puts[name])}   {spread(gets[name])}")
    ratio_put = statistics.median(puts["journal"]) / statistics.median(puts["langgraph"])
    ratio_get = statistics.median(gets["journal"]) / statistics.median(gets["langgraph"])
    print(f"  journal / langgraph: steps {ratio_put:.2f}x, gets {ratio_get:.2f}x")
    print("  steps/s again, the contenders taking turns thread by thread (paired_round):")
    for name in contenders:
        print(f"  {name:<10} {spread(paired[name])}")
    ratios = [j / lg for j, lg in zip(paired["journal"], paired["langgraph"], strict=True)]
    print(
        f"  journal / langgraph, paired: {statistics.median(ratios):.2f}x"
        f" (median of the rounds' ratios; {min(ratios):.2f}-{max(ratios):.2f})"
    )
    cells = ", ".join(f"{name} {statistics.median(loop_cpu[name]):.0f}" for name in contenders)
    print(f"  event-loop thread CPU per turn, paired rounds (µs, median): {cells}")
    if concurrency:
        await bench_many(backend, rounds, concurrency)
    if cold_depths:
        await bench_cold(backend, rounds, cold_depths)
    print(f"  load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if list_depth:
        await bench_list(backend, max(rounds, 4) * 2, list_depth, 10)
    if idle:
        await bench_idle(backend, idle[0], idle[1])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--pg-url", default=None)
    parser.add_argument("--only", choices=("sqlite", "postgresql"), default=None)
    parser.add_argument("--concurrency", type=int, default=8, help="0: no threads-at-once bench")
    parser.add_argument("--cold", default="10,100,1000", help="cold get_tuple depths")
    parser.add_argument("--list-depth", type=int, default=1000, help="0: no list bench")
    parser.add_argument(
        "--idle", default="4200,1000", help="WARM,MORE idle threads for memory; '' skips"
    )
    parser.add_argument("--skip-turns", action="store_true", help="only list and memory")
    args = parser.parse_args()
    cold = [int(d) for d in args.cold.split(",") if d]
    idle = tuple(int(n) for n in args.idle.split(",")) if args.idle else None
    for name, open_backend in (("sqlite", sqlite_backend), ("postgresql", postgres_backend)):
        if args.only not in (None, name):
            continue
        async with open_backend(args.pg_url) if name == "postgresql" else open_backend() as backend:
            if args.skip_turns:
                print(f"\n{backend.name}: {backend.settings}")
                print(f"  load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
                if args.list_depth:
                    await bench_list(backend, max(args.rounds, 4) * 2, args.list_depth, 10)
                if idle:
                    await bench_idle(backend, idle[0], idle[1])
                continue
            await bench(
                backend,
                args.rounds,
                args.threads,
                args.depth,
                args.concurrency,
                cold,
                args.list_depth,
                idle,  # type: ignore[arg-type]
            )


if __name__ == "__main__":
    asyncio.run(main())
