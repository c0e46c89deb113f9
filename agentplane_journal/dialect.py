"""The few places PostgreSQL and SQLite differ, one class per backend.

Everything else in the repository is dialect-agnostic SQLAlchemy. What lives here:

* engine configuration (SQLite: WAL, busy timeout, ``BEGIN IMMEDIATE`` for writes);
* the dialect's ``insert`` (for ``ON CONFLICT``), ``greatest``/``least``;
* where the run-conclusion ordinal comes from (a sequence, or a counter row);
* reading a driver error: which constraint it names, and whether the connection was lost.
  By SQLSTATE, constraint name and SQLite extended result code, never by parsing messages.
"""

from __future__ import annotations

from typing import Any, Protocol

from sqlalchemy import ColumnElement, Table, event, func, literal, select
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.dml import Insert

from .models import JournalCounter, RunOutcome, run_conclusion_ordinal

__all__ = [
    "READ_ONLY",
    "Dialect",
    "PostgresDialect",
    "SqliteDialect",
    "configure_engine",
    "counter_next",
    "dialect_for",
]

#: Execution option marking a read-only unit of work (SQLite begins it DEFERRED, not IMMEDIATE).
READ_ONLY = "agentplane_journal_read_only"

#: How long a SQLite writer waits for another process's write lock before giving up.
SQLITE_BUSY_TIMEOUT_MS = 30_000

_CONFIGURED = "_agentplane_journal_configured"


class Dialect(Protocol):
    """What the repository needs to know about a backend."""

    name: str

    def configure(self, engine: AsyncEngine) -> None:
        """Install the connection and transaction settings the store's guarantees rely on."""

    def insert(self, table: Any) -> Insert:
        """An ``INSERT`` that supports ``on_conflict_do_nothing``/``on_conflict_do_update``."""

    def greatest(self, a: Any, b: Any) -> ColumnElement[Any]:
        """The larger of two non-NULL values."""

    def least(self, a: Any, b: Any) -> ColumnElement[Any]:
        """The smaller of two non-NULL values."""

    async def conclusion_ordinal(self, conn: AsyncConnection) -> ColumnElement[int]:
        """An expression giving the next run-conclusion ordinal (newest conclusion = largest)."""

    def constraint(self, exc: DBAPIError, table: Table) -> str | None:
        """The name of the unique/primary-key constraint ``exc`` reports on ``table``, if any."""

    def connection_lost(self, exc: DBAPIError) -> bool:
        """Whether ``exc`` means the connection dropped (so a COMMIT's outcome is unknown)."""


def _driver(exc: DBAPIError) -> Any:
    return getattr(exc, "driver_exception", None) or getattr(exc, "orig", None)


def counter_next(dialect: Dialect, name: str, initial: Any) -> Any:
    """Advance counter ``name`` under its row lock and return the value handed out.

    ``initial`` (an expression) is the first value of a counter that does not exist yet;
    afterwards each call returns ``value + 1``. The row stays locked until the transaction
    ends, so values are handed out in commit order.
    """
    stmt = dialect.insert(JournalCounter).values(name=name, value=initial)
    return stmt.on_conflict_do_update(
        index_elements=[JournalCounter.name], set_={"value": JournalCounter.value + 1}
    ).returning(JournalCounter.value)


class PostgresDialect:
    """PostgreSQL through asyncpg, at READ COMMITTED (the server default)."""

    name = "postgresql"

    def configure(self, engine: AsyncEngine) -> None:
        # Nothing to install: the store's guarantees come from row locks and constraints,
        # which hold at PostgreSQL's default isolation level.
        return None

    def insert(self, table: Any) -> Insert:
        return pg.insert(table)

    def greatest(self, a: Any, b: Any) -> ColumnElement[Any]:
        return func.greatest(a, b)

    def least(self, a: Any, b: Any) -> ColumnElement[Any]:
        return func.least(a, b)

    async def conclusion_ordinal(self, conn: AsyncConnection) -> ColumnElement[int]:
        # 0.4.0's own sequence, so agentplane's tooling sharing the database stays in step.
        # Allocation order, not commit order: across runs "newest first" may differ from
        # commit order by the width of a race, which the outcome index tolerates.
        return run_conclusion_ordinal.next_value()

    def constraint(self, exc: DBAPIError, table: Table) -> str | None:
        driver = _driver(exc)
        if getattr(driver, "sqlstate", None) != "23505":
            return None
        return getattr(driver, "constraint_name", None)

    def connection_lost(self, exc: DBAPIError) -> bool:
        if exc.connection_invalidated:
            return True
        sqlstate = getattr(_driver(exc), "sqlstate", None)
        # No SQLSTATE: the driver failed on its side (a closed connection, a timeout), so
        # the server never answered. Class 08 (connection exception) and 57P (the server is
        # shutting down or terminated the backend) are no answer either.
        return sqlstate is None or sqlstate.startswith(("08", "57P"))


