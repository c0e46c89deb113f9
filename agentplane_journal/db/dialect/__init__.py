"""The few places PostgreSQL and SQLite differ, one class per backend.

Everything else in the repository is dialect-agnostic SQLAlchemy. What lives in this package
(:mod:`.protocol`: the :class:`Dialect` protocol and what both share; :mod:`.postgresql` and
:mod:`.sqlite`: one class each; here: the lookups, :func:`configure_engine`, :func:`begin_write`):

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

import itertools
from typing import Any, Protocol

from sqlalchemy import func, select
from sqlalchemy.engine import URL, Engine
from sqlalchemy.engine import Dialect as SqlalchemyDialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from agentplane_journal.db.dialect.postgresql import PostgresDialect
from agentplane_journal.db.dialect.protocol import (
    _KEY,
    MIGRATION_LOCK_KEY,
    READ_ONLY,
    SQLITE_BUSY_TIMEOUT_MS,
    WRITE_TRANSACTION,
    Dialect,
    Upsert,
    _unproxied,
    counter_next,
)
from agentplane_journal.db.dialect.sqlite import SqliteDialect, is_configured

__all__ = [
    "MIGRATION_LOCK_KEY",
    "READ_ONLY",
    "SCOPE_LOCK_SPACE",
    "SQLITE_BUSY_TIMEOUT_MS",
    "WRITE_TRANSACTION",
    "Dialect",
    "PostgresDialect",
    "SqliteDialect",
    "Upsert",
    "begin_write",
    "configure_engine",
    "counter_next",
    "database_key",
    "dialect_for",
    "dialect_named",
    "is_configured",
    "scope_lock",
]


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


#: Query parameters that say where a server is (libpq's ``?host=/run/postgresql``, a socket
#: directory, or ``?host=a,b&port=5432,5433``): part of what names a database.
_LOCATION = frozenset({"host", "hostaddr", "port", "service"})
#: A number per private in-memory SQLite database, each of which is its engine's own.
_PRIVATE = itertools.count(1)


def database_key(engine: Engine) -> tuple[str, ...]:
    """What names the database an engine reaches, the same for every engine on it: the
    backend, host, port, the URL's location parameters and :meth:`Dialect.database`
    (computed once per engine). Two databases never share a key: a private in-memory SQLite
    database (``:memory:``) is its engine's alone, so it gets a number of its own, and a
    server named only by ``?host=`` (a socket directory) or ``?port=`` is told by them. (A
    shared key would let one database's verified state vouch for another's rows: refused
    as corrupt, since every row is still checked, but about an honest database.)"""
    engine = _unproxied(engine)
    key: tuple[str, ...] | None = getattr(engine, _KEY, None)
    if key is None:
        dialect = dialect_for(engine, any_driver=True)
        url = engine.url
        name = dialect.database(url) or ""
        if dialect is _SQLITE and name in ("", ":memory:"):
            name = f":memory: #{next(_PRIVATE)}"
        where = sorted(f"{k}={v}" for k, v in url.query.items() if k in _LOCATION)
        key = (dialect.name, url.host or "", str(url.port or ""), name, *where)
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
