"""Export format 1, verify-export and restore against bare baselines, on SQLite and PostgreSQL.

    python bench/export.py [--runs 10000 [100000]] [--rounds 5] [--dialect sqlite postgresql]
                           [--pg-url postgresql+asyncpg://...] [--no-memory]
                           [--memory-phases export verify check restore]
                           [--phases export verify restore]

For each dialect and size, a source (a SQLite file, or a fresh tenant on PostgreSQL) is seeded
with that many runs (a ``RunAdmitted`` and two notes each; every other run sealed) through the
store's own checks, a batch of runs per transaction. Then, in interleaved rounds in this one
process (ours then the baseline, the next round the other way round), each phase is timed
against what a user would write by hand with the bare driver:

* ``export`` (``write_export`` of every run to a file) against **bare read + JSON lines**: one
  ``SELECT run_id, seq, prev_hash, hash, raw ... ORDER BY run_id, seq`` streamed through the
  driver's cursor, each row written as a ``json.dumps`` line (no verification, no body);
* ``verify`` (``verify_file`` of our export against the checkpoint read from the database
  before the clock starts: the command takes it from elsewhere) against **sha256 + JSON
  parse**: every line of the same file ``json.loads``-ed and each record's ``raw`` hashed once;
* ``restore`` (``restore_export`` into an empty target) against **batched INSERT**: the same
  file read and parsed, its records inserted into the journal table of an empty target with
  ``executemany``, 2,000 rows per transaction (no checks, no log, no indexes of ours).

``--phases restore`` times restore alone (the file it reads is exported once, untimed).
Each line gives the median records/s of both and the median of the rounds' ratios (ours /
bare), by the wall and by process CPU (every thread of this process, the SQLite driver's
included, a PostgreSQL server's on neither side): on a loaded machine the wall ratio swings
with the scheduler, the CPU one much less. Then, unless ``--no-memory``, each phase (and
``check``, restore's first pass alone) runs once more in a child process of its own under
``tracemalloc``: its peak of Python allocations and its peak resident set (``ru_maxrss``,
interpreter and imports included, ~70 MiB); run with ``--runs 10000 100000`` to see them not
grow with the journal (the 100k case seeds for a minute or two per dialect, so it is opt-in).
Figures, never assertions.

Without ``--pg-url``, PostgreSQL is a throwaway cluster started here with the settings users
run (``tests/support/pgcluster.py``, ``durable=True``: fsync on).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosqlite
import asyncpg
from sqlalchemy.engine import make_url

from agentplane_journal import Append, RunId, SqlJournalStore
from agentplane_journal.cli.backup import verify_file
from agentplane_journal.journal.bulk import AppendOp, Op, SealOp, write_ops
from agentplane_journal.journal.export import write_export
from agentplane_journal.journal.restore import check_frame, restore_export
from agentplane_journal.migrations.commands import upgrade
from agentplane_journal.tlog.checkpoint import Checkpoint

PHASES = ("export", "verify", "restore")
"""The timed phases (``--phases``: a subset, e.g. ``restore`` alone)."""

MEMORY_PHASES = ("export", "verify", "check", "restore")
"""``check`` is restore's first pass alone (it judges the file; nothing is written)."""

SEED_RUNS = 250
"""Runs per seeding transaction."""

BARE_BATCH = 2000
"""Rows per transaction of the bare INSERT baseline (our restore's batch)."""


async def seed(url: str, tenant: str, runs: int) -> float:
    start = time.perf_counter()
    store = await SqlJournalStore.connect(url, tenant=tenant)
    label = {"provenance": [], "sensitivity": "public", "trust": "trusted"}
    try:
        for first in range(0, runs, SEED_RUNS):
            ops: list[Op] = []
            for i in range(first, min(first + SEED_RUNS, runs)):
                run = RunId.generate()
                batch = [
                    Append(
                        run,
                        "RunAdmitted",
                        {"capability": "bench", "input": {"i": i}, "input_label": label},
                    ),
                    Append(run, "Note", {"text": f"note {i} " + "x" * 60}),
                    Append(run, "Note", {"text": "second", "n": i / 3}),
                ]
                ops.append(AppendOp(1, batch))
                if i % 2 == 0:
                    ops.append(SealOp(run, 1, "succeeded"))
            await write_ops(store, ops)
    finally:
        await store.close()
    return time.perf_counter() - start


