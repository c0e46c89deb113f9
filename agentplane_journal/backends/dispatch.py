"""The append hot path: one round trip on PostgreSQL, one thread hop on SQLite.

Part of the repository (it speaks SQL, through the engine's own pooled connections and their
drivers, below SQLAlchemy's statement handling). :meth:`SqlJournalStore.append` comes here
when it is not in a host's transaction; every other write, and any append this path cannot
settle, goes through the general unit of work (``store.py``), which is the reference for
what an append means. Nothing here weakens a guarantee:

* **PostgreSQL: the whole append is one autocommitted statement.** The lease holder is the
  run's only writer and knows the head it wrote last (:class:`HeadCache`, filled only
  after a commit). One statement takes the run mutex and the lease row's lock, checks the
  fence, the seal and that the head is still the one it knows (the mutex row's version
  proves the statement's snapshot current), and only then inserts the pre-chained records
  (:mod:`agentplane_journal.backends.postgresql.sql` says how). When it cannot tell, nothing is
  written and
  the append runs as a general unit of work. The store's
  :class:`~agentplane_journal.backends.postgresql.writer.Writer` runs the statements on a
  connection it keeps
  while appends keep arriving and, with group commit, lets concurrent appends to other runs
  share one statement. A connection lost during the statement is
  :class:`CommitUnknownError`, since an autocommitted statement may have committed.
* **SQLite: one thread hop per append.** aiosqlite runs each call on its connection's
  thread and wakes the event loop for each result; the general path makes one such hop per
  statement. Here the whole transaction (``BEGIN IMMEDIATE``, fence, seal, activity and
  head in one statement, records, ``COMMIT``) is one function run on that thread, with
  ``synchronous`` as the connection has it (the store sets ``FULL``). ``BEGIN IMMEDIATE``
  holds the database's write lock throughout, so every read in it is current. The head is
  the known one (:class:`HeadCache`) when its row's ``seq`` and ``hash`` columns say so,
  else re-hashed from its row (:mod:`agentplane_journal.backends.sqlite.writer`).
"""

from __future__ import annotations

from typing import Any

from agentplane_journal.backends.head_cache import HeadCache
from agentplane_journal.backends.postgresql import writer as postgresql
from agentplane_journal.backends.sqlite import writer as sqlite
from agentplane_journal.backends.writer import HotPath
from agentplane_journal.db.dialect import Dialect, PostgresDialect, SqliteDialect

__all__ = ["hot_path"]

#: Each dialect's hot path, by the dialect object's class (never by a dialect's name).
_PATHS: dict[type[Any], Any] = {
    PostgresDialect: postgresql.open_path,
    SqliteDialect: sqlite.open_path,
}


def hot_path(
    dialect: Dialect, *, bind: Any, engine: Any, heads: HeadCache, group_commit: bool
) -> HotPath:
    """The store's hot path for ``dialect``: ``bind`` carries the schema translation,
    ``engine`` is the bare engine, ``heads`` the store's shared :class:`HeadCache`."""
    factory = _PATHS[type(dialect)]
    path: HotPath = factory(bind=bind, engine=engine, heads=heads, group_commit=group_commit)
    return path
