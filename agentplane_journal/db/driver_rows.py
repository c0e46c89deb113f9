"""A statement's rows as the driver returned them: :func:`driver_rows` runs a statement through
SQLAlchemy Core on a session's connection and takes the rows from the DBAPI cursor, with no
per-row ``Row`` objects (the reads of long runs and of audits use it).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.engine.cursor import _DEFAULT_FETCH as _PLAIN_FETCH
from sqlalchemy.ext.asyncio import AsyncSession

__all__ = ["driver_rows"]


async def driver_rows(
    session: AsyncSession, stmt: Any, params: dict[str, Any] | None = None
) -> list[Any]:
    """``stmt``'s rows as the driver returned them (tuples; asyncpg's records), in a list.

    Executed by SQLAlchemy Core on the session's connection (its transaction, execution
    options, compiled-statement cache, and its wrapping of driver errors, which
    ``Repository.unit`` translates), but the rows are taken from the DBAPI cursor, which
    already holds them all: the ORM's and even Core's per-row ``Row`` objects cost more than
    a read of a long run spends anywhere but on its checks. If SQLAlchemy ever buffers
    the rows itself (another fetch strategy), they come through its result instead, so no
    row is ever skipped.
    """
    conn = await session.connection()
    return await conn.run_sync(_driver_rows, stmt, params)


def _driver_rows(conn: Connection, stmt: Any, params: dict[str, Any] | None) -> list[Any]:
    result = conn.execute(stmt, params)
    try:
        if result.cursor_strategy is _PLAIN_FETCH and result.cursor is not None:
            return list(result.cursor.fetchall())
        return list(result)
    finally:
        result.close()
