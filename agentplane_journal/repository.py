"""What both stores share: the engine, the schema check, units of work, and error translation.

One choke point (:meth:`Repository._unit`) opens the session, commits, rolls back and turns
driver errors into the contract's errors, keeping the driver's exception as ``__cause__``.
A connection lost during COMMIT is :class:`CommitUnknownError` (it may have landed); any
other driver error is :class:`BackendError` unless the caller names a constraint it expects.

The argument checks live here too: bad input is refused with ``ValueError``/``TypeError``
before a connection is taken.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Self, TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from .dialect import READ_ONLY, Dialect, dialect_for
from .engine import create_engine
from .errors import BackendError, CommitUnknownError, SchemaOutOfDateError, StoreError
from .ids import DEFAULT_TENANT, RunId, validate_tenant
from .migrate import HEAD_REVISION, check_revision

__all__ = ["Repository", "check_int", "check_run", "check_text", "check_ttl"]

log = logging.getLogger("agentplane_journal.repository")

T = TypeVar("T")

MAX_I64 = 2**63 - 1


# -- argument checks (bad input never reaches the database) ----------------------------


def check_int(value: object, name: str, *, minimum: int = 0, maximum: int = MAX_I64) -> int:
    """An integer in ``[minimum, maximum]`` (bools refused), or a clear error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise ValueError(f"{name} must be between {minimum} and {maximum}, got {value}")
    return value


def check_text(
    value: object, name: str, *, allow_empty: bool = False, max_len: int | None = None
) -> str:
    """A string without NUL (empty only if allowed), or a clear error naming ``name``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, not {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise ValueError(f"{name} must not be empty")
    if "\x00" in value:
        raise ValueError(f"{name} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} is not valid Unicode (it contains a lone surrogate)") from None
    if max_len is not None and len(value) > max_len:
        raise ValueError(f"{name} is {len(value)} characters long; the limit is {max_len}")
    return value


def check_run(value: object, name: str = "run") -> RunId:
    """A :class:`RunId` from a ``RunId`` or its text form."""
    if isinstance(value, RunId):
        return value
    if isinstance(value, str):
        return RunId.parse(value)
    raise TypeError(f"{name} must be a RunId or its text form, not {type(value).__name__}")


def check_ttl(value: object) -> int:
    """A lease TTL in whole seconds, at least 1 (an int, an integral float or a timedelta)."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return check_int(value, "ttl (whole seconds)", minimum=1)


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
    schema_checked: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class _Rollback(Exception):
    """Internal: end a unit of work without committing, returning ``value``."""

    def __init__(self, value: object) -> None:
        self.value = value


