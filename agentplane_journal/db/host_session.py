"""A unit of work inside the host's transaction (``session=``): in a SAVEPOINT, committing
nothing, with the journal's schema only while the store's statements run; the host session
checked to be on the store's database; and :class:`TransactionAnchor`, which tells whether the
transaction a unit took the run mutex in is still the session's.

:class:`HostSession` is a base of :class:`agentplane_journal.db.unit.Repository`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, UnboundExecutionError
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.db import selfwait
from agentplane_journal.db.dialect import WRITE_TRANSACTION, Dialect, dialect_for
from agentplane_journal.db.shared import SharedState
from agentplane_journal.db.unit_signals import Rollback
from agentplane_journal.errors import StoreError

__all__ = ["HostSession", "TransactionAnchor"]

T = TypeVar("T")


class HostSession:
    """Units of work in the host's session (a base of ``Repository``)."""

    _shared: SharedState

    if TYPE_CHECKING:  # supplied by Repository and ReplicaReads

        @property
        def dialect(self) -> Dialect: ...

        async def _ready(self) -> None: ...

        def _wrote(self, *, host: bool = False) -> None: ...

        async def _fail(
            self,
            exc: BaseException,
            undo: Any,
            translate: Callable[[DBAPIError], StoreError | None] | None,
            *,
            committing: bool = False,
        ) -> NoReturn: ...

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
