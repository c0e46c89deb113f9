"""What both stores share: the engine, the schema check, units of work, and error translation.

One choke point (:meth:`Repository.unit`) opens the session, commits, rolls back and turns
driver errors into the contract's errors, keeping the driver's exception as ``__cause__``.
A write's COMMIT lost after it was sent is :class:`CommitUnknownError` (it may have landed); any
other driver error is :class:`BackendError` unless the caller names a constraint it expects.

Given the host's ``session=``, the same choke point runs the unit inside the host's current
transaction instead, in a SAVEPOINT, and commits nothing: the host commits or rolls back, so
the store's rows go with the host's. A unit that fails rolls back to its savepoint, which
undoes only the store's part (and on PostgreSQL drops the row locks it took, the run mutex
among them), so the host's transaction stays usable and the host decides. ``RELEASE`` keeps
the locks to the host's COMMIT, as the guarantees need.

The argument checks the stores run (bad input is refused with ``ValueError``/``TypeError``
before a connection is taken) are :mod:`agentplane_journal.core.checks`'s, re-exported here.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, NoReturn, Self, TypeVar, cast

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, UnboundExecutionError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from agentplane_journal.core.ids import DEFAULT_TENANT, validate_tenant
from agentplane_journal.db import selfwait
from agentplane_journal.db.dialect import (
    READ_ONLY,
    WRITE_TRANSACTION,
    Dialect,
    database_key,
    dialect_for,
)
from agentplane_journal.db.engine import database_named, open_engine
from agentplane_journal.db.hotpath import HotPath
from agentplane_journal.db.replication import ReplicationState, replication, wait_received
from agentplane_journal.db.revision import (
    HEAD_REVISION,
    check_revision,
    check_schema,
    schema_options,
)
from agentplane_journal.db.turns import WriteTurn
from agentplane_journal.errors import (
    BackendError,
    CommitUnknownError,
    CorruptLogError,
    Database,
    PoolerError,
    SchemaOutOfDateError,
    StoreError,
)

__all__ = [
    "Repository",
    "TransactionAnchor",
]

log = logging.getLogger("agentplane_journal.db.unit")

T = TypeVar("T")

# -- the shared repository -----------------------------------------------------------


@dataclass
class _Shared:
    """State shared by every tenant handle of one store: the engine and the schema check."""

    engine: AsyncEngine
    dialect: Dialect
    sessions: async_sessionmaker[AsyncSession]
    owns_engine: bool
    #: Where read-only units go (a replica), or None for the primary.
    read_sessions: async_sessionmaker[AsyncSession] | None = None
    read_engine: AsyncEngine | None = None
    owns_read_engine: bool = False
    #: The PostgreSQL schema the tables are in (``None``: the default schema), and the
    #: engine the store's own units run on: ``engine`` with ``schema_options(schema)``.
    schema: str | None = None
    bind: AsyncEngine | None = None
    schema_checked: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Read-your-writes with a replica: a count of the writes of this store that ended,
    #: the count the replica was last seen to have replayed past, and whether a host's
    #: session took writes (see :meth:`Repository._replica_has_our_writes`).
    read_your_writes: bool = True
    writes: int = 0
    caught_up: int = 0
    host_writes: bool = False
    #: The process's hot append path for this store, chosen by the dialect object
    #: (``backends.dispatch.hot_path``), set by the store's first handle.
    writer: HotPath | None = None
    #: The store's lean reads (``backends.reader.Reader``, or ``None`` where they do not
    #: apply), made at the first read (``reader_made``).
    reader: Any = None
    reader_made: bool = False
    #: Where the process's write transactions take turns (``db.turns``; SQLite), or None.
    turn: WriteTurn | None = None


class Rollback(Exception):
    """Internal: end a unit of work without committing, returning ``value``."""

    def __init__(self, value: object) -> None:
        self.value = value


class Passthrough(Exception):
    """Internal: carries a caller's exception (``append_atomic``'s work) to re-raise as is."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class Repository:
    """Base of the stores: one engine, tenant handles, and the unit-of-work choke point."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        tenant: str = DEFAULT_TENANT,
        schema: str | None = None,
        clock: Callable[[], float] | None = None,
        read_engine: AsyncEngine | None = None,
        read_your_writes: bool = True,
        _shared: _Shared | None = None,
    ) -> None:
        if not isinstance(engine, AsyncEngine):
            raise TypeError(
                f"{type(self).__name__} needs an sqlalchemy AsyncEngine, not "
                f"{type(engine).__name__}; use `await {type(self).__name__}.connect(url)` "
                "to open one from a URL"
            )
        if clock is not None and not callable(clock):
            raise TypeError("clock must be a zero-argument callable returning seconds")
        if _shared is None:
            dialect = dialect_for(engine)
            schema = check_schema(schema, dialect)
            dialect.configure(engine)
            # The tables' schema as an execution option on every statement the store runs
            # (SQLAlchemy's schema_translate_map): the models stay schema-less, so the
            # default layout is agentplane's and a schema costs no second set of tables.
            bind = engine.execution_options(**schema_options(schema)) if schema else engine
            _shared = _Shared(
                engine=engine,
                dialect=dialect,
                sessions=async_sessionmaker(bind, expire_on_commit=False, autoflush=True),
                owns_engine=False,
                schema=schema,
                bind=bind,
                read_your_writes=bool(read_your_writes),
                turn=WriteTurn() if dialect.write_turns else None,
            )
            if read_engine is not None:
                _shared.read_engine = _check_read_engine(read_engine, dialect)
                dialect.configure(read_engine)
                read_bind = read_engine.execution_options(**schema_options(schema))
                _shared.read_sessions = async_sessionmaker(read_bind, expire_on_commit=False)
        self._shared = _shared
        self._clock = clock or time.time
        #: The tenant this handle serves; every statement carries it.
        self.tenant: str = validate_tenant(tenant)

    @classmethod
    async def _open(
        cls,
        url: str,
        engine_options: dict[str, Any] | None,
        read_url: str | None = None,
        *,
        check_at_open: bool = True,
        **kw: Any,
    ) -> Self:
        engine = open_engine(url, engine_options)
        read_engine = None
        try:
            if read_url is not None:
                read_engine = kw["read_engine"] = open_engine(read_url, engine_options)
            store = cls(engine, **kw)
            store._shared.owns_engine = True
            store._shared.owns_read_engine = read_engine is not None
            if check_at_open:
                await store._ready()
        except BaseException:
            await engine.dispose()
            if read_engine is not None:
                await read_engine.dispose()
            raise
        return store

    async def close(self) -> None:
        """Dispose of the engines this store opened (a caller's engines stay open)."""
        if self._shared.writer is not None:  # its connections back in the pool first
            await self._shared.writer.idle()
        if self._shared.reader is not None:
            await self._shared.reader.idle()
        if self._shared.owns_engine:
            await self._shared.engine.dispose()
        if self._shared.owns_read_engine and self._shared.read_engine is not None:
            await self._shared.read_engine.dispose()

    async def __aenter__(self) -> Self:
        await self._ready()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def engine(self) -> AsyncEngine:
        """The engine this store runs on."""
        return self._shared.engine

    def __repr__(self) -> str:
        url = self._shared.engine.url.render_as_string(hide_password=True)
        return f"{type(self).__name__}({url!r}, tenant={self.tenant!r})"

    @property
    def schema(self) -> str | None:
        """The PostgreSQL schema the journal's tables are in (``None``: the default schema)."""
        return self._shared.schema

    @property
    def dialect(self) -> Dialect:
        """The dialect object: every backend difference the modules of this package ask
        about (package-internal)."""
        return self._shared.dialect

    @property
    def _bind(self) -> AsyncEngine:
        """The engine the store's own connections come from (carrying the schema)."""
        return self._shared.bind or self._shared.engine

    def now(self) -> int:
        """The store's clock in whole seconds, as rows store instants (package-internal)."""
        return math.floor(self._clock())

    #: The old private name, kept for the tests that drive the clock through it.
    _now = now

    @property
    def database(self) -> Database:
        """This store's database as an error's advice names it in a command (``--url``
        with the password masked, ``--schema``, ``--tenant``): :class:`Database`."""
        return database_named(self._shared.engine, self._shared.schema, self.tenant)

    async def _ready(self) -> None:
        """Check the schema revision once, before the first statement."""
        shared = self._shared
        if shared.schema_checked:
            return
        async with shared.lock:
            if shared.schema_checked:
                return
            path = shared.dialect.database_file(shared.engine.url)
            # One stat, once per store: not worth a thread hop.
            if path is not None and not os.path.exists(path):  # noqa: ASYNC240
                # Connecting would create an empty file: refuse without touching disk.
                raise SchemaOutOfDateError(None, HEAD_REVISION, database=self.database)
            try:
                async with self._bind.connect() as conn:
                    conn = await conn.execution_options(**{READ_ONLY: True})
                    await check_revision(conn, schema=shared.schema)
            except SchemaOutOfDateError as exc:
                raise exc.naming(self.database) from None
            except DBAPIError as exc:
                if shared.dialect.pooler_misrouted(exc):
                    raise PoolerError(describe(exc)) from exc
                raise BackendError(f"cannot read the schema revision: {describe(exc)}") from exc
            except OSError as exc:
                raise BackendError(f"cannot connect to the database: {exc}") from exc
            shared.schema_checked = True

    async def unit(
        self,
        fn: Callable[[AsyncSession], Awaitable[T]],
        *,
        read_only: bool = False,
        primary: bool = False,
        translate: Callable[[DBAPIError], StoreError | None] | None = None,
        session: AsyncSession | None = None,
        run: Any = None,
    ) -> T:
        """Run ``fn`` in one transaction and commit it, translating driver errors once, here.

        The package's modules open every unit of work through this (package-internal).
        ``fn`` may raise ``Rollback(value)`` to end without committing and return ``value``.
        A read-only unit goes to the read engine (a replica, possibly behind) when there is
        one, unless ``primary``: a read whose answer a writer acts on must see the latest
        commit. (The fence, the head and the log counter of a write are read inside the write
        transaction itself, which is never read-only.)
        With ``session`` (the host's), ``fn`` runs in that session's transaction instead and
        nothing is committed: see :meth:`_host_unit`.
        Without it, a write that would wait on a transaction this task holds open itself is
        refused first (:meth:`refuse_own_wait`; ``run``, when the unit takes a run mutex).
        """
        if session is not None:
            return await self._host_unit(session, fn, read_only=read_only, translate=translate)
        if not read_only:
            self.refuse_own_wait(run)
        await self._ready()
        turn = self._shared.turn
        if turn is not None and not read_only:
            async with turn.taken():  # SQLite: after the writes before it, never asleep
                return await self._own_unit(fn, read_only, primary, translate)
        return await self._own_unit(fn, read_only, primary, translate)

    def _unit(self, fn: Callable[[AsyncSession], Awaitable[T]], **kw: Any) -> Awaitable[T]:
        """The old private name of :meth:`unit`, kept for the tests that open units with it."""
        return self.unit(fn, **kw)

    async def _own_unit(
        self,
        fn: Callable[[AsyncSession], Awaitable[T]],
        read_only: bool,
        primary: bool,
        translate: Callable[[DBAPIError], StoreError | None] | None,
    ) -> T:
        """:meth:`unit`'s transaction on a session of the store's own."""
        shared = self._shared
        sessions = shared.sessions
        replica = read_only and not primary and shared.read_sessions is not None
        if replica and shared.read_sessions is not None:
            sessions = shared.read_sessions  # the replica
        session = sessions()
        committing = False
        try:
            if replica and not await self._replica_has_our_writes(session):
                await session.close()
                session = shared.sessions()  # it has not replayed them yet: the primary
            if not read_only:
                # SQLite: BEGIN IMMEDIATE, the write lock before the first read.
                write: dict[str, Any] = {WRITE_TRANSACTION: True}
                await session.connection(execution_options=write)
            try:
                result = await fn(session)
            except Rollback as rollback:
                await session.rollback()
                return cast(T, rollback.value)  # fn raised it with its own result
            await session.flush()  # a failing flush is a statement error, not an unknown commit
            # Only a write's COMMIT can be in doubt: a read-only unit wrote nothing, so
            # however its COMMIT fails, nothing was written and the read can be retried.
            committing = not read_only
            await session.commit()
            return result
        except BaseException as exc:
            await self._fail(exc, session, translate, committing=committing)
        finally:
            if not read_only:
                self._wrote()  # ended, whatever its outcome: a later read must see it
            await session.close()

    async def reads_from_standby(self) -> bool:
        """Whether the server that answers this store's audit reads is a standby still in
        recovery (a streaming replica): its log may be behind the primary's, so a log
        smaller than a saved checkpoint there means "not replayed yet", not "truncated"."""
        dialect = self._shared.dialect

        async def unit(session: AsyncSession) -> bool:
            return await dialect.standby(await session.connection())

        return await self.unit(unit, read_only=True)

    async def replication(self) -> ReplicationState:
        """What a failover could lose now: the primary's WAL end and how far each streaming
        standby has flushed and replayed it (:mod:`agentplane_journal.db.replication`).
        Read on the primary; SQLite has no replication (no position, no standbys)."""
        await self._ready()
        shared = self._shared
        try:
            async with shared.engine.connect() as conn:
                return await replication(shared.dialect, conn)
        except DBAPIError as exc:
            raise BackendError(f"cannot read the replication state: {describe(exc)}") from exc

    async def wait_standby(self, within: float) -> ReplicationState:
        """Wait up to ``within`` seconds until a standby has flushed everything this
        primary acknowledged before the call (so a failover to it cannot lose what was read
        before, such as a checkpoint); the state last seen, ``.safe`` if one did."""
        await self._ready()
        shared = self._shared
        try:
            async with shared.engine.connect() as conn:
                position = await shared.dialect.wal_position(conn)
                if position is None:
                    return ReplicationState(None, ())
                await conn.commit()  # each poll in a transaction of its own
                return await wait_received(shared.dialect, conn, position, within)
        except DBAPIError as exc:
            raise BackendError(f"cannot read the replication state: {describe(exc)}") from exc

    def _wrote(self, *, host: bool = False) -> None:
        """Note, for read-your-writes, a write of this store that has *ended* (committed,
        failed or unknown): a read that starts afterwards reads a WAL position past it. A
        write in the host's session (``host``) ends when the host commits, which the store
        does not see: from then on every replica read checks."""
        self._shared.writes += 1
        if host:
            self._shared.host_writes = True

    async def _replica_has_our_writes(self, session: AsyncSession) -> bool:
        """Whether the replica ``session`` reads from has replayed every write this store
        has begun: read-your-writes (on unless ``read_your_writes=False``).

        Nothing to check when the store has not written since the replica was last seen
        past its writes. Otherwise one statement on the primary reads where its WAL ends
        (every commit acknowledged so far lies before it) and one on the replica, first in
        the read's own transaction, whether replay has passed it; a standby's replay only
        moves forward, so the read that follows sees at least that much. Writes are counted
        when they end, so the count read first covers only writes before the position; a
        write still in flight is not waited for (only acknowledged ones are promised).
        Costs nothing on the write path.
        """
        shared = self._shared
        writes = shared.writes
        if not shared.read_your_writes or (writes == shared.caught_up and not shared.host_writes):
            return True
        async with shared.engine.connect() as primary:
            primary = await primary.execution_options(**{READ_ONLY: True})
            position = await shared.dialect.wal_position(primary)
        if position is None:
            return True
        if not await shared.dialect.replayed(await session.connection(), position):
            return False
        shared.caught_up = max(shared.caught_up, writes)
        return True

    async def _host_unit(
        self,
        session: AsyncSession,
        fn: Callable[[AsyncSession], Awaitable[T]],
        *,
        read_only: bool,
        translate: Callable[[DBAPIError], StoreError | None] | None,
    ) -> T:
        """Run ``fn`` in the host's transaction, in a SAVEPOINT, committing nothing.

        The host's transaction is begun if none is open (on SQLite as a write transaction
        when the unit writes). Errors are the same as in the store's own units, except that
        :class:`CommitUnknownError` cannot arise here: the host commits, and a lost COMMIT is
        the host's to treat as unknown. A write unit that fails has rolled back to its
        savepoint; a read takes none (it has nothing to undo), so a read the database fails
        leaves the host's transaction as the database left it (on PostgreSQL: aborted).
        """
        self._check_session(session)
        await self._ready()
        try:
            transaction = session.sync_session.get_transaction()
            if not read_only:
                self._wrote(host=True)
            fresh = transaction is None or not getattr(transaction, "_connections", None)
            options = {WRITE_TRANSACTION: True} if fresh and not read_only else None
            conn = await session.connection(execution_options=options)
            if not read_only and not self.dialect.writable(conn):
                raise ValueError(
                    "this SQLite transaction began as a read (BEGIN DEFERRED) and has already "
                    "run statements: its first write would fail at once with 'database is "
                    "locked' whenever another connection writes. Begin the session's "
                    "transaction with `await agentplane_journal.begin_write(session)` (or let "
                    "the store's call be its first statement)"
                )
            # Writes only: a read changes nothing to undo, and the two statements cost a
            # host-session write a tenth to a fifth of its time (bench/session.py, README).
            savepoint = None if read_only else await session.begin_nested()
            sync = conn.sync_connection
            held = selfwait.held_runs(sync) if sync is not None else frozenset()
        except BaseException as exc:
            await self._fail(exc, None, translate)
        try:
            try:
                async with self._schema_for(session, ours=True):
                    result = await fn(session)
            except Rollback as rollback:
                if savepoint is not None:
                    await savepoint.rollback()
                    self._forget_runs(sync, held)
                return cast(T, rollback.value)  # fn raised it with its own result
            if savepoint is not None:
                await savepoint.commit()
            return result
        except BaseException as exc:
            if savepoint is not None:
                self._forget_runs(sync, held)
            await self._fail(exc, savepoint, translate)

    @staticmethod
    def _forget_runs(sync: Connection | None, held: frozenset[tuple[str, str]]) -> None:
        # ROLLBACK TO SAVEPOINT released the run mutexes taken since (PostgreSQL).
        if sync is not None:
            selfwait.restore(sync, held)

    def refuse_own_wait(self, run: Any = None) -> None:
        """Refuse (``ValueError``, before any statement) a call without ``session=`` that
        would wait on this task's own open transaction: on SQLite one holding the write
        lock, on PostgreSQL one holding ``run``'s mutex (see :mod:`.selfwait`)."""
        selfwait.refuse_own_wait(
            self._shared.engine.sync_engine,
            self.tenant,
            None if run is None else str(run),
            database_key,
        )

    async def _fail(
        self,
        exc: BaseException,
        undo: Any,
        translate: Callable[[DBAPIError], StoreError | None] | None,
        *,
        committing: bool = False,
    ) -> NoReturn:
        """Roll back ``undo`` (a session, a savepoint, or ``None``) and raise what ``exc``
        means to a caller: a driver error translated once, here (a write's COMMIT that may
        have landed, ``committing``, is :class:`CommitUnknownError`), an unreachable
        database or a pool with no connection free :class:`BackendError`, anything else as
        it is."""
        await _quiet_rollback(undo)
        if isinstance(exc, Passthrough):
            raise exc.error from None
        if isinstance(exc, CorruptLogError):  # its advice: commands naming this database
            raise exc.naming(self.database) from None
        if committing and isinstance(exc, Exception) and self.dialect.commit_in_doubt(exc):
            raise CommitUnknownError(describe(exc)) from exc
        if isinstance(exc, DBAPIError):
            if self.dialect.pooler_misrouted(exc):  # a refusal: the statement never ran
                raise PoolerError(describe(exc)) from exc
            raise self._translated(exc, translate) from exc
        if isinstance(exc, OSError):
            raise BackendError(f"cannot reach the database: {exc}") from exc
        if isinstance(exc, PoolTimeoutError):  # before any statement: nothing was sent
            raise BackendError(f"no pooled connection came free in time: {exc}") from exc
        raise exc

    @asynccontextmanager
    async def _schema_for(self, session: AsyncSession, *, ours: bool) -> AsyncIterator[None]:
        """In the block, unqualified tables are the journal's (``ours``) or the host's.

        With ``schema=``, the journal's tables are reached through ``schema_translate_map``
        on the connection, which would move a host's own (schema-less) models too: a host
        session (``session=``) gets the map only while the store's statements run, and
        ``append_atomic``'s ``work`` runs without it. Pending ORM rows are flushed on the
        side they belong to before the map changes.
        """
        if self._shared.schema is None:
            yield
            return
        conn = await session.connection()
        assert conn.sync_connection is not None  # a session hands out a started connection
        previous = conn.sync_connection.get_execution_options().get("schema_translate_map")
        await session.flush()
        await conn.execution_options(
            schema_translate_map={None: self._shared.schema} if ours else None
        )
        try:
            yield
            await session.flush()
        finally:
            await conn.execution_options(schema_translate_map=previous)

    def _translated(
        self, exc: DBAPIError, translate: Callable[[DBAPIError], StoreError | None] | None
    ) -> StoreError:
        mapped = translate(exc) if translate else None
        return mapped if mapped is not None else BackendError(describe(exc))

    def _check_session(self, session: object) -> None:
        """Refuse a host session that is not an AsyncSession on this store's database."""
        if not isinstance(session, AsyncSession):
            raise TypeError(
                f"session must be an sqlalchemy AsyncSession, not {type(session).__name__}"
            )
        try:
            bind = session.sync_session.get_bind()
        except UnboundExecutionError:
            raise ValueError(
                "session has no bind: give it this store's engine (AsyncSession(engine) or "
                "async_sessionmaker(engine))"
            ) from None
        engine: Engine = bind.engine if isinstance(bind, Connection) else bind
        ours = self._shared.engine.sync_engine
        if engine.pool is ours.pool:
            return
        dialect = self.dialect
        if not _same_database(engine, ours, dialect):
            raise ValueError(
                "session is bound to "
                f"{engine.url.render_as_string(hide_password=True)!r}, but this store runs on "
                f"{ours.url.render_as_string(hide_password=True)!r}: the store can only write "
                "in a transaction on its own database"
            )
        if not dialect.configured(engine):  # SQLite's settings, on another engine
            raise ValueError(
                "session is bound to another engine on this SQLite database that "
                "agentplane_journal has not configured: call "
                "agentplane_journal.configure_engine(engine) right after creating it (or "
                "build the store on that engine)"
            )


@dataclass(frozen=True, slots=True)
class TransactionAnchor:
    """The transaction a unit took the run mutex in, to check it still is the session's.

    ``session.commit()``, ``rollback()`` or ``close()`` inside a host callback ends it: the
    run mutex and the fence are gone, and nothing may be written on their strength.
    """

    root: Any
    innermost: Any
    connection: Any

    @classmethod
    async def take(cls, session: AsyncSession) -> TransactionAnchor:
        conn = await session.connection()
        sync = session.sync_session
        return cls(sync.get_transaction(), sync.get_nested_transaction(), conn.sync_connection)

    async def intact(self, session: AsyncSession) -> bool:
        """Whether the anchored transaction (and savepoint) is still open on this session."""
        root = session.sync_session.get_transaction()
        if root is None or root is not self.root or not root.is_active:
            return False
        if self.innermost is not None and not self.innermost.is_active:
            return False
        conn = await session.connection()  # the transaction is open: no autobegin here
        return conn.sync_connection is self.connection and not conn.invalidated


def _same_database(engine: Engine, ours: Engine, dialect: Dialect) -> bool:
    """Whether ``engine`` reaches the database of ``ours`` (whose dialect is ``dialect``):
    the same backend, any driver, and the same :meth:`Dialect.database`."""
    try:
        if dialect_for(engine, any_driver=True) is not dialect:
            return False
    except ValueError:  # a backend the package does not run on
        return False
    return dialect.database(engine.url) == dialect.database(ours.url)


def describe(exc: BaseException) -> str:
    """One line naming the driver error and its SQLSTATE, for error messages: of a
    SQLAlchemy ``DBAPIError`` (its driver's exception) or of a driver's own exception."""
    driver = getattr(exc, "orig", None) or exc
    # SQLAlchemy 2.1 hands the driver's exception over as ``driver_exception``; 2.0 keeps
    # the SQLSTATE on its adapted ``orig`` (or on the driver's exception as its cause).
    code = None
    for source in (getattr(exc, "driver_exception", None), driver, driver.__cause__, exc):
        code = getattr(source, "sqlstate", None)
        if code:
            break
    text = str(driver).strip().splitlines()[0] if str(driver).strip() else type(driver).__name__
    return f"{type(driver).__name__}{f' [{code}]' if code else ''}: {text}"


async def _quiet_rollback(session: Any) -> None:
    """Roll back a session or a savepoint (if any), ignoring a connection already gone."""
    if session is None:
        return
    try:
        await session.rollback()
    except Exception:  # the connection may already be gone; the pool discards it
        log.debug("rollback after a failed unit of work failed", exc_info=True)


def _check_read_engine(engine: object, dialect: Dialect) -> AsyncEngine:
    if not isinstance(engine, AsyncEngine):
        raise TypeError(
            f"read_engine must be an sqlalchemy AsyncEngine, not {type(engine).__name__}"
        )
    theirs = dialect_for(engine)
    if theirs is not dialect:
        raise ValueError(
            f"read_engine is {theirs.name} but the engine is {dialect.name}: a read "
            "engine is a replica of the same database"
        )
    return engine
