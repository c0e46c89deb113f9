"""Large runs written in bulk, for the streaming and paged-audit tests."""

from __future__ import annotations

from typing import Any

from agentplane_journal import Append, Digest, Record, RunId, SqlJournalStore
from agentplane_journal.db.models import Journal
from agentplane_journal.journal import reads as reads

MiB = 2**20


async def bulk_run(store: SqlJournalStore, n: int, pad: int = 0, chunk: int = 1000) -> RunId:
    """A run of ``n`` chained records inserted in bulk (what ``n`` appends would write),
    each padded with ``pad`` bytes of text."""
    run, prev, rows = RunId.generate(), Digest.ZERO, []
    for seq in range(1, n + 1):
        text = f"n{seq}" + "x" * pad
        record = Record.seal(Append(run, "Note", {"text": text}).body(seq, 1), prev, None)
        rows.append(
            {
                "tenant": store.tenant,
                "run_id": str(run),
                "seq": seq,
                "epoch": 1,
                "kind": "Note",
                "effect_key": None,
                "prev_hash": bytes(prev),
                "hash": bytes(record.hash),
                "raw": record.raw,
                "key_id": None,
                "signature": None,
                "case_id": None,
            }
        )
        prev = record.hash

    async def unit(session: Any) -> None:
        for start in range(0, n, chunk):
            await session.execute(Journal.__table__.insert(), rows[start : start + chunk])

    await store._unit(unit)
    return run
