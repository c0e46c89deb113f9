"""The command line in tests: what the in-process ``cli`` fixture returns (``CliResult``), and
the subprocess runner and journal builders the CLI tests share (``run_cli``, ``add_runs``)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from agentplane_journal import (
    Ed25519Signer,
    RunId,
    SqlJournalStore,
)

from support.helpers import admitted, concluded, key, note, started


@dataclass
class CliResult:
    """What one in-process ``agentplane-journal`` call returned and printed."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def out(self) -> str:
        """Both streams, for a check that does not care which one said it."""
        return self.stdout + self.stderr


CLI = [sys.executable, "-m", "agentplane_journal.cli.main"]


SIGNER = Ed25519Signer("test-key", bytes(range(32)))


def run_cli(
    *args: str,
    cwd: Path | None = None,
    command: list[str] | None = None,
    url_env: str | None = None,
    **kw: object,
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTPLANE_JOURNAL_URL"}
    if url_env is not None:
        env["AGENTPLANE_JOURNAL_URL"] = url_env
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [*(command or CLI), *args],
        text=True,
        cwd=cwd,
        env=env,
        timeout=60,
        **kw,
    )


def db_path(url: str) -> str:
    return url.split(":///", 1)[1]


async def _run(store: SqlJournalStore, *, seal: bool) -> str:
    run = RunId.generate()
    lease = await store.acquire(run, "worker", 60)
    await store.append(lease.epoch, [admitted(run), started(run, key(1)), note(run)])
    if seal:
        await store.append(lease.epoch, [concluded(run, "succeeded")])
        await store.seal(run, lease.epoch, "succeeded")
    return str(run)


async def add_runs(url: str, sealed: int = 0, open_: int = 0, tenant: str | None = None) -> list:
    store = await SqlJournalStore.connect(url, signer=SIGNER)
    handle = store if tenant is None else store.for_tenant(tenant)
    try:
        return [await _run(handle, seal=i < sealed) for i in range(sealed + open_)]
    finally:
        await store.close()
