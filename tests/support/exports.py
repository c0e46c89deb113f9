"""Building a journal, exporting it in format 1 and editing its lines, for the export, verify-export
and restore tests."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from agentplane_journal import Append, CaseId, RunId, SqlJournalStore
from agentplane_journal.exportfmt.verify import ExportVerifier, VerifyReport
from agentplane_journal.journal import restore as restore_mod
from agentplane_journal.journal.export import write_export

from support.helpers import TRUSTED, key, note, started

RUNS = 60


async def _seal(store: SqlJournalStore, run: RunId, epoch: int, outcome: str) -> None:
    head = await store.head(run)
    await store.append(
        epoch, [Append(run, "RunSealed", {"outcome": outcome, "chain_head": head.hash.hex()})]
    )
    await store.seal(run, epoch, outcome)


async def build(store: SqlJournalStore, n: int = RUNS, long: bool = True) -> dict[str, Any]:
    """A history of ``n`` runs (one longer than a restore batch if ``long``); returns what
    the checks below look up. The tampering tests use a small one: they edit a file."""
    runs = [RunId.generate() for _ in range(n)]
    case = CaseId.generate()
    for i, run in enumerate(runs):
        payload = {
            "capability": "c",
            "input": {"i": i, "x": 1.5, "big": 2**60},
            "input_label": TRUSTED,
        }
        if i == 3:
            payload["idempotency_key"] = "order-3"
        await store.append(
            1, [Append(run, "RunAdmitted", payload, case=case if i % 7 == 0 else None)]
        )
        await store.append(1, [started(run, key(i % 200)), note(run, f'run {i} — ünïcode "q"')])
    # A run that changed hands: records under epoch 1, then under epoch 2 (no lease rows:
    # the history a takeover leaves, written without waiting one out).
    handed = runs[5]
    await store.append(
        2,
        [
            note(handed, "the new owner"),
            Append(handed, "Note", {"text": "x"}, step=1, phase="compensating"),
        ],
    )
    # A run longer than a restore batch.
    long_run = runs[6]
    for start in range(0, restore_mod.BATCH + 20 if long else 0, 100):
        await store.append(1, [note(long_run, f"n{start + j}") for j in range(100)])
    # Sealed in an order unlike the ids: every third run from the end, then the handed run.
    sealed = [r for j, r in enumerate(reversed(runs)) if j % 3 == 0 and r != handed]
    for run in sealed:
        await _seal(store, run, 1, "succeeded")
    await _seal(store, handed, 2, "failed")
    return {"runs": runs, "handed": handed, "sealed": [*sealed, handed], "long": long_run}


async def export_to(store: SqlJournalStore, path: Path) -> Any:
    with path.open("w", encoding="utf-8", newline="\n") as out:
        cp, trailer = await write_export(store, out)
    return cp, trailer


def verify_lines(lines: list[str], expected: Any, verifier: Any = None) -> VerifyReport:
    check = ExportVerifier(verifier)
    for line in lines:
        if not check.feed(line):
            break
    return check.finish(expected)


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def other_tenant(store: SqlJournalStore) -> SqlJournalStore:
    return store.for_tenant(f"r{uuid.uuid4().hex[:10]}")


def fix_trailer(lines: list[str]) -> list[str]:
    """Rewrite the trailer's counts to match the (edited) file, as a careful editor would."""
    blocks = [json.loads(x) for x in lines if '"kind":"agentplane.export.run"' in x]
    records = sum(1 for x in lines if not x.startswith('{"kind"'))
    trailer = json.loads(lines[-1])
    trailer.update(runs_requested=len(blocks), runs_exported=len(blocks), records=records)
    return [*lines[:-1], json.dumps(trailer, separators=(",", ":"))]
