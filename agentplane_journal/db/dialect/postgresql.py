"""PostgreSQL through asyncpg: the dialect class (:class:`PostgresDialect`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import asyncpg
from sqlalchemy import (
    ColumnElement,
    LargeBinary,
    Table,
    Text,
    any_,
    bindparam,
    func,
    literal,
    select,
    text,
    true,
)
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from agentplane_journal.db import pgnames
from agentplane_journal.db.dialect.protocol import MIGRATION_LOCK_KEY, _driver, _driver_errors
from agentplane_journal.db.libpq import libpq_options
from agentplane_journal.db.models import run_conclusion_ordinal


class PostgresDialect:
    """PostgreSQL through asyncpg, at READ COMMITTED (the server default)."""

    name = "postgresql"
    title = "PostgreSQL"
    # a bigint[] written as text: asyncpg's text codec needs no type introspection
    seqs_from_param = "SELECT unnest($3::text::bigint[])"
    driver = "asyncpg"
    url_scheme = "postgresql+asyncpg"
    # Heroku-style ``postgres://`` too, so one URL works for the library, the migrations
    # and the CLI.
    url_schemes: tuple[str, ...] = ("postgresql", "postgres", "postgresql+asyncpg")
    url_example = "postgresql+asyncpg://user@host/db"
    schemas = True
    pgbouncer = True
    write_turns = False
    windowed_export_pages = True
    export_handoff_rows: int | None = 128
    # Enough connections for a runtime's concurrent appends without queueing on the pool.
    engine_options: Mapping[str, Any] = {"pool_size": 10, "max_overflow": 40}
    driver_loggers: tuple[str, ...] = ()

    def configured(self, engine: Engine) -> bool:
        return True  # configure() installs nothing

    def database_file(self, url: URL) -> str | None:
        return None

    def database(self, url: URL) -> str | None:
        return url.database

    def stored_as(self, column: Any, *storage: str) -> ColumnElement[bool]:
        return true()  # the declared column type is the stored type

    def connect_options(self, url: URL) -> tuple[URL, dict[str, Any]]:
        return libpq_options(url)

    @contextmanager
    def begin_migration(self, connection: Connection, *, join: bool) -> Iterator[None]:
        # Transaction-scoped, so it is released by the migration's COMMIT (or ROLLBACK)
        # and never outlives it on a pooled server connection (PgBouncer's transaction
        # pooling hands the next transaction elsewhere). The migrations run in this one
        # transaction (PostgreSQL's DDL is transactional), so the lock covers all of them.
        lock = select(func.pg_advisory_xact_lock(MIGRATION_LOCK_KEY))
        if join:
            connection.execute(lock)
            yield
            return
        with connection.begin():
            connection.execute(lock)
            yield

    def configure(self, engine: AsyncEngine) -> None:
        # The store's guarantees come from row locks and constraints, which hold at
        # PostgreSQL's default isolation level; what is installed is statement names no
        # other client of a pooler can hold.
        self.name_statements(engine)

    def seq_list(self, seqs: list[int]) -> str:
        return "{" + ",".join(map(str, seqs)) + "}"

    def name_statements(self, engine: AsyncEngine) -> None:
        pgnames.install(engine)

    async def wal_position(self, conn: AsyncConnection) -> str | None:
        position = await conn.scalar(text("SELECT pg_current_wal_lsn()::text"))
        return None if position is None else str(position)

    async def replayed(self, conn: AsyncConnection, position: str) -> bool:
        # NULL replay position: not a standby (nothing to wait for). A standby's replay
        # position only moves forward, so a read after this check sees at least this much.
        return bool(
            await conn.scalar(
                text(
                    "SELECT pg_last_wal_replay_lsn() IS NULL "
                    "OR pg_last_wal_replay_lsn() >= CAST(CAST(:p AS text) AS pg_lsn)"
                ),
                {"p": position},
            )
        )

    async def standby(self, conn: AsyncConnection) -> bool:
        return bool(await conn.scalar(text("SELECT pg_is_in_recovery()")))

    async def standbys(self, conn: AsyncConnection, position: str) -> list[dict[str, Any]]:
        # Bytes of WAL up to ``position`` that a standby has not flushed (received durably)
        # or not replayed (visible to its readers); 0 once it is past. Needs a role that
        # may read pg_stat_replication's positions (superuser or pg_monitor).
        rows = await conn.execute(
            text(
                "SELECT application_name AS name, state, sync_state, "
                "greatest(pg_wal_lsn_diff(CAST(CAST(:p AS text) AS pg_lsn), flush_lsn), 0) "
                "AS unflushed, "
                "greatest(pg_wal_lsn_diff(CAST(CAST(:p AS text) AS pg_lsn), replay_lsn), 0) "
                "AS unreplayed, "
                "extract(epoch FROM replay_lag) AS replay_lag "
                "FROM pg_stat_replication ORDER BY application_name, pid"
            ),
            {"p": position},
        )
        return [dict(row) for row in rows.mappings()]

    def pooler_misrouted(self, exc: BaseException) -> bool:
        return pgnames.pooler_misrouted(exc)

    def insert(self, table: Any) -> pg.Insert:
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

    def text_in(self, column: Any, name: str) -> ColumnElement[bool]:
        # One text[] parameter (asyncpg's built-in codec): an IN list would be rendered into
        # the statement, a cast per id, at every execution.
        one_of: ColumnElement[bool] = column == any_(bindparam(name, type_=pg.ARRAY(Text)))
        return one_of

    async def copy_rows(
        self,
        conn: AsyncConnection,
        table: Table,
        columns: Sequence[str],
        rows: Sequence[tuple[Any, ...]],
    ) -> bool:
        # Binary COPY (asyncpg's copy_records_to_table): the server parses no statement per
        # row, where an executemany binds and executes each row. COPY stops at the first
        # row a constraint refuses without naming which of the rows it was to the caller's
        # error mapping, so it runs in a savepoint: refused, the savepoint is rolled back
        # (the transaction and its run mutexes stay) and the caller's INSERT of the same
        # rows names the collision as it always has. The table as the connection's
        # schema_translate_map places it (a drill's scratch schema).
        if not rows:
            return True
        sync = conn.sync_connection
        schemas = None if sync is None else sync.get_execution_options().get("schema_translate_map")
        schema = (schemas or {}).get(table.schema, table.schema)
        driver: Any = (await conn.get_raw_connection()).driver_connection
        try:
            async with driver.transaction():  # nested in the unit's: a savepoint
                await driver.copy_records_to_table(
                    table.name, records=rows, columns=list(columns), schema_name=schema
                )
        except asyncpg.PostgresError:  # the server refused them: rolled back to the savepoint
            return False
        return True

    def contains_bytes(self, column: Any, needle: bytes) -> ColumnElement[bool]:
        # bytea LIKE bytea; the needle is a ULID, which holds neither % nor _ nor \.
        like = column.op("LIKE", is_comparison=True)
        contains: ColumnElement[bool] = like(literal(b"%" + needle + b"%", LargeBinary))
        return contains

    def constraint(self, exc: BaseException, table: Table) -> str | None:
        # 23505 is unique_violation (a primary key is a unique index to PostgreSQL); asyncpg
        # carries the server's constraint name on its UniqueViolationError.
        for driver in _driver_errors(exc):
            name = getattr(driver, "constraint_name", None)
            if getattr(driver, "sqlstate", None) == "23505" and isinstance(name, str):
                return name
        return None

    def is_shared(self, url: URL) -> bool:
        # A server: any number of processes on any number of hosts reach the same database,
        # and the run mutex, the fence and the unique indexes arbitrate between them.
        return True

    def connection_lost(self, exc: DBAPIError) -> bool:
        if exc.connection_invalidated:
            return True
        sqlstate = getattr(_driver(exc), "sqlstate", None)
        # No SQLSTATE: the driver failed on its side (a closed connection, a timeout), so
        # the server never answered. Class 08 (connection exception) and 57P (the server is
        # shutting down or terminated the backend) are no answer either.
        return sqlstate is None or sqlstate.startswith(("08", "57P"))

    def commit_in_doubt(self, exc: BaseException) -> bool:
        if not isinstance(exc, DBAPIError):
            # Not the server's answer (asyncpg's command_timeout is a TimeoutError, a
            # dropped socket an OSError, ...): COMMIT may have been applied.
            return True
        from asyncpg.exceptions import InterfaceError

        # asyncpg's InterfaceError is its own refusal before sending anything (a connection
        # it already knows closed, an operation in progress); a connection lost after
        # sending is ConnectionDoesNotExistError. A COMMIT never sent did not commit: the
        # server rolls back the transaction of a connection it lost.
        if isinstance(_driver(exc), InterfaceError):
            return False
        return self.connection_lost(exc)

    def writable(self, conn: AsyncConnection) -> bool:
        # Row locks are taken statement by statement: any READ COMMITTED transaction can
        # take the run mutex at any point.
        return True
