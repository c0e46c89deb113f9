"""Admission-key records and a run admitted under one, for the admission tests (test_admissions*,
test_admission_race, test_bounds_audit, test_schema_compat_022)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from agentplane_journal import (
    Append,
    RunId,
    SqlJournalStore,
)

from support.helpers import TRUSTED, admitted

LEASE = 300


def admitted_under(run: RunId, idempotency_key: str) -> Append:
    """The battery's ``admitted_under(run, key)``: a ``RunAdmitted`` claiming a key."""
    return Append(
        run,
        "RunAdmitted",
        {
            "capability": "conformance",
            "input": None,
            "input_label": TRUSTED,
            "idempotency_key": idempotency_key,
        },
    )


async def admit(store: SqlJournalStore, idempotency_key: str | None) -> RunId:
    """A fresh run, leased and admitted (under ``idempotency_key``, if one is given)."""
    run = RunId.generate()
    lease = await store.acquire(run, "conformance", LEASE)
    record = admitted(run) if idempotency_key is None else admitted_under(run, idempotency_key)
    await store.append(lease.epoch, [record])
    return run


async def sql(store: SqlJournalStore, statement: str, **params: Any) -> None:
    async with store.engine.begin() as conn:
        await conn.execute(text(statement), {"t": store.tenant, **params})
