"""Writing below a floor the way an attacker with write access would: around the CHECKs.

Every counter and instant has a ``CHECK (column >= floor)`` (revision ``0004_checks``), so a
test that plants a hostile value first has to get the constraint out of the way, as the
attacker would:

* :func:`around_checks`, for one transaction on a shared database: on PostgreSQL the
  table's floor constraints are dropped and, before COMMIT, added back ``NOT VALID`` (new
  writes are checked again, the planted row stays); on SQLite the connection ignores CHECKs
  (``PRAGMA ignore_check_constraints``) until the block ends;
* :func:`drop_checks`, for good, on a database of the test's own: PostgreSQL drops the
  constraints; SQLite rewrites the table without them (the only way it has: a new table of
  the same definition less the CHECK clauses, the rows copied, the old one dropped, the
  new one renamed, its indexes created again from their stored SQL).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import pool, text
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from agentplane_journal.db.models import COLUMN_FLOORS


def _names(table: str) -> dict[str, str]:
    return {f"{table}_{c}_check": f"{c} >= {f}" for c, f in COLUMN_FLOORS[table].items()}


@asynccontextmanager
async def around_checks(conn: AsyncConnection, *tables: str) -> AsyncIterator[None]:
    """In the block, ``conn`` (inside its transaction) may write below ``tables``' floors."""
    if not tables:
        yield
        return
    if conn.dialect.name == "sqlite":
        await conn.exec_driver_sql("PRAGMA ignore_check_constraints = ON")
        try:
            yield
        finally:
            await conn.exec_driver_sql("PRAGMA ignore_check_constraints = OFF")
        return
    for table in tables:
        drops = ", ".join(f"DROP CONSTRAINT IF EXISTS {n}" for n in _names(table))
        await conn.exec_driver_sql(f"ALTER TABLE {table} {drops}")
    yield
    for table in tables:
        adds = ", ".join(
            f"ADD CONSTRAINT {n} CHECK ({c}) NOT VALID" for n, c in _names(table).items()
        )
        await conn.exec_driver_sql(f"ALTER TABLE {table} {adds}")


async def drop_checks(url: str, table: str) -> None:
    """Remove ``table``'s floor CHECKs for good (the database is the test's own)."""
    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.begin() as conn:
            if not url.startswith("sqlite"):
                drops = ", ".join(f"DROP CONSTRAINT {n}" for n in _names(table))
                await conn.exec_driver_sql(f"ALTER TABLE {table} {drops}")
                return
            rows = await conn.execute(
                text("SELECT type, sql FROM sqlite_master WHERE tbl_name = :t AND sql IS NOT NULL"),
                {"t": table},
            )
            objects = rows.all()
            [create] = [sql for kind, sql in objects if kind == "table"]
            indexes = [sql for kind, sql in objects if kind == "index"]
            without = re.sub(r",\s*CONSTRAINT \w+_check CHECK \([^)]*\)", "", create)
            assert "CHECK" not in without, without
            scratch = re.sub(r'^CREATE TABLE "?\w+"?', f"CREATE TABLE {table}_unchecked", without)
            await conn.exec_driver_sql(scratch)
            await conn.exec_driver_sql(f"INSERT INTO {table}_unchecked SELECT * FROM {table}")
            await conn.exec_driver_sql(f"DROP TABLE {table}")
            await conn.exec_driver_sql(f"ALTER TABLE {table}_unchecked RENAME TO {table}")
            for sql in indexes:
                await conn.exec_driver_sql(sql)
    finally:
        await engine.dispose()
