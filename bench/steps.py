"""Durable steps against DBOS Transact: a 3-step workflow, same process, same database.

    pip install -e '.[bench]'
    python bench/steps.py [--seconds 2] [--rounds 5] [--pg-url postgresql+asyncpg://...]

For each backend (a SQLite file; PostgreSQL, a throwaway cluster started here with
``fsync``, ``synchronous_commit`` and ``full_page_writes`` on unless ``--pg-url`` is given),
one workflow of three effects (DBOS: steps), each a trivial ``async def``, so what is
measured is the durability machinery, run one at a time and 8 at once:

* ``ours``: ``Steps`` over ``SqlJournalStore`` (its defaults: group commit on), every
  workflow started under its own admission key;
* ``dbos``: DBOS Transact's ``@DBOS.workflow`` / ``@DBOS.step`` (async), every workflow
  under its own ``SetWorkflowID``; its system database in the same SQLite directory or
  the same PostgreSQL cluster (a database of its own), its defaults otherwise.

Rounds are interleaved (each contender once per round, in a rotating order) and the table
shows medians with min-max; ``CPU`` is the process's CPU time per workflow one at a time.
Then what one workflow asks of the database, counted at the client: ours with
``tests/counting.py`` (SQLAlchemy's events, the driver's own calls and SQLite's trace),
DBOS with SQLAlchemy's events on its engine (its ``commit`` and ``rollback`` events and its
statements). Last, **recovery**: a worker dies holding 10 runs mid-effect (their leases live
for 30 s), and a new worker under the same instance name resumes them with
``drain(reclaim_own=True)``: the seconds from opening its store to the last run concluded.
Figures, never assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sqlite3
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from backends import Backend, postgres_backend, sqlite_backend  # puts tests/ on the path
from dbos import DBOS, SetWorkflowID
from sqlalchemy import event
from sqlalchemy.engine import make_url

from agentplane_journal import DidNotHappen, SqlJournalStore, Steps

from support.counting import counting

# -- DBOS's workflow (registered once: DBOS's registry is global) ------------------------


@DBOS.step()
async def dbos_a(x: int) -> int:
    return x + 1


@DBOS.step()
async def dbos_b(x: int) -> int:
    return x * 2


@DBOS.step()
async def dbos_c(x: int) -> int:
    return x - 3


@DBOS.workflow()
async def dbos_three(x: int) -> int:
    return await dbos_c(await dbos_b(await dbos_a(x)))


def ours_three(
    steps: Steps, gate: asyncio.Event | None = None, inside: list[asyncio.Event] | None = None
) -> Any:
    """Our 3-step workflow; with ``gate``, step ``b`` waits for it (the recovery test),
    setting the next of ``inside`` as each call enters."""

    @steps.effect("a")
    async def a(x: int) -> int:
        return x + 1

    async def b_undone(x: int) -> Any:
        return DidNotHappen()

    @steps.effect("b", reconcile=b_undone)
    async def b(x: int) -> int:
        if gate is not None:
            if inside:
                inside.pop().set()
            await gate.wait()
        return x * 2

    @steps.effect("c")
    async def c(x: int) -> int:
        return x - 3

    @steps.workflow("three")
    async def three(x: int) -> int:
        return await c(await b(await a(x)))

    return three


@dataclass
class Contender:
    name: str
    start: Callable[[int], Awaitable[Any]]
    rates: dict[int, list[float]] = field(default_factory=lambda: {1: [], 8: []})
    cpu: list[float] = field(default_factory=list)


async def timed(contender: Contender, concurrent: int, seconds: float) -> None:
    done = 0
    deadline = time.perf_counter() + seconds

    async def loop(w: int) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await contender.start(w)
            done += 1

    began, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(loop(w) for w in range(concurrent)))
    elapsed = time.perf_counter() - began
    contender.rates[concurrent].append(done / elapsed)
    if concurrent == 1:
        contender.cpu.append((time.process_time() - cpu) / max(done, 1) * 1000)


def dbos_url(db: Backend) -> str:
    """DBOS's system database. SQLite: its file made WAL first (a persistent setting; DBOS
    leaves SQLite's default rollback journal, which costs more syncs per commit), with
    SQLite's default ``synchronous=FULL``: the same durability as ours."""
    if db.name == "sqlite":
        path = f"{db.scratch}/dbos.sqlite"
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
        return f"sqlite:///{path}"
    url = make_url(db.url).set(drivername="postgresql+psycopg", database="dbos_bench")
    return url.render_as_string(hide_password=False)


