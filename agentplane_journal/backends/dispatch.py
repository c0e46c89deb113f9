"""The append hot path, chosen per database by the dialect object.

:meth:`SqlJournalStore.append <agentplane_journal.journal.store.SqlJournalStore.append>`
comes here when it is not in a host's transaction; every other write, and any append a hot
path cannot settle, goes through the general unit of work (``journal/store.py``), which is
the reference for what an append means. So does every batch that concludes a run or claims
an admission key (``journal/admissions.py``): each happens once per run, so the hot paths
would gain nothing by carrying the outcome or admission table, and each index keeps one
writer. Nothing here weakens a guarantee:

* **PostgreSQL: the whole append is one autocommitted statement**
  (:mod:`agentplane_journal.backends.postgresql.writer`, its SQL in
  :mod:`~agentplane_journal.backends.postgresql.sql`). The lease holder knows the head it
  wrote last (:class:`~agentplane_journal.backends.head_cache.HeadCache`, filled only after
  a commit). One statement takes the run mutex (skipping a run whose mutex another
  transaction holds) and the lease row, checks the fence, the seal and that the head is
  still the one it knows, and only then inserts the pre-chained records; when it cannot
  tell, nothing is written and the append runs as a general unit of work. A connection
  lost during the statement is :class:`CommitUnknownError`.
* **SQLite: one thread hop per append** (:mod:`agentplane_journal.backends.sqlite.writer`):
  the whole transaction (``BEGIN IMMEDIATE``, fence, seal, activity and head in one
  statement, records, ``COMMIT``) is one function run on aiosqlite's thread, which holds
  the database's write lock throughout, so every read in it is current.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from agentplane_journal.backends.head_cache import HeadCache
from agentplane_journal.backends.postgresql import writer as postgresql
from agentplane_journal.backends.sqlite import writer as sqlite
from agentplane_journal.db.dialect import Dialect, PostgresDialect, SqliteDialect
from agentplane_journal.db.hotpath import HotPath
from agentplane_journal.db.turns import WriteTurn

__all__ = ["hot_path"]


class _Opens(Protocol):
    """A database's ``open_path``: its hot path over the store's engine."""

    def __call__(
        self,
        *,
        bind: AsyncEngine,
        engine: AsyncEngine,
        heads: HeadCache,
        group_commit: bool,
        turn: WriteTurn | None,
        parks: Callable[[], bool] | None,
    ) -> HotPath: ...


#: Each dialect's hot path, by the dialect object's class (never by a dialect's name).
_PATHS: dict[type[Dialect], _Opens] = {
    PostgresDialect: postgresql.open_path,
    SqliteDialect: sqlite.open_path,
}


def hot_path(
    dialect: Dialect,
    *,
    bind: AsyncEngine,
    engine: AsyncEngine,
    heads: HeadCache,
    group_commit: bool,
    turn: WriteTurn | None = None,
    parks: Callable[[], bool] | None = None,
) -> HotPath:
    """The store's hot path for ``dialect``: ``bind`` carries the schema translation,
    ``engine`` is the bare engine, ``heads`` the store's shared :class:`HeadCache`, ``turn``
    where the process's write transactions take turns (SQLite's, ``db.turns``), ``parks``
    whether the store owns its engine (it may keep a connection checked out between
    appends: SQLite's writer)."""
    return _PATHS[type(dialect)](
        bind=bind, engine=engine, heads=heads, group_commit=group_commit, turn=turn, parks=parks
    )
