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

The repository's parts live beside it: its shared state (:mod:`.shared`), the host-session
units (:mod:`.host_session`), the standby reads (:mod:`.replica_reads`), the unit's signals
(:mod:`.unit_signals`) and the driver errors' description (:mod:`.driver_errors`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, Self, TypeVar, cast

from sqlalchemy.exc import DBAPIError
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
from agentplane_journal.db.driver_errors import describe, quiet_rollback
from agentplane_journal.db.engine import database_named, open_engine
from agentplane_journal.db.host_session import HostSession, TransactionAnchor
from agentplane_journal.db.replica_reads import ReplicaReads
from agentplane_journal.db.revision import (
    HEAD_REVISION,
    check_revision,
    check_schema,
    schema_options,
)
from agentplane_journal.db.shared import SharedState, check_read_engine
from agentplane_journal.db.turns import WriteTurn
from agentplane_journal.db.unit_signals import Passthrough, Rollback
from agentplane_journal.errors import (
    BackendError,
    CommitUnknownError,
    CorruptLogError,
    Database,
    PoolerError,
    SchemaOutOfDateError,
    StoreError,
)

# Names other modules import from here, where they were defined before the split.
__all__ = [
    "Passthrough",
    "Repository",
    "Rollback",
    "TransactionAnchor",
    "describe",
]

T = TypeVar("T")


class Repository(ReplicaReads, HostSession):
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
        _shared: SharedState | None = None,
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
            _shared = SharedState(
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
                _shared.read_engine = check_read_engine(read_engine, dialect)
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
        await quiet_rollback(undo)
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

    def _translated(
        self, exc: DBAPIError, translate: Callable[[DBAPIError], StoreError | None] | None
    ) -> StoreError:
        mapped = translate(exc) if translate else None
        return mapped if mapped is not None else BackendError(describe(exc))