# -- the bare baselines -------------------------------------------------------------------

_SELECT = (
    "SELECT run_id, seq, prev_hash, hash, raw FROM journal WHERE tenant = {} ORDER BY run_id, seq"
)
_INSERT = "INSERT INTO journal (tenant, run_id, seq, epoch, kind, prev_hash, hash, raw) VALUES ({})"


def _driver(url: str) -> tuple[str, str]:
    """``("sqlite", file)`` or ``("postgresql", dsn)`` for the bare driver."""
    u = make_url(url)
    if u.drivername.startswith("sqlite"):
        return "sqlite", str(u.database)
    return "postgresql", u.set(drivername="postgresql").render_as_string(hide_password=False)


def _line(run_id: str, seq: int, prev: bytes, hash_: bytes, raw: bytes) -> str:
    return (
        json.dumps(
            {
                "run": run_id,
                "seq": seq,
                "prev_hash": prev.hex(),
                "hash": hash_.hex(),
                "raw": raw.decode("utf-8"),
            },
            separators=(",", ":"),
            ensure_ascii=False,
        )
        + "\n"
    )


async def bare_export(url: str, tenant: str, path: Path) -> int:
    kind, target = _driver(url)
    n = 0
    with path.open("w", encoding="utf-8") as out:
        if kind == "sqlite":
            async with aiosqlite.connect(target) as db:
                cursor = await db.execute(_SELECT.format("?"), (tenant,))
                while rows := list(await cursor.fetchmany(1000)):
                    out.write("".join(_line(*r) for r in rows))
                    n += len(rows)
        else:
            conn = await asyncpg.connect(target)
            try:
                async with conn.transaction():
                    cur = await conn.cursor(_SELECT.format("$1"), tenant)
                    while rows := await cur.fetch(1000):
                        out.write("".join(_line(*r) for r in rows))
                        n += len(rows)
            finally:
                await conn.close()
    return n


def bare_verify(path: Path) -> int:
    n = 0
    with path.open("rb") as f:
        for line in f:
            value = json.loads(line)
            raw = value.get("raw")
            if raw is not None:
                hashlib.sha256(raw.encode("utf-8")).digest()
                n += 1
    return n


async def bare_insert(url: str, tenant: str, path: Path) -> int:
    kind, target = _driver(url)
    n = 0
    run = ""

    def batches() -> Any:
        nonlocal run, n
        rows: list[tuple[Any, ...]] = []
        with path.open("rb") as f:
            for line in f:
                value = json.loads(line)
                if value.get("kind") == "agentplane.export.run":
                    run = "run_" + value["run"]
                elif "raw" in value:
                    body = value["body"]
                    rows.append(
                        (
                            tenant,
                            run,
                            value["seq"],
                            body["epoch"],
                            body["kind"],
                            bytes.fromhex(value["prev_hash"]),
                            bytes.fromhex(value["hash"]),
                            value["raw"].encode("utf-8"),
                        )
                    )
                    if len(rows) == BARE_BATCH:
                        n += len(rows)
                        yield rows
                        rows = []
        if rows:
            n += len(rows)
            yield rows

    if kind == "sqlite":
        async with aiosqlite.connect(target) as db:
            sql = _INSERT.format(", ".join("?" * 8))
            for rows in batches():
                await db.executemany(sql, rows)
                await db.commit()
    else:
        conn = await asyncpg.connect(target)
        try:
            sql = _INSERT.format(", ".join(f"${i}" for i in range(1, 9)))
            for rows in batches():
                async with conn.transaction():
                    await conn.executemany(sql, rows)
        finally:
            await conn.close()
    return n