async def count_dbos(n: int = 5) -> dict[str, float]:
    from dbos._dbos import _get_dbos_instance

    engine = _get_dbos_instance()._sys_db.engine
    seen = {"transactions": 0, "statements": 0}

    def on_statement(*args: Any) -> None:
        seen["statements"] += 1

    def on_end(*args: Any) -> None:
        seen["transactions"] += 1

    for name, fn in (("before_cursor_execute", on_statement), ("commit", on_end)):
        event.listen(engine, name, fn)
    event.listen(engine, "rollback", on_end)
    try:
        for _ in range(n):
            with SetWorkflowID(str(uuid.uuid4())):
                await dbos_three(1)
    finally:
        event.remove(engine, "before_cursor_execute", on_statement)
        event.remove(engine, "commit", on_end)
        event.remove(engine, "rollback", on_end)
    return {k: v / n for k, v in seen.items()}


async def recovery(db: Backend, runs: int = 10) -> tuple[float, int]:
    """A worker dies holding ``runs`` runs mid-effect; its successor under the same name
    resumes them: seconds from opening its store to the last run concluded, and how many."""
    dying = await SqlJournalStore.connect(db.url)
    gate = asyncio.Event()  # never set: each run waits in effect b
    inside = [asyncio.Event() for _ in range(runs)]
    three = ours_three(Steps(dying, instance="restarting", lease_ttl=30), gate, list(inside))
    tasks = [asyncio.create_task(three.start(f"rec-{uuid.uuid4()}", i)) for i in range(runs)]
    for entered in inside:  # each run is inside effect b now (started, not done)
        await entered.wait()
    for task in tasks:  # the process dies: nothing released, the leases live on
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await dying.close()
    began = time.perf_counter()
    store = await SqlJournalStore.connect(db.url)
    steps = Steps(store, instance="restarting", lease_ttl=30)
    ours_three(steps)
    report = await steps.sweeper().drain(reclaim_own=True)
    elapsed = time.perf_counter() - began
    await store.close()
    return elapsed, sum(1 for r in report.resumed if r.error is None)


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):7.1f} ({min(values):.0f}-{max(values):.0f})"


async def bench(db: Backend, seconds: float, rounds: int) -> None:
    print(f"\n## {db.name}: {db.settings}")
    store = await SqlJournalStore.connect(db.url)
    steps = Steps(store, instance="bench", lease_ttl=30)
    three = ours_three(steps)
    DBOS(config={"name": "steps-bench", "system_database_url": dbos_url(db)})
    DBOS.launch()
    try:

        async def ours(w: int) -> Any:
            return await three.start(str(uuid.uuid4()), w)

        async def dbos(w: int) -> Any:
            with SetWorkflowID(str(uuid.uuid4())):
                return await dbos_three(w)

        contenders = [Contender("ours", ours), Contender("dbos", dbos)]
        for c in contenders:  # warm: schema checks, pools, caches
            await timed(c, 1, 0.3)
            c.rates, c.cpu = {1: [], 8: []}, []
        for r in range(rounds):
            order = contenders[r % 2 :] + contenders[: r % 2]
            for concurrent in (1, 8):
                for c in order:
                    await timed(c, concurrent, seconds)
        print("| | one at a time (wf/s) | CPU ms/wf | 8 at once (wf/s) |")
        print("|---|---|---|---|")
        for c in contenders:
            cpu = statistics.median(c.cpu)
            print(f"| {c.name} | {cell(c.rates[1])} | {cpu:.1f} | {cell(c.rates[8])} |")
        m = {c.name: {k: statistics.median(v) for k, v in c.rates.items()} for c in contenders}
        print(
            f"ratio ours/dbos: one at a time {m['ours'][1] / m['dbos'][1]:.2f}, "
            f"8 at once {m['ours'][8] / m['dbos'][8]:.2f}"
        )
        with counting(store.engine) as counts:
            for i in range(5):
                await three.start(str(uuid.uuid4()), i)
        print(f"ours per workflow: {counts.per(5)}")
        print(f"dbos per workflow: {await count_dbos()}")
    finally:
        DBOS.destroy()
        await store.close()
    elapsed, resumed = await recovery(db)
    print(f"recovery: a restarted worker resumed {resumed}/10 of its runs in {elapsed:.2f} s")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pg-url", default=os.environ.get("AGENTPLANE_JOURNAL_BENCH_PG_URL"))
    parser.add_argument("--only", choices=["sqlite", "postgresql"])
    args = parser.parse_args()
    logging.getLogger("dbos").setLevel(logging.WARNING)
    if args.only != "postgresql":
        async with sqlite_backend() as db:
            await bench(db, args.seconds, args.rounds)
    if args.only != "sqlite":
        async with postgres_backend(args.pg_url) as db:
            await bench(db, args.seconds, args.rounds)


if __name__ == "__main__":
    asyncio.run(main())
