"""The few places PostgreSQL and SQLite differ, one class per backend.

Everything else in the repository is dialect-agnostic SQLAlchemy. What lives here:

* engine configuration (SQLite: WAL, busy timeout, ``BEGIN IMMEDIATE`` for the
  transactions that write through the store; see :func:`configure_engine`);
* the dialect's ``insert`` (for ``ON CONFLICT``), ``greatest``/``least``;
* where the run-conclusion ordinal comes from (a sequence, or a counter row);
* reading a driver error: which constraint it names, and whether the connection was lost.
  By SQLSTATE, constraint name and SQLite extended result code; a SQLite message is read only
  to tell apart two unique indexes of one table (SQLite reports no index name, only columns);
* whether several processes may write the store's durable state at once (``is_shared``);
* what a database is called: the URL schemes and driver that reach it, whether it has
  schemas, which file it is (SQLite), a store's own engine options.

Which dialect a database is, is decided here and only here: :func:`dialect_for` (an engine,
a connection, a URL) and :func:`dialect_named` (a backend's name), both over one table of
the two dialect objects. Everything else asks the object it is given, never a dialect's
name (``tests/test_layout.py`` holds the package to that).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from sqlalchemy import (
    ColumnElement,
    LargeBinary,
    Table,
    UniqueConstraint,
    event,
    func,
    literal,
    select,
    text,
    true,
)
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.engine import Dialect as SqlalchemyDialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from agentplane_journal.db import pgnames, selfwait
from agentplane_journal.db.libpq import libpq_options
from agentplane_journal.db.models import JournalCounter, RunOutcome, run_conclusion_ordinal

__all__ = [
    "MIGRATION_LOCK_KEY",
    "READ_ONLY",
    "WRITE_TRANSACTION",
    "Dialect",
    "PostgresDialect",
    "SqliteDialect",
    "begin_write",
    "configure_engine",
    "counter_next",
    "database_key",
    "dialect_for",
    "dialect_named",
]

#: Execution option marking a read-only unit of work. Transactions begin DEFERRED unless
#: they ask for :data:`WRITE_TRANSACTION`, so this is the default; it wins over a write flag.
READ_ONLY = "agentplane_journal_read_only"

#: Execution option asking SQLite for a write transaction (``BEGIN IMMEDIATE``) on an engine
#: configured by :func:`configure_engine`: the store's own write units set it, and so does
#: :func:`begin_write`. A host can put it on an engine for a sessionmaker that writes:
#: ``async_sessionmaker(engine.execution_options(**{WRITE_TRANSACTION: True}))``. Ignored on
#: PostgreSQL.
WRITE_TRANSACTION = "agentplane_journal_write"

#: The key of the PostgreSQL advisory lock every migration of the journal's schema holds
#: (``pg_advisory_xact_lock``, for the migration's transaction): "apj_migr" in ASCII. A
#: host's own advisory locks must not use it.
MIGRATION_LOCK_KEY = 0x61706A5F6D696772

#: How long a SQLite writer waits for another process's write lock before giving up.
SQLITE_BUSY_TIMEOUT_MS = 30_000

_CONFIGURED = "_agentplane_journal_configured"
# In a pooled connection's ``info``: how its current transaction began ("immediate" or
# "deferred"); cleared when the transaction ends.
_BEGUN = "agentplane_journal_begun"
# Beside it: the connection's sqlite3 ``total_changes`` when the transaction began.
_CHANGES = "agentplane_journal_changes"
# On an engine: its database_key, computed once.
_KEY = "_agentplane_journal_database_key"


#: Either backend's ``INSERT``: both have ``on_conflict_do_nothing``/``on_conflict_do_update``
#: (with ``index_elements``, ``index_where``, ``set_``, ``where``) and ``excluded``.
Upsert = pg.Insert | sqlite.Insert


class Dialect(Protocol):
    """What the repository needs to know about a backend."""

    #: SQLAlchemy's name for the backend (``engine.dialect.name``), for messages and keys.
    name: str
    #: The backend as people write it ("PostgreSQL"), for messages.
    title: str
    #: The one driver the store runs on, and the URL scheme that names it.
    driver: str
    url_scheme: str
    #: The URL schemes that reach this database: the bare backend names get the driver.
    url_schemes: tuple[str, ...]
    #: A subquery over the seqs bound as ``$3`` (:meth:`seq_list`), for the lean reads'
    #: records-by-seq statement (``backends.reader.SEQS``).
    seqs_from_param: str

    def seq_list(self, seqs: list[int]) -> str:
        """``seqs`` as the one text parameter :attr:`seqs_from_param` reads."""
        ...

    #: A URL of this database, for messages.
    url_example: str
    #: Whether the database has schemas (``schema=``, ``--schema``); without them, the
    #: journal keeps apart from a host's tables by a database of its own.
    schemas: bool
    #: Whether ``?pgbouncer=true`` applies (PgBouncer pools PostgreSQL connections).
    pgbouncer: bool
    #: Whether a process's write transactions take turns in the process before they ask
    #: the database (SQLite: one writer at a time, and a second connection's ``BEGIN
    #: IMMEDIATE`` would wait in the busy handler's millisecond sleeps).
    write_turns: bool
    #: A store's own engine's options (``connect``), under the caller's.
    engine_options: Mapping[str, Any]

    # Statements are cached per dialect object (functools.cache), so it must hash; a
    # protocol type is not Hashable to mypy unless it says so.
    def __hash__(self) -> int: ...

    def configure(self, engine: AsyncEngine) -> None:
        """Install the connection and transaction settings the store's guarantees rely on."""

    async def wal_position(self, conn: AsyncConnection) -> str | None:
        """Where the primary's WAL ends now (PostgreSQL ``pg_current_wal_lsn()``): every
        commit acknowledged before this call lies at or before it. ``None`` without
        replication (SQLite)."""

    async def replayed(self, conn: AsyncConnection, position: str) -> bool:
        """Whether the server of ``conn`` has replayed the primary's WAL up to ``position``
        (a server that is not a standby has nothing to replay: true)."""

    async def standby(self, conn: AsyncConnection) -> bool:
        """Whether the server of ``conn`` is a standby still in recovery (a replica)."""

    async def standbys(self, conn: AsyncConnection, position: str) -> list[dict[str, Any]]:
        """The primary's streaming standbys (``pg_stat_replication``): name, state,
        sync_state, and how far each has received (flushed) and replayed the WAL up to
        ``position`` (bytes still missing; ``None`` for an unknown position). SQLite: none."""

    def name_statements(self, engine: AsyncEngine) -> None:
        """Make the prepared-statement names of ``engine``'s new connections unique to each
        connection, whatever its URL says (PostgreSQL; :mod:`.pgnames`), so that behind a
        pooler a statement name never runs another client's statement."""

    def pooler_misrouted(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a pooler running a statement on a server connection that does
        not hold it (no ``?pgbouncer=true`` behind PgBouncer): a refusal, nothing ran."""

    def insert(self, table: Any) -> Upsert:
        """An ``INSERT`` that supports ``on_conflict_do_nothing``/``on_conflict_do_update``."""

    def greatest(self, a: Any, b: Any) -> ColumnElement[Any]:
        """The larger of two non-NULL values."""

    def least(self, a: Any, b: Any) -> ColumnElement[Any]:
        """The smaller of two non-NULL values."""

    async def conclusion_ordinal(self, conn: AsyncConnection) -> ColumnElement[int]:
        """An expression giving the next run-conclusion ordinal (newest conclusion = largest)."""

    def constraint(self, exc: BaseException, table: Table) -> str | None:
        """The name of the unique/primary-key constraint ``exc`` reports on ``table``, if any.

        ``exc`` is SQLAlchemy's ``DBAPIError`` or the driver's own exception (the hot paths
        run the driver directly); anything that is not a unique violation is ``None``."""

    def is_shared(self, url: URL) -> bool:
        """Whether several processes may append to the durable state ``url`` names at once
        (agentplane's ``JournalStore::is_shared``): the runtime refuses process-local
        coordination beside a shared store."""

    def contains_bytes(self, column: Any, needle: bytes) -> ColumnElement[bool]:
        """Whether a binary column contains ``needle`` (byte for byte)."""

    def connection_lost(self, exc: DBAPIError) -> bool:
        """Whether ``exc`` means the connection dropped (so a COMMIT's outcome is unknown)."""

    def commit_in_doubt(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised by a write transaction's COMMIT, leaves it unknown whether
        the transaction landed (:class:`CommitUnknownError`) rather than surely not."""

    def writable(self, conn: AsyncConnection) -> bool:
        """Whether the transaction open on ``conn`` may take the store's writes safely."""

    def stored_as(self, column: Any, *storage: str) -> ColumnElement[bool]:
        """Whether ``column``'s stored value has one of the SQLite storage classes
        ``storage`` (``"integer"``, ``"blob"``, ``"text"``, ``"null"``). Always true where
        the column's declared type already guarantees it (PostgreSQL); on SQLite a column
        holds whatever was written, so an audit must ask."""

    def configured(self, engine: Engine) -> bool:
        """Whether ``engine`` has what :meth:`configure` installs, so a host session on it
        may take the store's writes (an engine other than the store's, on its database)."""

    def database_file(self, url: URL) -> str | None:
        """The file ``url``'s database is, as the URL says it, when it is a file on this
        machine (SQLite, neither in memory nor a ``file:`` URI); ``None`` otherwise."""

    def database(self, url: URL) -> str | None:
        """What names the database ``url`` reaches, the same for every URL of it (a SQLite
        file's real path; otherwise the URL's database name)."""

    #: Loggers besides SQLAlchemy's that may print statement parameters (push secrets).
    driver_loggers: tuple[str, ...]

    def connect_options(self, url: URL) -> tuple[URL, dict[str, Any]]:
        """``url`` without the query parameters its driver does not take as keywords, and the
        ``connect_args`` that carry them instead (PostgreSQL: libpq's, :mod:`.libpq`).
        ``ValueError`` names a parameter whose value is wrong."""

    def begin_migration(
        self, connection: Connection, *, join: bool
    ) -> AbstractContextManager[None]:
        """The migration's transaction on ``connection``, holding the database's migration
        lock from its first statement to its end, so that processes migrating one database
        at once take turns and the later ones find it at head. ``join``: the caller holds
        the transaction (and commits it); only the lock is taken."""


def _driver(exc: DBAPIError) -> Any:
    return getattr(exc, "driver_exception", None) or getattr(exc, "orig", None)


def _driver_errors(exc: BaseException) -> list[Any]:
    """Where a driver's own error may be: SQLAlchemy 2.1's ``driver_exception``, ``orig``
    (2.0 adapts asyncpg's error there and keeps the original as its ``__cause__``), or ``exc``
    itself when the driver raised it directly."""
    found: list[Any] = []
    orig = getattr(exc, "orig", None)
    for candidate in (
        getattr(exc, "driver_exception", None),
        orig,
        getattr(orig, "__cause__", None),
        exc,
    ):
        if candidate is not None and candidate not in found:
            found.append(candidate)
    return found


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


def _text_or_bytes(data: bytes) -> str | bytes:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


class SqliteDialect:
    """SQLite through aiosqlite: one writer at a time, across processes, by ``BEGIN IMMEDIATE``."""

    name = "sqlite"
    title = "SQLite"
    seqs_from_param = "SELECT value FROM json_each($3)"
    driver = "aiosqlite"
    url_scheme = "sqlite+aiosqlite"
    url_schemes: tuple[str, ...] = ("sqlite", "sqlite+aiosqlite")
    url_example = "sqlite+aiosqlite:///path/to/journal.db"
    schemas = False
    pgbouncer = False
    write_turns = True
    engine_options: Mapping[str, Any] = {}
    driver_loggers: tuple[str, ...] = ("aiosqlite",)

    def configured(self, engine: Engine) -> bool:
        return is_configured(engine)

    def database_file(self, url: URL) -> str | None:
        name = url.database
        if not name or name == ":memory:" or name.startswith("file:"):
            return None
        return name

    def database(self, url: URL) -> str | None:
        path = self.database_file(url)
        return os.path.realpath(path) if path is not None else url.database

    def stored_as(self, column: Any, *storage: str) -> ColumnElement[bool]:
        return func.typeof(column).in_(storage)

    def connect_options(self, url: URL) -> tuple[URL, dict[str, Any]]:
        return url, {}  # the URL's query is pysqlite's own (uri=true, mode=ro, ...)

    @contextmanager
    def begin_migration(self, connection: Connection, *, join: bool) -> Iterator[None]:
        # SQLite's write lock is the migration lock: BEGIN IMMEDIATE takes it before the
        # migration reads the version table, and COMMIT releases it, so a second process
        # waits (busy_timeout) and then reads the revision the first one wrote.
        if join:
            yield  # the caller's transaction; it may already have read, so it cannot lock now
            return
        if is_configured(connection.engine):
            # Our begin listener issues BEGIN IMMEDIATE for a write transaction.
            saved = connection.get_execution_options()
            connection.execution_options(**{WRITE_TRANSACTION: True, READ_ONLY: False})
            try:
                with connection.begin():
                    yield
            finally:
                connection.execution_options(
                    **{
                        WRITE_TRANSACTION: saved.get(WRITE_TRANSACTION, False),
                        READ_ONLY: saved.get(READ_ONLY, False),
                    }
                )
            return
        with connection.begin():
            # The driver's own transaction handling (a host's engine): it begins lazily, at
            # the first write, so begin here, unless it already has.
            driver = connection.connection.driver_connection
            if not getattr(driver, "in_transaction", True):
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            yield

    def configure(self, engine: AsyncEngine) -> None:
        sync_engine = _unproxied(engine.sync_engine)
        if getattr(sync_engine, _CONFIGURED, False):
            return
        opened = _pooled_connections(sync_engine)
        if opened:
            raise ValueError(_unconfigured_message(f"already opened {opened} connection(s)"))

        @event.listens_for(sync_engine, "connect")
        def _on_connect(dbapi_connection: Any, record: Any) -> None:
            # pysqlite's own transaction handling begins lazily (and DEFERRED), which loses
            # updates between processes and fails at once with SQLITE_BUSY_SNAPSHOT. Take
            # transactions into our own hands, and set the pragmas outside any transaction.
            # foreign_keys is left as the host has it (SQLite's default: off); the journal
            # declares no foreign keys.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            # The busy timeout first: switching to WAL takes a lock another process may hold
            # (opening, checkpointing), and that wait should be ours, not the driver's 5 s.
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA journal_mode=WAL")
            # An acknowledged append survives power loss: the WAL is synced at every COMMIT.
            # (FULL is SQLite's usual build default, but a build or a host may say NORMAL,
            # which can lose the last commits on power loss; the journal's promise needs FULL.)
            cursor.execute("PRAGMA synchronous=FULL")
            cursor.close()
            record.info[_CONFIGURED] = True
            # A TEXT value that is not UTF-8 (SQLite stores whatever it is given) would make
            # the driver fail the whole read with an OperationalError; read it as its bytes
            # instead, so the row checks name it as corrupt (or find it harmless).
            dbapi_connection.driver_connection.text_factory = _text_or_bytes

        @event.listens_for(sync_engine, "begin")
        def _on_begin(connection: Any) -> None:
            # A write transaction takes the database's write lock when it starts, so two
            # writers (threads or processes) queue on busy_timeout instead of both reading
            # the same chain head; a DEFERRED transaction that has read and then writes
            # fails at once with SQLITE_BUSY(_SNAPSHOT) instead of waiting. Only the
            # transactions that ask for it are IMMEDIATE: the store's own write units and
            # begin_write(); every other transaction (the host's reads) stays DEFERRED and
            # never blocks a writer under WAL.
            if not connection.info.get(_CONFIGURED):
                raise ValueError(_unconfigured_message("has a connection opened"))
            options = connection.get_execution_options()
            write = options.get(WRITE_TRANSACTION, False) and not options.get(READ_ONLY, False)
            connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
            info = connection.info
            info[_BEGUN] = "immediate" if write else "deferred"
            info[_CHANGES] = _total_changes(connection)
            # Remembered for this task, so that a store call without ``session=`` made while
            # this transaction holds the write lock is refused at once (selfwait.py).
            selfwait.opened(connection, lambda: _holds_write_lock(info, connection))

        @event.listens_for(sync_engine, "commit")
        @event.listens_for(sync_engine, "rollback")
        def _on_end(connection: Any) -> None:
            connection.info.pop(_BEGUN, None)
            connection.info.pop(_CHANGES, None)
            connection.info.pop(selfwait.TOKEN, None)

        setattr(sync_engine, _CONFIGURED, True)

    async def wal_position(self, conn: AsyncConnection) -> str | None:
        return None  # one file, no replication

    async def replayed(self, conn: AsyncConnection, position: str) -> bool:
        return True

    async def standby(self, conn: AsyncConnection) -> bool:
        return False

    async def standbys(self, conn: AsyncConnection, position: str) -> list[dict[str, Any]]:
        return []

    def seq_list(self, seqs: list[int]) -> str:
        return "[" + ",".join(map(str, seqs)) + "]"

    def name_statements(self, engine: AsyncEngine) -> None:
        return None  # no server, no pooler: statements live in this process

    def pooler_misrouted(self, exc: BaseException) -> bool:
        return False

    def insert(self, table: Any) -> sqlite.Insert:
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
        value: int = (
            await conn.execute(counter_next(self, "run_conclusion_ordinal", initial))
        ).scalar_one()
        return literal(value)

    def contains_bytes(self, column: Any, needle: bytes) -> ColumnElement[bool]:
        # instr() compares BLOBs byte by byte (LIKE would fold case and stop at a NUL).
        return func.instr(column, literal(needle, LargeBinary)) > 0

    def constraint(self, exc: BaseException, table: Table) -> str | None:
        driver = next(
            (d for d in _driver_errors(exc) if getattr(d, "sqlite_errorname", None)), None
        )
        code = getattr(driver, "sqlite_errorname", None)
        if code not in ("SQLITE_CONSTRAINT_PRIMARYKEY", "SQLITE_CONSTRAINT_UNIQUE"):
            return None
        # The extended code says "primary key" or "another unique index", not which table or
        # index: SQLite reports no index name, only the columns ("UNIQUE constraint failed:
        # journal.tenant, journal.run_id, journal.effect_key", a partial index like any
        # other; "... failed: index 'name'" for one on expressions). When the message says,
        # it must be ``table``'s own; when it does not, a table with one candidate is named
        # by the code alone, and several are not told apart by guessing.
        _, marker, failed = str(driver).partition("UNIQUE constraint failed: ")

        def reported(name: object, columns: Any) -> bool:
            spelled = ", ".join(f"{table.name}.{c.name}" for c in columns)
            return not marker or failed in (spelled, f"index '{name}'")

        if code == "SQLITE_CONSTRAINT_PRIMARYKEY":
            key = table.primary_key
            candidates = [key.name] if reported(key.name, key.columns) else []
        else:
            unique: list[Any] = [i for i in table.indexes if i.unique]
            unique += [c for c in table.constraints if isinstance(c, UniqueConstraint)]
            candidates = [c.name for c in unique if reported(c.name, c.columns)]
        # (A name is a str here: the package's naming convention names every constraint;
        # SQLAlchemy also types it as its "no name" marker or None.)
        name = candidates[0] if len(candidates) == 1 else None
        return name if isinstance(name, str) else None

    def is_shared(self, url: URL) -> bool:
        # A database file: several processes may append to it at once, each transaction
        # taking the file's write lock at BEGIN IMMEDIATE (tests/test_sqlite_processes.py).
        # An in-memory database lives and dies with its one process (a shared-cache one is
        # shared by that process's connections only), so nothing else can append to it.
        # ``False`` only when surely in memory: the unsafe answer is "not shared" for a file.
        database = url.database or ""
        if str(url.query.get("uri", "")).lower() in ("true", "1") and database.startswith("file:"):
            # A URI filename (sqlite:///file:name?mode=memory&uri=true): its path, its mode.
            return not (database[5:] in ("", ":memory:") or url.query.get("mode") == "memory")
        return database not in ("", ":memory:")

    def connection_lost(self, exc: DBAPIError) -> bool:
        return bool(exc.connection_invalidated)

    def commit_in_doubt(self, exc: BaseException) -> bool:
        # COMMIT runs in this process, on the connection's own thread, and always answers:
        # there is no network to lose its answer on. A connection already closed ran
        # nothing (closing a connection rolls its open transaction back).
        return False

    def writable(self, conn: AsyncConnection) -> bool:
        # A DEFERRED transaction that has read but not written holds a snapshot and no
        # lock: its first write fails at once (SQLITE_BUSY_SNAPSHOT, or SQLITE_BUSY without
        # waiting on busy_timeout) whenever another connection wrote or is writing. A
        # transaction that took the write lock is safe: at BEGIN (IMMEDIATE), or by a write
        # of its own (the host's flush) that succeeded, which holds the lock to the end of
        # the transaction (ROLLBACK TO a savepoint keeps it too).
        sync = conn.sync_connection
        assert sync is not None
        return _holds_write_lock(sync.info, sync)


def _total_changes(connection: Any) -> int | None:
    """The sqlite3 connection's ``total_changes``: rows this connection has ever changed."""
    try:
        return int(connection.connection.driver_connection.total_changes)
    except Exception:  # not aiosqlite's connection, or closed: no evidence of a write
        return None


def _holds_write_lock(info: Any, connection: Any) -> bool:
    """Whether the SQLite transaction open on ``connection`` holds the write lock.

    IMMEDIATE took it at BEGIN; otherwise a row this connection changed since BEGIN (sqlite3's
    ``total_changes`` moved) proves a write statement succeeded in this transaction, which
    takes the lock and keeps it to COMMIT/ROLLBACK. This is a lower bound: a write that
    changed no row (or DDL) also took the lock but is not counted, so such a transaction is
    refused as if it had only read, never the other way round. Probing with a write of our
    own instead would fail under exactly the concurrency the refusal is about.
    """
    begun = info.get(_BEGUN)
    if begun == "immediate":
        return True
    if begun != "deferred":
        return False
    start = info.get(_CHANGES)
    now = _total_changes(connection)
    return start is not None and now is not None and now > start


# Stateless, so one of each: the repository caches statements per dialect object.
_POSTGRES = PostgresDialect()
_SQLITE = SqliteDialect()


#: Every database the store runs on: the one table the lookups below read.
_DIALECTS: tuple[Dialect, ...] = (_POSTGRES, _SQLITE)

_SUPPORTED = "agentplane_journal runs on PostgreSQL (asyncpg) and SQLite (aiosqlite)"


def dialect_named(name: str) -> Dialect:
    """The :class:`Dialect` of a backend by SQLAlchemy's name for it (``"postgresql"``,
    ``"sqlite"``), whatever the driver: for what names a database before any engine (the
    offline migration script). ``ValueError`` for a backend this package does not support."""
    for dialect in _DIALECTS:
        if dialect.name == name:
            return dialect
    raise ValueError(f"unsupported database {name!r}: {_SUPPORTED}")


class _Bound(Protocol):
    """An engine, a connection (sync or async), Alembic's migration context: what has
    SQLAlchemy's dialect."""

    @property
    def dialect(self) -> SqlalchemyDialect: ...


def dialect_for(
    bind: _Bound | URL | SqlalchemyDialect,
    *,
    any_driver: bool = False,
) -> Dialect:
    """The :class:`Dialect` of an engine, a connection (or anything with SQLAlchemy's
    ``.dialect``, such as Alembic's migration context), SQLAlchemy's dialect or a URL.

    Refuses (``ValueError``) a backend this package does not support and, unless
    ``any_driver``, a driver it does not run on. A URL in one of the dialect's
    :attr:`~Dialect.url_schemes` (``postgresql://`` included) is the dialect's: it gets the
    async driver (:func:`agentplane_journal.db.engine.async_url`). The migrations pass
    ``any_driver``: a host's ``env.py`` may run them on any driver of a supported backend.
    """
    if isinstance(bind, URL):
        for dialect in _DIALECTS:
            if bind.drivername in dialect.url_schemes:
                return dialect
        backend, driver, what = bind.get_backend_name(), bind.get_driver_name(), "URL"
    else:
        sa = bind if isinstance(bind, SqlalchemyDialect) else bind.dialect
        backend, driver, what = sa.name, sa.driver, "engine"
    dialect = dialect_named(backend)
    if not any_driver and driver != dialect.driver:
        raise ValueError(
            f"{dialect.title} is supported through {dialect.driver}; this {what} uses "
            f"{driver!r} (use a URL such as {dialect.url_example})"
        )
    return dialect


def database_key(engine: Engine) -> tuple[str, ...]:
    """What names the database an engine reaches, the same for every engine on it: the
    backend, host, port and :meth:`Dialect.database` (computed once per engine)."""
    engine = _unproxied(engine)
    key: tuple[str, ...] | None = getattr(engine, _KEY, None)
    if key is None:
        dialect = dialect_for(engine, any_driver=True)
        url = engine.url
        key = (dialect.name, url.host or "", str(url.port or ""), dialect.database(url) or "")
        setattr(engine, _KEY, key)
    return key


def configure_engine(engine: AsyncEngine) -> AsyncEngine:
    """Install the store's settings on a host application's engine (idempotent).

    Call it right after creating the engine, before it opens connections: SQLite's settings
    apply as each connection opens, and an engine that already pooled connections is refused
    (``ValueError``) rather than left half configured. What it changes, on SQLite only:

    * each new connection: pysqlite's own transaction handling is switched off
      (``isolation_level = None``; SQLAlchemy's ``BEGIN`` starts every transaction, reads
      included), ``PRAGMA journal_mode=WAL`` (a property of the database file, which stays)
      ``PRAGMA busy_timeout=30000``, ``PRAGMA synchronous=FULL`` (an acknowledged commit
      survives power loss) and a ``text_factory`` that returns a TEXT value which is not
      UTF-8 as its bytes instead of failing the whole read;
    * each transaction: ``BEGIN`` (DEFERRED, SQLite's default) unless its connection has the
      :data:`WRITE_TRANSACTION` execution option, then ``BEGIN IMMEDIATE``.

    ``foreign_keys`` and everything else stay as the host has them. On PostgreSQL nothing
    is changed.
    """
    dialect_for(engine).configure(engine)
    return engine


async def begin_write(session: AsyncSession) -> AsyncConnection:
    """Begin ``session``'s transaction as a write transaction; return its connection.

    On SQLite that is ``BEGIN IMMEDIATE`` (the engine must be configured by
    :func:`configure_engine`, or be a store's): the transaction holds the write lock from its
    first statement, so the host may read, then write its rows and append through the store
    (``session=``) without SQLITE_BUSY under concurrency. On PostgreSQL it is an ordinary
    ``BEGIN``. Call it first thing in a request that writes; a session whose transaction
    already has a connection is refused (``ValueError``), since it can no longer change how
    it began.
    """
    if not isinstance(session, AsyncSession):
        raise TypeError(f"session must be an AsyncSession, not {type(session).__name__}")
    transaction = session.sync_session.get_transaction()
    if transaction is not None and getattr(transaction, "_connections", None):
        raise ValueError(
            "begin_write(session) must come before the transaction's first statement; "
            "this session's transaction already has a connection"
        )
    write: dict[str, Any] = {WRITE_TRANSACTION: True}
    return await session.connection(execution_options=write)


def _unproxied(sync_engine: Engine) -> Engine:
    # engine.execution_options(...) makes an OptionEngine that shares the parent's pool and
    # events; configuration belongs to the parent.
    return getattr(sync_engine, "_proxied", sync_engine)


def is_configured(sync_engine: Engine) -> bool:
    """Whether :func:`configure_engine` (or a store) has configured this SQLite engine."""
    return bool(getattr(_unproxied(sync_engine), _CONFIGURED, False))


def _pooled_connections(sync_engine: Engine) -> int:
    pool = sync_engine.pool
    try:
        # Only some pools count (QueuePool and its async variant): the base Pool declares
        # no checkedin()/checkedout().
        counted: Any = pool
        return int(counted.checkedin()) + int(counted.checkedout())
    except AttributeError:  # pools without counts; the begin listener catches their strays
        return 0


def _unconfigured_message(what: str) -> str:
    return (
        f"this SQLite engine {what} before agentplane_journal configured it: those "
        "connections lack WAL, busy_timeout and the write-transaction BEGIN the store "
        "relies on. Call agentplane_journal.configure_engine(engine) right after "
        "create_async_engine(), before the engine's first use (or build the store on it "
        "first), or `await engine.dispose()` before configuring it"
    )


#: The high 32 bits of every erasure-scope lock key: "apjs" in ASCII, so a host's own
#: advisory locks can keep clear of them (MIGRATION_LOCK_KEY is another key).
SCOPE_LOCK_SPACE = 0x61706A73


async def scope_lock(dialect: Dialect, conn: AsyncConnection, key: int, *, exclusive: bool) -> None:
    """Hold the lock of one erasure scope until the transaction ends (keyring/).

    PostgreSQL: a transaction-level advisory lock on ``key`` (a 32-bit hash of tenant and
    scope under :data:`SCOPE_LOCK_SPACE`), shared for a sealing write, exclusive for an
    erasure, so an erasure waits for the writes in flight and the writes after it see it.
    SQLite: nothing to take: every writing transaction already holds the file's write lock
    (``BEGIN IMMEDIATE``), which excludes an erasure and a write at once.
    """
    if dialect.name != "postgresql":
        return
    lock = SCOPE_LOCK_SPACE << 32 | (key & 0xFFFFFFFF)  # a positive bigint
    fn = func.pg_advisory_xact_lock if exclusive else func.pg_advisory_xact_lock_shared
    await conn.execute(select(fn(lock)))
