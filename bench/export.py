"""Export format 1, verify-export and restore at scale, on SQLite and PostgreSQL.

    python bench/export.py [--runs 10000 100000] [--dialect sqlite postgresql]
                           [--pg-url postgresql+asyncpg://...] [--phases verify restore] [--py-peak]

For each dialect and size: a source (a SQLite file, or a fresh tenant on PostgreSQL) is
seeded with that many runs (a ``RunAdmitted`` and two notes each; every other run sealed)
through the store's own checks, a batch of runs per transaction
(:func:`agentplane_journal.journal.bulk.write_steps`), so a 100k-run source takes minutes,
not hours. Then, each in a child process of its own so that one phase's memory cannot hide
in another's: ``export --all`` to a file; ``verify-export`` of that file against the
checkpoint read from the source database (not from the file); ``restore`` of the file into
an empty target (a migrated SQLite file, or another tenant). Each child reports its wall
and CPU seconds (the process's, the SQLite thread's included) and its peak resident set
(``ru_maxrss``, which includes the interpreter and the imports, ~70 MiB). With
``--py-peak`` every phase runs once more under ``tracemalloc`` (rows marked ``+tm``) for the
peak of Python's own allocations during the phase; tracing slows allocation-heavy code two
to four times, so those rows' seconds are not the timing. The last column says whether the
rebuilt root equals the source's at equal size. Bounded memory shows as figures that do not
grow with the journal. Figures, never assertions.

Without ``--pg-url``, PostgreSQL is a throwaway cluster started here with the settings
users run (``tests/support/pgcluster.py``, ``durable=True``: fsync on).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentplane_journal import Append, RunId, SqlJournalStore
from agentplane_journal.cli.backup import verify_file
from agentplane_journal.journal.bulk import AppendStep, SealStep, Step, write_steps
from agentplane_journal.journal.export import write_export
from agentplane_journal.journal.restore import restore_export
from agentplane_journal.migrations.commands import upgrade

SEED_RUNS = 250
"""Runs per seeding transaction."""


async def seed(url: str, tenant: str, runs: int) -> float:
    start = time.perf_counter()
    store = await SqlJournalStore.connect(url, tenant=tenant)
    label = {"provenance": [], "sensitivity": "public", "trust": "trusted"}
    try:
        for first in range(0, runs, SEED_RUNS):
            steps: list[Step] = []
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
                steps.append(AppendStep(1, batch))
                if i % 2 == 0:
                    steps.append(SealStep(run, 1, "succeeded"))
            await write_steps(store, steps)
    finally:
        await store.close()
    return time.perf_counter() - start


@contextmanager
def measured(result: dict[str, object], traced: bool) -> Iterator[None]:
    before = resource.getrusage(resource.RUSAGE_SELF)
    if traced:
        tracemalloc.start()
    start = time.perf_counter()
    try:
        yield
    finally:
        result["seconds"] = time.perf_counter() - start
        if traced:
            result["py_peak_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
        after = resource.getrusage(resource.RUSAGE_SELF)
        result["cpu_seconds"] = (after.ru_utime - before.ru_utime) + (
            after.ru_stime - before.ru_stime
        )
        result["rss_peak_mib"] = after.ru_maxrss / 1024  # KiB on Linux


async def phase(kind: str, url: str, tenant: str, path: Path, traced: bool) -> dict[str, object]:
    store = await SqlJournalStore.connect(url, tenant=tenant)
    result: dict[str, object] = {}
    try:
        cp = await store.checkpoint()  # connected and warmed before measuring
        if kind == "export":
            with measured(result, traced), path.open("w", encoding="utf-8", newline="\n") as out:
                cp, trailer = await write_export(store, out)
                result.update(records=trailer.records, bytes=out.tell())
            result.update(size=cp.size, root=cp.root.hex())
        elif kind == "verify":
            with measured(result, traced):
                report = verify_file(path, cp, [])
            result.update(sound=report.is_sound, runs=len(report.sound))
        else:
            with measured(result, traced):
                restored = await restore_export(store, path)
            result.update(
                faithful=restored.is_faithful,
                records=restored.records,
                size=restored.rebuilt.size,
                root=restored.rebuilt.root.hex(),
            )
    finally:
        await store.close()
    return result


def child(kind: str, url: str, tenant: str, path: Path, traced: bool) -> dict[str, object]:
    flag = ["--traced"] if traced else []
    out = subprocess.run(
        [sys.executable, __file__, "--phase", kind, url, tenant, str(path), *flag],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1:]}
    loaded: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


def _row(dialect: str, n: int, name: str, r: dict[str, object], extra: str) -> str:
    if "error" in r:
        return f"{dialect:>10} {n:>7} {name:>8} FAILED {r['error']}"
    py = r.get("py_peak_mib")
    return (
        f"{dialect:>10} {n:>7} {name:>8} {r['seconds']:>8.1f} {r['cpu_seconds']:>7.1f} "
        f"{r['rss_peak_mib']:>8.1f} {'-' if py is None else f'{py:.1f}':>7}  {extra}"
    )


def bench(
    dialect: str, n: int, pg_url: str | None, work: str, phases: list[str], traced_too: bool
) -> None:
    def empty_target(tag: str) -> tuple[str, str]:
        if dialect == "postgresql":
            assert pg_url is not None
            return pg_url, f"r{uuid.uuid4().hex[:8]}"
        url = f"sqlite+aiosqlite:///{work}/dst-{n}-{tag}.db"
        asyncio.run(upgrade(url))
        return url, "default"

    if dialect == "postgresql":
        assert pg_url is not None
        source, src_tenant = pg_url, f"b{uuid.uuid4().hex[:8]}"
    else:
        source, src_tenant = f"sqlite+aiosqlite:///{work}/src-{n}.db", "default"
    asyncio.run(upgrade(source))
    seeded = asyncio.run(seed(source, src_tenant, n))
    print(f"{dialect:>10} {n:>7} {'seed':>8} {seeded:>8.1f}", flush=True)
    path = Path(work) / f"export-{dialect}-{n}.jsonl"
    for traced in [False, True] if traced_too else [False]:
        mark = "+tm" if traced else ""
        e = child("export", source, src_tenant, path, traced)
        size = int(e.get("bytes", 0)) / 2**20  # type: ignore[call-overload]
        note = f"{e.get('records')} records, {size:.1f} MiB"
        print(_row(dialect, n, "export" + mark, e, note), flush=True)
        if "verify" in phases:
            v = child("verify", source, src_tenant, path, traced)
            print(_row(dialect, n, "verify" + mark, v, f"sound={v.get('sound')}"), flush=True)
        if "restore" in phases:
            target, dst_tenant = empty_target("tm" if traced else "t")
            r = child("restore", target, dst_tenant, path, traced)
            equal = r.get("root") == e.get("root") and r.get("size") == e.get("size")
            note = f"faithful={r.get('faithful')} equal_root={equal} size={r.get('size')}"
            print(_row(dialect, n, "restore" + mark, r, note), flush=True)
    path.unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument(
        "--dialect", nargs="+", choices=["sqlite", "postgresql"], default=["sqlite"]
    )
    parser.add_argument("--pg-url")
    parser.add_argument(
        "--phases", nargs="+", choices=["verify", "restore"], default=["verify", "restore"]
    )
    parser.add_argument(
        "--py-peak",
        action="store_true",
        help="run every phase a second time under tracemalloc (slower) for Python's peak",
    )
    parser.add_argument("--phase", nargs=4, metavar=("KIND", "URL", "TENANT", "PATH"))
    parser.add_argument("--traced", action="store_true")
    args = parser.parse_args()
    if args.phase:
        kind, url, tenant, path = args.phase
        print(json.dumps(asyncio.run(phase(kind, url, tenant, Path(path), args.traced))))
        return
    cluster = None
    if "postgresql" in args.dialect and args.pg_url is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from support.pgcluster import Cluster

        cluster = Cluster(durable=True)
        args.pg_url = cluster.url
    print(
        f"{'dialect':>10} {'runs':>7} {'phase':>8} {'wall s':>8} {'cpu s':>7} "
        f"{'rss MiB':>8} {'py MiB':>7}"
    )
    try:
        with tempfile.TemporaryDirectory(prefix="bench-export-") as work:
            for dialect in args.dialect:
                for n in args.runs:
                    bench(dialect, n, args.pg_url, work, args.phases, args.py_peak)
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