class _Passthrough(Exception):
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
        clock: Callable[[], float] | None = None,
        read_engine: AsyncEngine | None = None,
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
            dialect.configure(engine)
            _shared = _Shared(
                engine=engine,
                dialect=dialect,
                sessions=async_sessionmaker(engine, expire_on_commit=False, autoflush=True),
                owns_engine=False,
            )
            if read_engine is not None:
                _shared.read_engine = _check_read_engine(read_engine, dialect)
                dialect.configure(read_engine)
                _shared.read_sessions = async_sessionmaker(read_engine, expire_on_commit=False)
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
        **kw: Any,
    ) -> Self:
        engine = _create_engine(url, engine_options)
        read_engine = None
        try:
            if read_url is not None:
                read_engine = kw["read_engine"] = _create_engine(read_url, engine_options)
            store = cls(engine, **kw)
            store._shared.owns_engine = True
            store._shared.owns_read_engine = read_engine is not None
            await store._ready()
        except BaseException:
            await engine.dispose()
            if read_engine is not None:
                await read_engine.dispose()
            raise
        return store

    async def close(self) -> None:
        """Dispose of the engines this store opened (a caller's engines stay open)."""
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
    def _dialect(self) -> Dialect:
        return self._shared.dialect

    def _now(self) -> int:
        return math.floor(self._clock())

    async def _ready(self) -> None:
        """Check the schema revision once, before the first statement."""
        shared = self._shared
        if shared.schema_checked:
            return
        async with shared.lock:
            if shared.schema_checked:
                return
            database = shared.engine.url.database
            if shared.dialect.name == "sqlite" and database and database != ":memory:":
                # one stat, once per store: not worth a thread hop
                if not database.startswith("file:") and not os.path.exists(database):  # noqa: ASYNC240
                    # Connecting would create an empty file: refuse without touching disk.
                    raise SchemaOutOfDateError(None, HEAD_REVISION)
            try:
                async with shared.engine.connect() as conn:
                    conn = await conn.execution_options(**{READ_ONLY: True})
                    await check_revision(conn)
            except DBAPIError as exc:
                raise BackendError(f"cannot read the schema revision: {describe(exc)}") from exc
            except OSError as exc:
                raise BackendError(f"cannot connect to the database: {exc}") from exc
            shared.schema_checked = True

    async def _unit(
        self,
        fn: Callable[[AsyncSession], Awaitable[T]],
        *,
        read_only: bool = False,
        primary: bool = False,
        translate: Callable[[DBAPIError], StoreError | None] | None = None,
    ) -> T:
        """Run ``fn`` in one transaction and commit it, translating driver errors once, here.

        ``fn`` may raise ``_Rollback(value)`` to end without committing and return ``value``.
        A read-only unit goes to the read engine (a replica, possibly behind) when there is
        one, unless ``primary``: a read whose answer a writer acts on must see the latest
        commit. (The fence, the head and the log counter of a write are read inside the write
        transaction itself, which is never read-only.)
        """
        await self._ready()
        shared = self._shared
        replica = read_only and not primary and shared.read_sessions is not None
        session = (shared.read_sessions if replica else shared.sessions)()  # type: ignore[misc]
        stage = "statement"
        try:
            if read_only:
                await session.connection(execution_options={READ_ONLY: True})
            try:
                result = await fn(session)
            except _Rollback as rollback:
                await session.rollback()
                return rollback.value  # type: ignore[return-value]
            await session.flush()  # a failing flush is a statement error, not an unknown commit
            stage = "commit"
            try:
                await session.commit()
            except DBAPIError:
                raise
            except Exception as exc:
                # Not a server's answer (asyncpg's command_timeout is a TimeoutError, a
                # dropped socket an OSError, ...): COMMIT may have been applied.
                await _quiet_rollback(session)
                raise CommitUnknownError(f"{type(exc).__name__}: {exc}") from exc
            return result
        except _Passthrough as passthrough:
            await _quiet_rollback(session)
            raise passthrough.error from None
        except DBAPIError as exc:
            await _quiet_rollback(session)
            if stage == "commit" and self._shared.dialect.connection_lost(exc):
                raise CommitUnknownError(describe(exc)) from exc
            mapped = translate(exc) if translate else None
            if mapped is not None:
                raise mapped from exc
            raise BackendError(describe(exc)) from exc
        except OSError as exc:
            await _quiet_rollback(session)
            raise BackendError(f"cannot reach the database: {exc}") from exc
        except BaseException:
            await _quiet_rollback(session)
            raise
        finally:
            await session.close()


def describe(exc: DBAPIError) -> str:
    """One line naming the driver error and its SQLSTATE, for error messages."""
    driver = getattr(exc, "orig", None) or exc
    code = getattr(getattr(exc, "driver_exception", None), "sqlstate", None)
    text = str(driver).strip().splitlines()[0] if str(driver).strip() else type(driver).__name__
    return f"{type(driver).__name__}{f' [{code}]' if code else ''}: {text}"


async def _quiet_rollback(session: AsyncSession) -> None:
    try:
        await session.rollback()
    except Exception:  # the connection may already be gone; the pool discards it
        log.debug("rollback after a failed unit of work failed", exc_info=True)


def _check_read_engine(engine: object, dialect: Dialect) -> AsyncEngine:
    if not isinstance(engine, AsyncEngine):
        raise TypeError(
            f"read_engine must be an sqlalchemy AsyncEngine, not {type(engine).__name__}"
        )
    if dialect_for(engine) is not dialect:
        raise ValueError(
            f"read_engine is {engine.dialect.name} but the engine is {dialect.name}: a read "
            "engine is a replica of the same database"
        )
    return engine


def _create_engine(url: str, options: dict[str, Any] | None) -> AsyncEngine:
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(
            "url must be a database URL such as postgresql+asyncpg://user@host/db or "
            "sqlite+aiosqlite:///path/to/journal.db"
        )
    # Bound parameters stay out of error messages and logs: they can hold push secrets.
    opts: dict[str, Any] = {"hide_parameters": True}
    if url.startswith("postgresql"):
        # Enough connections for a runtime's concurrent appends without queueing on the pool.
        opts.update(pool_size=10, max_overflow=40)
    opts.update(options or {})
    try:
        return create_engine(url, **opts)
    except Exception as exc:  # an unknown driver or a malformed URL
        raise ValueError(f"cannot open a {url.split('://')[0]}:// database: {exc}") from exc