class SqliteDialect:
    """SQLite through aiosqlite: one writer at a time, across processes, by ``BEGIN IMMEDIATE``."""

    name = "sqlite"

    def configure(self, engine: AsyncEngine) -> None:
        sync_engine = engine.sync_engine
        if getattr(sync_engine, _CONFIGURED, False):
            return

        @event.listens_for(sync_engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # pysqlite's own transaction handling begins lazily (and DEFERRED), which loses
            # updates between processes and fails at once with SQLITE_BUSY_SNAPSHOT. Take
            # transactions into our own hands, and set the pragmas outside any transaction.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(sync_engine, "begin")
        def _on_begin(connection: Any) -> None:
            # A write transaction takes the database's write lock when it starts, so two
            # writers (threads or processes) queue on busy_timeout instead of both reading
            # the same chain head. Reads begin DEFERRED and never block a writer under WAL.
            read_only = connection.get_execution_options().get(READ_ONLY, False)
            connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

        setattr(sync_engine, _CONFIGURED, True)

    def insert(self, table: Any) -> Insert:
        return sqlite.insert(table)

    def greatest(self, a: Any, b: Any) -> ColumnElement[Any]:
        # SQLite's two-argument max() is a scalar function (NULL if either is NULL).
        return func.max(a, b)

    def least(self, a: Any, b: Any) -> ColumnElement[Any]:
        return func.min(a, b)

    async def conclusion_ordinal(self, conn: AsyncConnection) -> ColumnElement[int]:
        # No sequences here: a counter row, taken under the write lock every SQLite write
        # transaction holds from its start. A database that already has outcomes starts
        # after the largest one.
        initial = select(func.coalesce(func.max(RunOutcome.ordinal), 0) + 1).scalar_subquery()
        value = (
            await conn.execute(counter_next(self, "run_conclusion_ordinal", initial))
        ).scalar_one()
        return literal(value)

    def constraint(self, exc: DBAPIError, table: Table) -> str | None:
        code = getattr(_driver(exc), "sqlite_errorname", None)
        if code == "SQLITE_CONSTRAINT_PRIMARYKEY":
            return table.primary_key.name
        if code == "SQLITE_CONSTRAINT_UNIQUE":
            # SQLite does not report the index name, but it does say "unique, not primary
            # key"; a table with a single unique constraint or index therefore names it.
            names = [i.name for i in table.indexes if i.unique] + [
                c.name for c in table.constraints if c.__class__.__name__ == "UniqueConstraint"
            ]
            return names[0] if len(names) == 1 else None
        return None

    def connection_lost(self, exc: DBAPIError) -> bool:
        return bool(exc.connection_invalidated)


# Stateless, so one of each: the repository caches statements per dialect object.
_POSTGRES = PostgresDialect()
_SQLITE = SqliteDialect()


def dialect_for(engine: AsyncEngine) -> Dialect:
    """The :class:`Dialect` for an engine, refusing backends this package does not support."""
    name = engine.dialect.name
    if name == "postgresql":
        if engine.dialect.driver != "asyncpg":
            raise ValueError(
                "PostgreSQL is supported through asyncpg; this engine uses "
                f"{engine.dialect.driver!r}"
                " (use a postgresql+asyncpg:// URL)"
            )
        return _POSTGRES
    if name == "sqlite":
        if engine.dialect.driver != "aiosqlite":
            raise ValueError(
                f"SQLite is supported through aiosqlite; this engine uses {engine.dialect.driver!r}"
                " (use a sqlite+aiosqlite:/// URL)"
            )
        return _SQLITE
    raise ValueError(
        f"unsupported database {name!r}: agentplane_journal runs on PostgreSQL (asyncpg) "
        "and SQLite (aiosqlite)"
    )


def configure_engine(engine: AsyncEngine) -> AsyncEngine:
    """Install the store's settings on a host application's engine (idempotent).

    Call it right after creating the engine, before it opens connections: SQLite's settings
    apply as each connection opens.
    """
    dialect_for(engine).configure(engine)
    return engine
