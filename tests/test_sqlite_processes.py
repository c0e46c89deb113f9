"""Several processes appending to one SQLite file never fork a chain.

Each process is its own interpreter with its own engine: the only thing serialising them is
SQLite's write lock, taken at ``BEGIN IMMEDIATE`` and waited for on ``busy_timeout``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agentplane_journal import RunId, SqlJournalStore

pytestmark = pytest.mark.slow

PROCESSES = 4
APPENDS = 25

WRITER = """
import asyncio, sys
from agentplane_journal import Append, RunId, SqlJournalStore

async def main(url, shared, own, name, n, go):
    store = await SqlJournalStore.connect(url)
    await store.head(RunId.parse(shared))          # connected and schema-checked
    while not __import__("os").path.exists(go):    # the start barrier, across processes
        await asyncio.sleep(0.005)
    for i in range(n):
        await store.append(1, [Append(shared, "Note", {"text": f"{name} {i}"})])
        await store.append(1, [Append(own, "Note", {"text": f"{name} {i}"})])
    await store.close()

asyncio.run(main(*sys.argv[1:5], int(sys.argv[5]), sys.argv[6]))
"""


def test_processes_sharing_one_file_never_fork_a_chain(
    sqlite_database: Callable[..., str], tmp_path: Path
) -> None:
    url = sqlite_database()
    shared = RunId.generate()
    own = [RunId.generate() for _ in range(PROCESSES)]
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WRITER,
                url,
                str(shared),
                str(own[i]),
                f"p{i}",
                str(APPENDS),
                str(go),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(PROCESSES)
    ]
    go.touch()
    errors = [p.communicate(timeout=120)[1] for p in procs]
    failed = [e for p, e in zip(procs, errors, strict=True) if p.returncode]
    assert not failed, "\n".join(failed)  # whole tracebacks, not a truncated list

    asyncio.run(_check(url, shared, own))


async def _check(url: str, shared: RunId, own: list[RunId]) -> None:
    store = await SqlJournalStore.connect(url)
    try:
        records = await store.read(shared)
        assert [r.seq for r in records] == list(range(1, PROCESSES * APPENDS + 1))
        texts = sorted(r.body["text"] for r in records)
        assert texts == sorted(f"p{p} {i}" for p in range(PROCESSES) for i in range(APPENDS))
        await store.verify(shared)
        for run in own:
            assert len(await store.read(run)) == APPENDS
            await store.verify(run)
    finally:
        await store.close()
