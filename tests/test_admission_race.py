"""32 instances admit one message at once: exactly one run is admitted (PostgreSQL).

Each racer is its own store instance (its own engine, so its own connections, as 32 runtime
instances would be), holding the lease of its own fresh run, and appends that run's
``RunAdmitted`` under one admission key from a start barrier. The key's primary key is the
only arbiter: the runs do not share a run mutex, so nothing else serialises them. Exactly
one append succeeds; the other 31 are refused with :class:`DuplicateAdmissionError` naming
the winner; ``run_admission`` holds one row; only the winner's journal has records.

Seen red with the mechanism broken: the claim replaced by a read of the key followed by an
unconditional write of the records (the holder looked up first, then the append), so
several racers all read "free" and every one of them admitted its run.
"""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from agentplane_journal import DuplicateAdmissionError, RunId, SqlJournalStore

from support.admissions import admitted_under
from support.clock import FakeClock
from support.databases import dsn
from support.races import no_surprises, race

pytestmark = [pytest.mark.race, pytest.mark.postgres]

RACERS = 32


async def test_32_instances_admitting_one_key_admit_exactly_one_run(
    pg_battery_url: str, clock: FakeClock
) -> None:
    tenant = f"admit{uuid.uuid4().hex[:10]}"
    stores = [
        await SqlJournalStore.connect(pg_battery_url, tenant=tenant, clock=clock)
        for _ in range(RACERS)
    ]
    try:
        runs = [RunId.generate() for _ in stores]
        # Each instance holds its own run's lease (and a warm connection) before the race.
        epochs = [
            (await store.acquire(run, f"instance-{i}", 300)).epoch
            for i, (store, run) in enumerate(zip(stores, runs, strict=True))
        ]
        key = "webhook/evt_42"
        results = await race(
            *(
                lambda s=s, r=r, e=e: s.append(e, [admitted_under(r, key)])
                for s, r, e in zip(stores, runs, epochs, strict=True)
            )
        )
        no_surprises(results, DuplicateAdmissionError)
        won = [i for i, r in enumerate(results) if not isinstance(r, BaseException)]
        assert len(won) == 1, f"{len(won)} runs were admitted under one key"
        winner = runs[won[0]]
        refusals = [r for r in results if isinstance(r, DuplicateAdmissionError)]
        assert len(refusals) == RACERS - 1
        assert all(r.run == winner and r.key == key for r in refusals)
        assert await stores[0].admitted_as(key) == winner

        conn = await asyncpg.connect(dsn(pg_battery_url))
        try:
            held = await conn.fetch(
                "SELECT key, run_id FROM run_admission WHERE tenant = $1", tenant
            )
            written = await conn.fetch(
                "SELECT DISTINCT run_id FROM journal WHERE tenant = $1", tenant
            )
        finally:
            await conn.close()
        assert [tuple(r) for r in held] == [(key, str(winner))]
        assert [r["run_id"] for r in written] == [str(winner)]
    finally:
        await asyncio.gather(*(s.close() for s in stores))
