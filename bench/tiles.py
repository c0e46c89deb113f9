"""tlog-tiles export at scale: a full export, then incremental ones, counting files written.

    python bench/tiles.py [--sizes 100000,1000000] [--appends 1,1000,10000]
                          [--backends sqlite,postgresql] [--pg-url postgresql+asyncpg://...]

For each backend and size: one tenant's log is grown in bulk through the code a seal runs
(``TenantLog.append``, 5,000 leaves a transaction, as ``bench/log.py`` does), exported from
scratch (``tiles export``'s ``export_tiles``) into a new directory, then for each ``k`` in
``--appends`` k more leaves are sealed and the export is run again. Printed: seconds, files
written, and the bound the claim is about, ``ceil(k/256) * 2 + levels + 1`` (new full hash
tiles and entry bundles, one partial tile per level, and the checkpoint): appending k entries
writes O(k/256 + log n) files, whatever n is. Figures, never assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from backends import postgres_backend, sqlite_backend
from log import grow

from agentplane_journal import NoteSigner, RunId, SqlJournalStore
from agentplane_journal.cli.tiles import export_tiles
from agentplane_journal.tlog.tiles import new_tiles, tiles_for_size

ROOT = Path(__file__).resolve().parent.parent


async def scales_check(store: SqlJournalStore, location: str, runs: list[str]) -> str:
    """tlog-scales (an independent client) at ``location``: root and inclusion proofs."""
    from tlog_scales import backend, reader

    start = time.perf_counter()
    tr = reader.TilesReader(backend.make_backend(location))
    cp = tr.get_checkpoint()
    ours = await store.checkpoint()
    same_root = tr.calculate_root_hash() == bytes(ours.root) and cp.size == ours.size
    same_proofs = True
    for index in random.sample(range(cp.size), 3):
        inc = await store.inclusion_proof(RunId.parse(runs[index]))
        proof = tr.get_inclusion_proof(index, cp.size).node_hashes
        same_proofs &= inc is not None and proof == [bytes(p) for p in inc.proof]
    took = time.perf_counter() - start
    root = "==" if same_root else "!="
    proofs = "==" if same_proofs else "!="
    return f"root {root} ours, 3 proofs {proofs} ours ({took:.1f}s)"


def serve(url: str, tenant: str, key: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "agentplane_journal", "serve", "--url", url]
    argv += ["--tenant", tenant, "--sign-key-file", str(key), "--port", str(port)]
    proc = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(ROOT)})
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with urllib.request.urlopen(base + "/", timeout=5):
                break
        except OSError:
            time.sleep(0.1)
    return proc, f"{base}/{tenant}/"


async def figures(url: str, sizes: list[int], appends: list[int]) -> None:
    signer_seed = bytes(range(32))
    for size in sizes:
        store = await SqlJournalStore.connect(url, tenant=f"benchtiles{size}")
        signer = NoteSigner(store.origin, signer_seed)
        runs: list[str] = []
        start = time.perf_counter()
        await grow(store, runs, size)
        grown = time.perf_counter() - start
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp) / "log"
            start = time.perf_counter()
            report = await export_tiles(store, directory, signer)
            took = time.perf_counter() - start
            print(
                f"  n={size:,}: grown in {grown:.1f}s; full export {took:.1f}s, "
                f"{report.written:,} files ({len(tiles_for_size(size)):,} hash tiles)",
                flush=True,
            )
            found = await scales_check(store, str(directory), runs)
            print(f"    tlog-scales, exported directory: {found}", flush=True)
            key = Path(tmp) / "key"
            key.write_bytes(signer_seed)
            key.chmod(0o600)
            proc, base = await asyncio.to_thread(serve, url, store.tenant, key)
            try:
                found = await scales_check(store, base, runs)
                print(f"    tlog-scales, served over HTTP: {found}", flush=True)
            finally:
                proc.terminate()
                proc.wait()
            for k in appends:
                await grow(store, runs, len(runs) + k)
                start = time.perf_counter()
                report = await export_tiles(store, directory, signer)
                took = time.perf_counter() - start
                levels = len({t.level for t in tiles_for_size(len(runs))})
                bound = 2 * math.ceil(k / 256) + levels + 2
                print(
                    f"    +{k:,} -> n={len(runs):,}: {report.written} files written "
                    f"(bound {bound}), {took * 1000:.0f} ms",
                    flush=True,
                )
        await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--appends", default="1,1000,10000")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--pg-url", default=os.environ.get("AGENTPLANE_JOURNAL_BENCH_PG_URL"))
    parser.add_argument(
        "--plan-only",
        action="store_true",
        help="print only the files an export would write (the arithmetic the measured "
        "exports follow exactly), no database: for sizes too large to grow here",
    )
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    appends = [int(k) for k in args.appends.split(",")]
    if args.plan_only:
        for n in sizes:
            for k in appends:
                plan = new_tiles(n, n + k)
                files = len(plan) + sum(t.level == 0 for t in plan) + 1
                print(f"  n={n:,} +{k:,}: {files} files (arithmetic, not measured)")
        return
    for name in args.backends.split(","):
        factory = sqlite_backend() if name == "sqlite" else postgres_backend(args.pg_url)
        async with factory as backend:
            print(f"{backend.name}: {backend.settings}", flush=True)
            await figures(backend.url, sizes, appends)


if __name__ == "__main__":
    asyncio.run(main())
