"""SQLite through aiosqlite: the dialect class (:class:`SqliteDialect`) and the engine
configuration it installs (WAL, busy timeout, ``BEGIN IMMEDIATE`` for write transactions)."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    ColumnElement,
    LargeBinary,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    bindparam,
    event,
    func,
    literal,
    literal_column,
    select,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from agentplane_journal.db import selfwait
from agentplane_journal.db.dialect.protocol import (
    READ_ONLY,
    SQLITE_BUSY_TIMEOUT_MS,
    WRITE_TRANSACTION,
    _driver_errors,
    _unproxied,
    counter_next,
)
from agentplane_journal.db.models import RunOutcome

_CONFIGURED = "_agentplane_journal_configured"
# In a pooled connection's ``info``: how its current transaction began ("immediate" or
# "deferred"); cleared when the transaction ends.
_BEGUN = "agentplane_journal_begun"
# Beside it: the connection's sqlite3 ``total_changes`` when the transaction began.
_CHANGES = "agentplane_journal_changes"


def _text_or_bytes(data: bytes) -> str | bytes:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


class _JsonTexts(TypeDecorator[Sequence[str]]):
    """A list of texts bound as one JSON array parameter (for ``json_each``)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Sequence[str] | None, dialect: Any) -> str | None:
        return None if value is None else json.dumps(list(value))


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
    windowed_export_pages = False
    export_handoff_rows: int | None = None
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

        event.listen(sync_engine, "connect", _on_connect)
        event.listen(sync_engine, "begin", _on_begin)
        event.listen(sync_engine, "commit", _on_end)
        event.listen(sync_engine, "rollback", _on_end)
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

    def text_in(self, column: Any, name: str) -> ColumnElement[bool]:
        # No list type: the list as one JSON array, read back by json_each (as
        # seqs_from_param is). An expanding IN rendered a parameter per id into the
        # statement at every execution; this one is compiled once, and SQLite still seeks
        # the index once per id ("LIST SUBQUERY": EXPLAIN QUERY PLAN).
        texts: Any = select(literal_column("value")).select_from(
            func.json_each(bindparam(name, type_=_JsonTexts()))
        )
        one_of: ColumnElement[bool] = column.in_(texts)
        return one_of

    async def copy_rows(
        self,
        conn: AsyncConnection,
        table: Table,
        columns: Sequence[str],
        rows: Sequence[tuple[Any, ...]],
    ) -> bool:
        # No bulk load beyond executemany itself, which the caller runs.
        return False

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
        # nothing (closing a connection rolls its open transaction back). What its answer
        # can leave in doubt is the disk: see commit_error_in_doubt.
        return commit_error_in_doubt(getattr(exc, "orig", exc))

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


def commit_error_in_doubt(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a write transaction's ``COMMIT`` on a WAL database, leaves
    it unknown whether the transaction landed: an I/O error (``SQLITE_IOERR``, any of its
    extended codes).

    A WAL commit writes its pages as frames, the commit frame last, then syncs the file
    (``synchronous=FULL``). An I/O error there (a failed ``fsync``, a short write) makes
    SQLite roll the transaction back in memory, but frames already written stay in the file,
    a valid commit frame among them if only the sync failed: the next connection to open
    the database after a crash recovers it, and the transaction is there
    (``tests/test_sqlite_commit_in_doubt.py`` shows it, with ``fsync`` made to fail). A
    ``SQLITE_FULL`` leaves no valid commit frame (written last and checksummed, it is the
    write refused or cut short), and every other answer comes before anything is written
    (busy, locked, read-only, a constraint, a closed connection): surely not committed.
    """
    name = getattr(exc, "sqlite_errorname", None)
    return (
        isinstance(exc, sqlite3.Error) and isinstance(name, str) and name.startswith("SQLITE_IOERR")
    )


def _on_connect(dbapi_connection: Any, record: Any) -> None:
    """A new connection of a configured engine: our transactions, WAL, busy timeout, FULL sync."""
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
    _switch_to_wal(cursor)
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


def _switch_to_wal(cursor: Any) -> None:
    """``PRAGMA journal_mode=WAL``, waiting as ``busy_timeout`` would where SQLite does not.

    On a file still in rollback mode (a fresh one, which every worker of a first boot opens
    at once), the switch fails at once with "database is locked", without calling the busy
    handler, while another connection holds the write lock (seen in CI: one of eight
    processes upgrading one fresh file; reproduced with a ``BEGIN IMMEDIATE`` held). Retried
    here, with a backoff from 1 to 50 ms, until the busy timeout has passed: the wait is a
    ``time.sleep`` on the connecting thread (for aiosqlite, the event loop's), only in that
    race, only at a connection's start. Once the file is in WAL the switch takes no lock.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    delay = 0.001
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _on_begin(connection: Any) -> None:
    """A transaction of a configured engine begins: IMMEDIATE if it writes, else DEFERRED."""
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


def _on_end(connection: Any) -> None:
    """A transaction ended (COMMIT or ROLLBACK): forget how it began."""
    connection.info.pop(_BEGUN, None)
    connection.info.pop(_CHANGES, None)
    connection.info.pop(selfwait.TOKEN, None)


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
