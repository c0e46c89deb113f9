"""The Merkle log at scale: checkpoint, proofs and seal at 1k..1M sealed runs; audits.

    python bench/log.py [--sizes 1000,10000,100000,1000000] [--audit-runs 100000]
                        [--backends sqlite,postgresql] [--pg-url postgresql+asyncpg://...]

For each backend (a SQLite file; PostgreSQL, a throwaway durable cluster unless --pg-url):

* one tenant's log is grown in bulk through the code a seal runs (``TenantLog.append``, in
  transactions of 5,000 leaves: the stored tree is exactly what seals would have written),
  and at each size the median latency of ``checkpoint()``, ``inclusion_proof(run)`` (a
  random sealed run), ``consistency_proof(m)`` (a random old size) and ``seal()`` (of a
  fresh run with one record; only the seal call is timed) is printed, then every
  operation's ratio largest-size / smallest-size (the target: <= 2, i.e. O(log n));
* another tenant gets ``--audit-runs`` runs of one record each, sealed, and
  ``agentplane-journal export --all`` and ``verify --all`` run over it (as subprocesses, as
  an operator runs them), printed as runs per second.

Figures, never assertions. On a shared machine interleave nothing else and read ratios
rather than absolute times.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from backends import Backend, postgres_backend, sqlite_backend

from agentplane_journal import Append, Digest, Record, RunId, SqlJournalStore
from agentplane_journal.db.models import Journal, RunActivity

CHUNK = 5000
OPS = ("checkpoint", "inclusion_proof", "consistency_proof", "seal")


async def timed(fn: Callable[[], Awaitable[Any]], rounds: int) -> float:
    """Median seconds of ``rounds`` calls (after one warm-up call)."""
    await fn()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


async def grow(store: SqlJournalStore, runs: list[str], to: int) -> None:
    """Seal leaves in bulk until the log has ``to`` leaves (no records: the log only)."""
    while len(runs) < to:
        batch = []
        for _ in range(min(CHUNK, to - len(runs))):
            run = str(RunId.generate())
            runs.append(run)
            batch.append((run, bytes(Digest.of(run.encode())), 1_700_000_000, "succeeded"))

        async def unit(session: Any, batch: Any = batch) -> None:
            await store._log.append(session, batch)

        await store._unit(unit)


async def settle(store: SqlJournalStore) -> None:
    """What autovacuum does soon after a bulk load: fresh planner statistics (PostgreSQL).

    Without them a plan cached while the tables were small (a scan, right for 1,000 rows)
    is kept until autovacuum's ANALYZE invalidates it; a log that grows by seals gets them
    as it grows.
    """
    if store.engine.dialect.name == "postgresql":
        async with store.engine.connect() as conn:
            await conn.exec_driver_sql("ANALYZE log_tree, run_seal, journal_counter")
            await conn.commit()


async def log_figures(backend: Backend, sizes: list[int], rounds: int) -> dict[int, dict]:
    store = await SqlJournalStore.connect(backend.url, tenant="benchlog")
    rng = random.Random(7)
    runs: list[str] = []
    figures: dict[int, dict[str, float]] = {}
    try:
        for size in sizes:
            start = time.perf_counter()
            await grow(store, runs, size)
            built = time.perf_counter() - start
            await settle(store)

            seal_times: list[float] = []

            async def one_seal(seal_times: list[float] = seal_times) -> None:
                run = RunId.generate()
                await store.append(1, [Append(run, "Note", {"text": "x"})])
                t = time.perf_counter()
                await store.seal(run, 1, "succeeded")
                seal_times.append(time.perf_counter() - t)
                runs.append(str(run))

            row = {
                "checkpoint": await timed(store.checkpoint, rounds),
                "inclusion_proof": await timed(
                    lambda: store.inclusion_proof(RunId.parse(rng.choice(runs))), rounds
                ),
                "consistency_proof": await timed(
                    lambda size=size: store.consistency_proof(rng.randrange(1, size)), rounds
                ),
            }
            for _ in range(rounds // 2):
                await one_seal()
            row["seal"] = statistics.median(seal_times)
            figures[size] = row
            cells = "  ".join(f"{op} {row[op] * 1000:7.2f} ms" for op in OPS)
            print(f"  {size:>9,} sealed runs (built in {built:6.1f} s): {cells}", flush=True)
    finally:
        await store.close()
    lo, hi = sizes[0], sizes[-1]
    ratios = "  ".join(f"{op} x{figures[hi][op] / figures[lo][op]:.2f}" for op in OPS)
    print(f"  ratio {hi:,} / {lo:,}: {ratios}", flush=True)
    return figures


async def audit_journal(backend: Backend, n: int) -> str:
    """``n`` runs of one record each, all sealed, in tenant ``benchaudit``; returns it."""
    store = await SqlJournalStore.connect(backend.url, tenant="benchaudit")
    try:
        for start in range(0, n, CHUNK):
            rows, leaves = [], []
            for _ in range(min(CHUNK, n - start)):
                run = RunId.generate()
                item = Append(run, "Note", {"text": "a sealed run"})
                record = Record.seal(item.body(1, 1), Digest.ZERO, None)
                rows.append(
                    {
                        "tenant": "benchaudit",
                        "run_id": str(run),
                        "seq": 1,
                        "epoch": 1,
                        "kind": "Note",
                        "effect_key": None,
                        "prev_hash": bytes(Digest.ZERO),
                        "hash": bytes(record.hash),
                        "raw": record.raw,
                        "key_id": None,
                        "signature": None,
                        "case_id": None,
                    }
                )
                leaves.append((str(run), bytes(record.hash), 1_700_000_000, "succeeded"))

            async def unit(session: Any, rows: Any = rows, leaves: Any = leaves) -> None:
                conn = await session.connection()
                for at in range(0, len(rows), 1000):
                    await conn.execute(Journal.__table__.insert(), rows[at : at + 1000])
                activity = [
                    {"tenant": "benchaudit", "run_id": r[0], "updated_at": 1_700_000_000}
                    for r in leaves
                ]
                await conn.execute(RunActivity.__table__.insert(), activity)
                await store._log.append(session, leaves)

            await store._unit(unit)
    finally:
        await store.close()
    return "benchaudit"


def cli_rate(backend: Backend, tenant: str, n: int, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "AGENTPLANE_JOURNAL_URL"}
    start = time.perf_counter()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentplane_journal",
            *args,
            "--url",
            backend.url,
            "--tenant",
            tenant,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        return f"failed (exit {result.returncode}): {result.stderr.strip()[:200]}"
    return f"{n / seconds:8,.0f} runs/s ({seconds:.1f} s)"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000,1000000")
    parser.add_argument("--audit-runs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--pg-url", default=os.environ.get("AGENTPLANE_JOURNAL_BENCH_PG_URL"))
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    for name in args.backends.split(","):
        factory = sqlite_backend() if name == "sqlite" else postgres_backend(args.pg_url)
        async with factory as backend:
            print(f"{backend.name}: {backend.settings}", flush=True)
            await log_figures(backend, sizes, args.rounds)
            if args.audit_runs:
                n = args.audit_runs
                tenant = await audit_journal(backend, n)
                print(
                    f"  export --all over {n:,} sealed runs: "
                    + await asyncio.to_thread(cli_rate, backend, tenant, n, "export", "--all")
                )
                print(
                    f"  verify --all over {n:,} sealed runs: "
                    + await asyncio.to_thread(cli_rate, backend, tenant, n, "verify", "--all")
                )


if __name__ == "__main__":
    asyncio.run(main())