# -- ours ---------------------------------------------------------------------------------


async def ours_export(url: str, tenant: str, path: Path) -> int:
    store = await SqlJournalStore.connect(url, tenant=tenant)
    try:
        await store.checkpoint()  # connected and warmed before the clock starts
        start, cpu = time.perf_counter(), time.process_time()
        with path.open("w", encoding="utf-8", newline="\n") as out:
            _, trailer = await write_export(store, out)
        _ours_export.append((time.perf_counter() - start, time.process_time() - cpu))
        return trailer.records
    finally:
        await store.close()


_ours_export: list[tuple[float, float]] = []
"""``(wall, process CPU)`` seconds of each of our exports' write alone."""


async def source_checkpoint(url: str, tenant: str) -> Checkpoint:
    store = await SqlJournalStore.connect(url, tenant=tenant)
    try:
        return await store.checkpoint()
    finally:
        await store.close()


def ours_verify_file(path: Path, cp: Checkpoint) -> int:
    """``verify-export`` of ``path`` against ``cp`` (a checkpoint from elsewhere, as the
    command takes it: read from the database before the clock starts)."""
    report = verify_file(path, cp, [])
    if not report.is_sound:
        raise SystemExit(f"the export did not verify: {report.findings[:3]}")
    return report.records


async def ours_verify(url: str, tenant: str, path: Path) -> int:
    return ours_verify_file(path, await source_checkpoint(url, tenant))


async def ours_restore(url: str, tenant: str, path: Path) -> int:
    store = await SqlJournalStore.connect(url, tenant=tenant)
    try:
        report = await restore_export(store, path)
    finally:
        await store.close()
    if not report.is_faithful:
        raise SystemExit(f"the restore was not faithful: {report.to_json()}")
    return report.records


async def timed(fn: Callable[[], Awaitable[int]]) -> tuple[int, float, float]:
    """``(records, wall seconds, process CPU seconds)``: CPU counts every thread of this
    process (the SQLite driver's included, a PostgreSQL server's not, on both sides), and
    the machine's load inflates it far less than the wall."""
    start, cpu = time.perf_counter(), time.process_time()
    n = await fn()
    return n, time.perf_counter() - start, time.process_time() - cpu


class Targets:
    """Empty restore targets, migrated before any clock starts: a SQLite file each, or a
    tenant of the PostgreSQL database."""

    def __init__(self, dialect: str, pg_url: str | None, work: str) -> None:
        self.dialect, self.pg_url, self.work = dialect, pg_url, work

    def fresh(self) -> tuple[str, str]:
        if self.dialect == "postgresql":
            assert self.pg_url is not None
            return self.pg_url, f"r{uuid.uuid4().hex[:10]}"
        url = f"sqlite+aiosqlite:///{self.work}/dst-{uuid.uuid4().hex[:10]}.db"
        asyncio.run(upgrade(url))
        return url, "default"

    def drop(self, url: str) -> None:
        if url.startswith("sqlite"):
            Path(_driver(url)[1]).unlink(missing_ok=True)


Rates = dict[str, list[tuple[float, float, float, float]]]
"""Per phase, per round: (ours, bare) records per wall second, then per CPU second."""


