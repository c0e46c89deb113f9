"""Which tenants a database holds, and how big each is: what a whole-database backup covers.

A tenant is a journal of its own (its runs, its Merkle log, its wire profile), so a backup
of "the database" is a backup of every tenant. They are found in the tables that make a
tenant's history: ``journal`` (records), ``run_seal`` (the log) and ``journal_profile`` (a
tenant claimed in another wire profile, perhaps still empty: its profile is worth keeping).
Each is walked with one index probe per tenant (``min(tenant) > last``, a loose index scan),
so listing costs the number of tenants, not the number of rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.core.ids import validate_tenant
from agentplane_journal.db.models import Journal, JournalProfile, RunSeal
from agentplane_journal.journal.store import SqlJournalStore

__all__ = ["TenantSize", "Tenants", "list_tenants", "tenant_size"]


@dataclass(frozen=True, slots=True)
class TenantSize:
    """One tenant's size, as ``agentplane-journal tenants`` prints it."""

    tenant: str
    profile: str
    origin: str
    runs: int  # runs with at least one record
    records: int
    log_size: int  # sealed runs in its Merkle log (its checkpoint's size)

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "profile": self.profile,
            "origin": self.origin,
            "runs": self.runs,
            "records": self.records,
            "log_size": self.log_size,
        }


@dataclass(frozen=True, slots=True)
class Tenants:
    """The tenants found: ``names`` a store can open, and ``invalid``, stored values that are
    no tenant name (an edited row: text the store refuses, or not text at all), shown as
    ``repr`` so a backup can name what it could not cover instead of stopping there."""

    names: list[str]
    invalid: list[str]


async def list_tenants(store: SqlJournalStore) -> Tenants:
    """Every tenant with a record, a seal or a recorded wire profile, sorted.

    The walk starts at ``>= ''``: every text value, and (SQLite) never a number, which sorts
    before text; a value that is not text ends the walk of its table and is named invalid.
    """
    found: set[str] = set()
    invalid: set[str] = set()
    for column in (Journal.tenant, RunSeal.tenant, JournalProfile.tenant):
        last = ""
        stmt_op = column >= last
        while True:
            stmt = select(func.min(column)).where(stmt_op)

            async def unit(session: AsyncSession, stmt: Any = stmt) -> object:
                return (await session.execute(stmt)).scalar()

            value = await store.unit(unit, read_only=True)
            if value is None:
                break
            if not isinstance(value, str):
                invalid.add(repr(value))
                break
            try:
                valid = validate_tenant(value) == value
            except ValueError:
                valid = False
            (found if valid else invalid).add(value if valid else repr(value))
            last = value
            stmt_op = column > last
    return Tenants(sorted(found), sorted(invalid))


async def tenant_size(store: SqlJournalStore) -> TenantSize:
    """``store``'s tenant's size: runs and records counted, the log's size from its checkpoint."""
    stmt = select(func.count(), func.count(func.distinct(Journal.run_id))).where(
        Journal.tenant == store.tenant
    )

    async def unit(session: AsyncSession) -> tuple[int, int]:
        records, runs = (await session.execute(stmt)).one()
        return int(records), int(runs)

    records, runs = await store.unit(unit, read_only=True)
    profile = await store.wire_profile()
    cp = await store.checkpoint()
    return TenantSize(store.tenant, profile.name, cp.origin, runs, records, cp.size)
