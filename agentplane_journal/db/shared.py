"""The state every tenant handle of one store shares: the engine, the schema check, the
replica and read-your-writes counters, the hot path and the write turn.

One :class:`SharedState` per store, made by :class:`agentplane_journal.db.unit.Repository`'s
first handle and handed to every handle for another tenant, so that they share one engine,
one schema check and one writer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from agentplane_journal.db.dialect import Dialect, dialect_for
from agentplane_journal.db.hotpath import HotPath
from agentplane_journal.db.turns import WriteTurn

__all__ = ["SharedState", "check_read_engine"]


@dataclass
class SharedState:
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


def check_read_engine(engine: object, dialect: Dialect) -> AsyncEngine:
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