def rounds(
    dialect: str,
    n: int,
    source: str,
    tenant: str,
    work: str,
    targets: Targets,
    count: int,
    phases: tuple[str, ...] = PHASES,
) -> list[str]:
    if count == 0:  # --rounds 0: peak memory only
        return []
    ours_file = Path(work) / f"ours-{dialect}-{n}.jsonl"
    bare_file = Path(work) / f"bare-{dialect}-{n}.jsonl"
    # per round: (ours, bare) records per wall second, then per CPU second
    rates: Rates = {p: [] for p in phases}
    if "export" not in phases:  # the others read our export: written once, untimed
        asyncio.run(ours_export(source, tenant, ours_file))
    for r in range(count):
        flip = r % 2 == 1
        if "export" in phases:
            _export_round(flip, source, tenant, ours_file, bare_file, rates)
        if "verify" in phases:
            _verify_round(flip, source, tenant, ours_file, rates)
        if "restore" in phases:
            _restore_round(flip, targets, ours_file, rates)
    out = []
    for phase, pairs in rates.items():
        ours = statistics.median(p[0] for p in pairs)
        bare = statistics.median(p[1] for p in pairs)
        ratio = statistics.median(p[0] / p[1] for p in pairs)
        cpu_ratio = statistics.median(p[2] / p[3] for p in pairs)
        out.append(
            f"{dialect:>10} {n:>7} {phase:>8} {ours:>12,.0f} {bare:>12,.0f} {ratio:>7.2f}"
            f" {cpu_ratio:>9.2f}"
        )
    ours_file.unlink(missing_ok=True)
    bare_file.unlink(missing_ok=True)
    return out


def _export_round(
    flip: bool, source: str, tenant: str, ours_file: Path, bare_file: Path, rates: Rates
) -> None:
    pair = [
        lambda: timed(lambda: ours_export(source, tenant, ours_file)),
        lambda: timed(lambda: bare_export(source, tenant, bare_file)),
    ]
    got: dict[int, tuple[int, float, float]] = {}
    for i in [1, 0] if flip else [0, 1]:
        got[i] = asyncio.run(pair[i]())
    ours_s, ours_cpu = _ours_export[-1]  # the write alone, without connecting
    rates["export"].append(
        (got[0][0] / ours_s, got[1][0] / got[1][1], got[0][0] / ours_cpu, got[1][0] / got[1][2])
    )


def _verify_round(flip: bool, source: str, tenant: str, ours_file: Path, rates: Rates) -> None:
    # both read our file; the checkpoint is read before the clock (the command takes it
    # from elsewhere), so the verify pass alone is timed, as export's write is
    got: dict[int, tuple[int, float, float]] = {}
    cp = asyncio.run(source_checkpoint(source, tenant))
    for i in [1, 0] if flip else [0, 1]:
        start, cpu = time.perf_counter(), time.process_time()
        n = ours_verify_file(ours_file, cp) if i == 0 else bare_verify(ours_file)
        got[i] = (n, time.perf_counter() - start, time.process_time() - cpu)
    rates["verify"].append(_rates(got))


def _restore_round(flip: bool, targets: Targets, ours_file: Path, rates: Rates) -> None:
    got: dict[int, tuple[int, float, float]] = {}
    for i in [1, 0] if flip else [0, 1]:
        url, dst = targets.fresh()
        fn: Callable[[str, str, Path], Awaitable[int]] = ours_restore if i == 0 else bare_insert

        def restore_once(
            fn: Callable[[str, str, Path], Awaitable[int]] = fn, url: str = url, dst: str = dst
        ) -> Awaitable[int]:
            return fn(url, dst, ours_file)

        got[i] = asyncio.run(timed(restore_once))
        targets.drop(url)
    rates["restore"].append(_rates(got))


def _rates(got: dict[int, tuple[int, float, float]]) -> tuple[float, float, float, float]:
    (n0, wall0, cpu0), (n1, wall1, cpu1) = got[0], got[1]
    return n0 / wall0, n1 / wall1, n0 / max(cpu0, 1e-9), n1 / max(cpu1, 1e-9)


# -- peak memory, in a child process per phase ------------------------------------------


async def phase(kind: str, url: str, tenant: str, path: Path) -> dict[str, object]:
    tracemalloc.start()
    tracemalloc.reset_peak()
    if kind == "export":
        n = await ours_export(url, tenant, path)
    elif kind == "verify":
        n = await ours_verify(url, tenant, path)
    elif kind == "check":  # restore's first pass alone (judging the file, nothing written)
        n = check_frame(path).checkpoint.size
    else:
        n = await ours_restore(url, tenant, path)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {"records": n, "py_peak_mib": peak, "rss_peak_mib": rss}


