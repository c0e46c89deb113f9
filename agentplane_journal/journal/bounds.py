"""The bounds audit: stored counters and instants below the floor their CHECK sets.

Every counter and instant has a ``CHECK (column >= floor)``
(:data:`~agentplane_journal.db.models.COLUMN_FLOORS`, revision ``0004_checks``), so no write
can store one below it. Someone with write access to the database can still drop a
constraint and write one: a negative lease expiry, a zero conclusion ordinal, a retry count
below zero. Most reads hand such a value on unchanged (the other audits only catch what a
record's hash or the log's tree covers), so :func:`audit_bounds` counts them directly, one
statement per table, and names the first offending row of each column; ``verify --all``
runs it and fails on any finding. Values of the wrong storage class (SQLite's TEXT in an
INTEGER column) are not compared here: SQLite sorts them above every number, and the
readers that meet them report them as corrupt.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import Select, Table, bindparam, case, func, literal, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql import ColumnElement

from agentplane_journal.db.models import COLUMN_FLOORS, metadata

__all__ = ["BoundsFinding", "audit_bounds"]

#: What names a row in each table's finding (the smallest one below the floor is shown).
_KEYS: dict[str, tuple[str, ...]] = {
    "journal": ("run_id",),
    "run_activity": ("run_id",),
    "run_lease": ("run_id",),
    "run_seal": ("run_id",),
    "run_outcome": ("run_id",),
    "run_admission": ("key",),
    "run_cancel": ("run_id",),
    "push_delivery": ("task_id", "config_id"),
}


@dataclass(frozen=True, slots=True)
class BoundsFinding:
    """``rows`` of ``table`` (this tenant's) hold a ``column`` below ``floor``; ``first`` is
    the smallest key among them (a run id; an admission key; ``task/config`` for a push
    registration)."""

    table: str
    column: str
    floor: int
    rows: int
    first: str | None

    def __str__(self) -> str:
        return (
            f"{self.table}.{self.column}: {self.rows} row(s) below {self.floor} "
            f"(first: {self.first})"
        )


@cache
def _statement(name: str) -> Select[Any]:
    """Per column, how many of the tenant's rows are below the floor, and the first's key."""
    table: Table = metadata.tables[name]
    floors = COLUMN_FLOORS[name]
    key: ColumnElement[Any] = table.c[_KEYS[name][0]]
    for extra in _KEYS[name][1:]:
        key = key + literal("/") + table.c[extra]
    below = {column: table.c[column] < floor for column, floor in floors.items()}
    columns: list[ColumnElement[Any]] = []
    for condition in below.values():
        columns.append(func.coalesce(func.sum(case((condition, 1), else_=0)), 0))
        columns.append(func.min(case((condition, key))))
    return select(*columns).where(table.c.tenant == bindparam("tenant"), or_(*below.values()))


async def audit_bounds(session: AsyncSession, tenant: str) -> list[BoundsFinding]:
    """Every column of ``tenant``'s rows that holds values below its floor, table by table."""
    found = []
    for name, floors in COLUMN_FLOORS.items():
        row = (await session.execute(_statement(name), {"tenant": tenant})).one()
        for i, (column, floor) in enumerate(floors.items()):
            rows, first = row[2 * i], row[2 * i + 1]
            if rows:
                found.append(BoundsFinding(name, column, floor, int(rows), _text(first)))
    return found


def _text(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return repr(value)  # on SQLite a key column can hold anything
