"""An honest run to tamper with (``Victim``, ``honest_run``) and the command line that must
catch it, for the tamper-evidence tests."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import os
import subprocess
import sys
import traceback
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from agentplane_journal import (
    CaseId,
    Ed25519Signer,
    Ed25519Verifier,
    RunId,
    SqlJournalStore,
)
from agentplane_journal.cli.main import main as cli_main

from support.checks_tools import around_checks
from support.helpers import admitted, concluded, key, note, started

SIGNER = Ed25519Signer("tamper-key", bytes(range(32)))


VERIFIER = Ed25519Verifier().trust("tamper-key", SIGNER.public_key)


CLI = [sys.executable, "-m", "agentplane_journal.cli.main"]


@dataclass
class Victim:
    """A run built honestly, then tampered with."""

    store: SqlJournalStore
    run: RunId
    case: CaseId
    sealed: bool

    @property
    def params(self) -> dict[str, Any]:
        return {"t": self.store.tenant, "r": str(self.run)}

    async def sql(self, statement: str, *, around: tuple[str, ...] = (), **params: Any) -> None:
        """Run ``statement``; ``around``: tables whose floor CHECKs it must get past."""
        async with self.store.engine.begin() as conn, around_checks(conn, *around):
            await conn.execute(text(statement), {**self.params, **params})

    async def row(self, seq: int) -> Any:
        async with self.store.engine.connect() as conn:
            return (
                await conn.execute(
                    text(f"SELECT prev_hash, raw FROM journal {_AT_SEQ}"),
                    {**self.params, "s": seq},
                )
            ).one()

    async def rewrite_body(self, seq: int, raw: bytes) -> None:
        """Replace a row's bytes with ``raw`` and recompute its hash: the row re-hashes."""
        prev, _ = await self.row(seq)
        digest = hashlib.sha256(bytes(prev) + raw).digest()
        await self.sql(
            "UPDATE journal SET raw=:raw, hash=:h, key_id=NULL, signature=NULL "
            "WHERE tenant=:t AND run_id=:r AND seq=:s",
            raw=raw,
            h=digest,
            s=seq,
        )


async def honest_run(store: SqlJournalStore, *, seal: bool = False) -> Victim:
    """seq 1 RunAdmitted (names a case), 2 EffectStarted key(1), 3 Note, [4 RunSealed]."""
    run, case = RunId.generate(), CaseId.generate()
    lease = await store.acquire(run, "worker", 60)
    await store.append(lease.epoch, [admitted(run, case), started(run, key(1)), note(run)])
    if seal:
        await store.append(lease.epoch, [concluded(run, "succeeded")])
        await store.seal(run, lease.epoch, "succeeded")
    return Victim(store, run, case, seal)


_AT_SEQ = "WHERE tenant=:t AND run_id=:r AND seq=:s"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTPLANE_JOURNAL_URL"}
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def _main(args: tuple[str, ...]) -> Ran:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException:
            traceback.print_exc()
            code = 70
    return Ran(code, out.getvalue(), err.getvalue())


async def tamper_cli(*args: str) -> Any:
    """The command line's ``main`` on a thread of its own (it runs its own event loop)."""
    result = await asyncio.to_thread(_main, args)
    assert "Traceback" not in result.stderr, result.stderr
    return result