def child(kind: str, url: str, tenant: str, path: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, __file__, "--phase", kind, url, tenant, str(path)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1:]}
    loaded: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


def memory(
    dialect: str,
    n: int,
    source: str,
    tenant: str,
    work: str,
    targets: Targets,
    kinds: tuple[str, ...] = MEMORY_PHASES,
) -> list[str]:
    path = Path(work) / f"mem-{dialect}-{n}.jsonl"
    out = []
    for kind in kinds:
        url, dst = (source, tenant) if kind != "restore" else targets.fresh()
        r = child(kind, url, dst, path)
        if kind == "restore":
            targets.drop(url)
        if "error" in r:
            out.append(f"{dialect:>10} {n:>7} {kind:>8} FAILED {r['error']}")
            continue
        out.append(
            f"{dialect:>10} {n:>7} {kind:>8} {r['py_peak_mib']:>10.1f} {r['rss_peak_mib']:>10.1f}"
        )
    path.unlink(missing_ok=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, nargs="+", default=[10_000])
    parser.add_argument(
        "--dialect", nargs="+", choices=["sqlite", "postgresql"], default=["sqlite", "postgresql"]
    )
    parser.add_argument("--pg-url")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument(
        "--phases",
        nargs="+",
        choices=PHASES,
        default=list(PHASES),
        help="phases timed against their baselines (the others' file is still exported once)",
    )
    parser.add_argument(
        "--memory-phases",
        nargs="+",
        choices=MEMORY_PHASES,
        default=list(MEMORY_PHASES),
        help="phases measured for memory (export first: the others read its file)",
    )
    parser.add_argument("--phase", nargs=4, metavar=("KIND", "URL", "TENANT", "PATH"))
    args = parser.parse_args()
    if args.phase:
        kind, url, tenant, path = args.phase
        print(json.dumps(asyncio.run(phase(kind, url, tenant, Path(path)))))
        return
    cluster = None
    if "postgresql" in args.dialect and args.pg_url is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from support.pgcluster import Cluster

        cluster = Cluster(durable=True)
        args.pg_url = cluster.url
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    speed: list[str] = []
    mem: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-export-") as work:
            for dialect in args.dialect:
                targets = Targets(dialect, args.pg_url, work)
                for n in args.runs:
                    if dialect == "postgresql":
                        source, tenant = args.pg_url, f"b{uuid.uuid4().hex[:10]}"
                    else:
                        source, tenant = f"sqlite+aiosqlite:///{work}/src-{n}.db", "default"
                    asyncio.run(upgrade(source))
                    seeded = asyncio.run(seed(source, tenant, n))
                    print(f"{dialect} {n} runs seeded in {seeded:.1f} s", flush=True)
                    phases = tuple(p for p in PHASES if p in args.phases)
                    speed += rounds(dialect, n, source, tenant, work, targets, args.rounds, phases)
                    print("\n".join(speed[-len(phases) :]), flush=True)
                    if not args.no_memory:
                        kinds = tuple(args.memory_phases)
                        if "export" not in kinds:
                            kinds = ("export", *kinds)
                        mem += memory(dialect, n, source, tenant, work, targets, kinds)
                        print("\n".join(mem[-len(kinds) :]), flush=True)
                    if dialect == "sqlite":
                        Path(_driver(source)[1]).unlink(missing_ok=True)
    finally:
        if cluster is not None:
            cluster.stop()
    print(
        f"\nrecords/s, median of {args.rounds} interleaved rounds (ratio: median of ours/bare;"
        " cpu ratio: the same per process CPU-second)"
    )
    print(
        f"{'dialect':>10} {'runs':>7} {'phase':>8} {'ours':>12} {'bare':>12} {'ratio':>7}"
        f" {'cpu ratio':>9}"
    )
    print("\n".join(speed))
    if mem:
        print("\npeak memory of each phase alone, in a child process (MiB)")
        print(f"{'dialect':>10} {'runs':>7} {'phase':>8} {'python':>10} {'rss':>10}")
        print("\n".join(mem))
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
