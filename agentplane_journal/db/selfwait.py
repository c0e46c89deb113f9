"""A task that would wait on its own transaction is told so at once, instead of hanging.

A host that forgets ``session=`` makes the store open a second connection while its own
transaction, in the same asyncio task, is still open. The task then waits on itself:

* SQLite: the host's transaction holds the database's write lock (it began IMMEDIATE, or it
  has written a row), so the store's ``BEGIN IMMEDIATE`` waits ``busy_timeout`` (30 s) and
  fails with "database is locked"; the lock is only released when this same task goes on.
* PostgreSQL: the host's transaction holds the run mutex (it appended to that run with
  ``session=``), so the store's unit waits for a row lock this task will never release.

Here each open transaction is remembered per task (SQLite: from the engine's ``begin``
listener; both: the runs whose mutex a transaction took), and a store call without
``session=`` that would wait on one of them is refused before any statement. A store write
without ``session=`` that waits on nothing of its own (PostgreSQL, another run) is legal: it
commits in its own transaction, whatever the host's transaction does later.

Bookkeeping only: weak references, so a forgotten transaction or a finished task costs
nothing, and an entry counts only while its connection still has the same transaction open.
Which engines reach the same database is the dialect's to say: the caller of
:func:`refuse_own_wait` passes :func:`agentplane_journal.db.dialect.database_key` (the
dialect module calls :func:`opened`, so this one cannot import it).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Connection, Engine

__all__ = ["held_runs", "hold", "hold_all", "opened", "refuse_own_wait", "restore"]

# In a pooled connection's ``info``: the token of the transaction open on it (SQLite, set by
# the begin listener and cleared by the commit/rollback listeners).
TOKEN = "agentplane_journal_transaction"


@dataclass(eq=False)
class _Open:
    """One transaction a task has open on one connection."""

    connection: weakref.ref[Connection]
    token: object  # the info token (SQLite) or the root Transaction object
    by_info: bool
    writing: Callable[[], bool]  # whether it holds a database-wide write lock (SQLite)
    runs: set[tuple[str, str]] = field(default_factory=set)

    def alive(self) -> bool:
        conn = self.connection()
        if conn is None or conn.closed or conn.invalidated:
            return False
        transaction = conn.get_transaction()
        if transaction is None or not transaction.is_active:
            return False
        if self.by_info:
            return conn.info.get(TOKEN) is self.token
        return transaction is self.token


_OPEN: weakref.WeakKeyDictionary[asyncio.Task[Any], list[_Open]] = weakref.WeakKeyDictionary()


def _task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop: a sync caller, nothing to wait on
        return None


def _entries(task: asyncio.Task[Any]) -> list[_Open]:
    entries = _OPEN.get(task)
    if entries is None:
        entries = _OPEN[task] = []
    else:
        entries[:] = [entry for entry in entries if entry.alive()]
    return entries


def opened(connection: Connection, writing: Callable[[], bool]) -> None:
    """The begin listener's note: ``connection`` began a transaction in the current task."""
    task = _task()
    if task is None:
        return
    token = object()
    connection.info[TOKEN] = token
    _entries(task).append(_Open(weakref.ref(connection), token, True, writing))


def _entry(connection: Connection, create: bool) -> _Open | None:
    task = _task()
    transaction = connection.get_transaction()
    if task is None or transaction is None:
        return None
    entries = _entries(task)
    for entry in entries:
        if entry.connection() is connection:
            return entry
    if not create:
        return None
    entry = _Open(weakref.ref(connection), transaction, False, lambda: False)
    entries.append(entry)
    return entry


def hold(connection: Connection, tenant: str, run: str) -> None:
    """The transaction open on ``connection`` (this task's) holds ``run``'s mutex."""
    entry = _entry(connection, create=True)
    if entry is not None:
        entry.runs.add((tenant, run))


def hold_all(connection: Connection, tenant: str, runs: Iterable[str]) -> None:
    """:func:`hold` for many runs at once (a restore's chunk): one lookup of the entry."""
    entry = _entry(connection, create=True)
    if entry is not None:
        entry.runs.update((tenant, run) for run in runs)


def held_runs(connection: Connection) -> frozenset[tuple[str, str]]:
    entry = _entry(connection, create=False)
    return frozenset(entry.runs) if entry is not None else frozenset()


def restore(connection: Connection, runs: frozenset[tuple[str, str]]) -> None:
    """A savepoint rolled back: the mutexes taken since are released (PostgreSQL)."""
    entry = _entry(connection, create=False)
    if entry is not None:
        entry.runs.intersection_update(runs)


def refuse_own_wait(
    engine: Engine, tenant: str, run: str | None, database_key: Callable[[Engine], Hashable]
) -> None:
    """Raise ``ValueError`` if a store call on ``engine`` outside any host session, in this
    task, would wait on a transaction this task itself holds open (on an engine whose
    ``database_key`` is ``engine``'s: the same database)."""
    task = _task()
    if task is None or task not in _OPEN:
        return
    entries = _entries(task)
    if not entries:  # every transaction it had is over (every append asks: the key waits)
        return
    database = database_key(engine)
    for entry in entries:
        connection = entry.connection()  # alive: _entries keeps only open transactions
        if connection is None or database_key(connection.engine) != database:
            continue
        if entry.writing():
            raise ValueError(
                "this task has its own write transaction open on this SQLite database (a "
                "session that wrote or began with begin_write), which holds the database's "
                "write lock: a store call without `session=` would wait for it and fail "
                "with 'database is locked'. Pass that session: `session=session`"
            )
        if run is not None and (tenant, run) in entry.runs:
            raise ValueError(
                f"this task's own open transaction holds the run mutex of {run} (it wrote to "
                "that run with `session=`): a store call on that run without `session=` "
                "would wait for it forever. Pass that session: `session=session` (or commit "
                "it first)"
            )
