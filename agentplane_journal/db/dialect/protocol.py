"""What a dialect is: the :class:`Dialect` protocol the repository asks, and what both
backends' classes share (the execution options, the driver's own error, the counter row).

The classes are :mod:`.postgresql` and :mod:`.sqlite`; which one a database is gets decided in
the package (:func:`agentplane_journal.db.dialect.dialect_for`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from sqlalchemy import (
    ColumnElement,
    Table,
)
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from agentplane_journal.db.models import JournalCounter

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
    #: Which forms ``export --all``'s page statements take (``journal/export_pages.py``):
    #: a log page cut by bytes with a running sum beside its rows (one join) rather than by
    #: a ``LIMIT`` computed from a second join of the same rows, and an open page's runs of
    #: the log flagged rather than filtered out. PostgreSQL planned that second join as a
    #: hash join over the tenant's journal, and read the filter twice a row; SQLite runs the
    #: other forms faster (the window costs it a sort of the page).
    windowed_export_pages: bool
    #: ``export --all`` hands the event loop back every this many rows of a page it writes
    #: (``None``: never), so that the next page, asked for before, is read meanwhile: a
    #: server's round trips go on (PostgreSQL: the export's wall 0.58-0.59 -> 0.55-0.57 s at
    #: 10,000 runs, load 3); SQLite's thread would only contend for the GIL (+7% CPU).
    export_handoff_rows: int | None

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

    def text_in(self, column: Any, name: str) -> ColumnElement[bool]:
        """``column`` is one of the texts bound as the list parameter ``name``: a statement
        built once whose list is not rendered into it per execution where the backend binds
        a list as one value."""

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

    async def copy_rows(
        self,
        conn: AsyncConnection,
        table: Table,
        columns: Sequence[str],
        rows: Sequence[tuple[Any, ...]],
    ) -> bool:
        """Write ``rows`` (the driver's values, in ``columns`` order) into ``table`` by the
        backend's bulk load, in the transaction open on ``conn``; ``False`` when nothing was
        written: the backend has none (SQLite), or it refused the rows, which left nothing
        behind (PostgreSQL's ``COPY``, in a savepoint). Then the caller inserts the rows the
        ordinary way, and that statement names whatever refuses them."""

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


def _unproxied(sync_engine: Engine) -> Engine:
    # engine.execution_options(...) makes an OptionEngine that shares the parent's pool and
    # events; configuration belongs to the parent.
    return getattr(sync_engine, "_proxied", sync_engine)
