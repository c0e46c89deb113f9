"""Export format 1 and restore at scale: time, file size and peak memory at 10k and 100k runs.

    python bench/export.py [--runs 10000 100000] [--pg-url postgresql+asyncpg://...]

For each size: a SQLite file (or a fresh tenant on ``--pg-url``) gets that many runs (a
``RunAdmitted`` and two notes each; every other run sealed), written concurrently so group
commit shares the commits. Then, each in a child process of its own so one phase's memory
cannot hide in another's: ``export --all`` to a file, and ``restore`` of that file into an
empty migrated database. Each child reports its wall time, its peak resident set
(``ru_maxrss``) and the peak of Python's own allocations after start-up (``tracemalloc``).
Bounded memory shows as figures that do not grow with the journal. Figures, never
assertions.
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
from pathlib import Path

from agentplane_journal import Append, RunId, SqlJournalStore
from agentplane_journal.journal.export import write_export
from agentplane_journal.journal.restore import restore_export
from agentplane_journal.migrations.commands import upgrade

WRITERS = 32


async def build(url: str, tenant: str, runs: int) -> float:
    start = time.perf_counter()
    store = await SqlJournalStore.connect(url, tenant=tenant)
    counter = iter(range(runs))
    label = {"provenance": [], "sensitivity": "public", "trust": "trusted"}

    async def writer() -> None:
        for i in counter:
            run = RunId.generate()
            await store.append(
                1,
                [
                    Append(
                        run,
                        "RunAdmitted",
                        {"capability": "bench", "input": {"i": i}, "input_label": label},
                    ),
                    Append(run, "Note", {"text": f"note {i} " + "x" * 60}),
                    Append(run, "Note", {"text": "second", "n": i / 3}),
                ],
            )
            if i % 2 == 0:
                await store.seal(run, 1, "succeeded")

    try:
        await asyncio.gather(*(writer() for _ in range(WRITERS)))
    finally:
        await store.close()
    return time.perf_counter() - start


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


async def phase(kind: str, url: str, tenant: str, path: Path) -> dict[str, object]:
    store = await SqlJournalStore.connect(url, tenant=tenant)
    try:
        await store.checkpoint()  # connected and warmed before measuring
        tracemalloc.start()
        start = time.perf_counter()
        if kind == "export":
            with path.open("w", encoding="utf-8", newline="\n") as out:
                cp, trailer = await write_export(store, out)
                written = out.tell()
            result: dict[str, object] = {
                "size": cp.size,
                "records": trailer.records,
                "bytes": written,
            }
        else:
            report = await restore_export(store, path)
            result = {"faithful": report.is_faithful, "records": report.records}
        result["seconds"] = time.perf_counter() - start
        result["py_peak_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    finally:
        await store.close()
    result["rss_peak_mib"] = _peak_rss_mib()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu_seconds"] = usage.ru_utime + usage.ru_stime
    return result


def child(kind: str, url: str, tenant: str, path: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, __file__, "--phase", kind, url, tenant, str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--pg-url")
    parser.add_argument("--phase", nargs=4, metavar=("KIND", "URL", "TENANT", "PATH"))
    args = parser.parse_args()
    if args.phase:
        kind, url, tenant, path = args.phase
        print(json.dumps(asyncio.run(phase(kind, url, tenant, Path(path)))))
        return
    print(
        f"{'runs':>8} {'build s':>8} | {'export s':>8} {'MiB file':>8} {'rss MiB':>8} "
        f"{'py MiB':>7} | {'restore s':>9} {'rss MiB':>8} {'py MiB':>7} faithful"
    )
    with tempfile.TemporaryDirectory(prefix="bench-export-") as work:
        for n in args.runs:
            if args.pg_url:
                source = target = args.pg_url
                src_tenant, dst_tenant = f"b{uuid.uuid4().hex[:8]}", f"r{uuid.uuid4().hex[:8]}"
                asyncio.run(upgrade(source))
            else:
                source = f"sqlite+aiosqlite:///{work}/src-{n}.db"
                target = f"sqlite+aiosqlite:///{work}/dst-{n}.db"
                src_tenant = dst_tenant = "default"
                asyncio.run(upgrade(source))
                asyncio.run(upgrade(target))
            built = asyncio.run(build(source, src_tenant, n))
            path = Path(work) / f"export-{n}.jsonl"
            e = child("export", source, src_tenant, path)
            r = child("restore", target, dst_tenant, path)
            print(
                f"{n:>8} {built:>8.1f} | {e['seconds']:>8.1f} {int(e['bytes']) / 2**20:>8.1f} "  # type: ignore[call-overload]
                f"{e['rss_peak_mib']:>8.1f} {e['py_peak_mib']:>7.1f} | {r['seconds']:>9.1f} "
                f"{r['rss_peak_mib']:>8.1f} {r['py_peak_mib']:>7.1f} {r['faithful']}",
                flush=True,
            )
            path.unlink()


if __name__ == "__main__":
    main()
