"""Transactions, statements and SQLite thread hops, counted at the client (tests and bench).

What the database was asked to do, not how long it took: ``tests/test_steps_commits.py``
asserts these counts per workflow and ``bench/steps.py`` prints them.

* **SQLite**: every statement SQLite runs, as its trace callback reports it (installed on
  each aiosqlite connection's own thread, at its first hop), so the hot path's statements,
  run inside one function on that thread, are seen as well as SQLAlchemy's; every hop to
  aiosqlite's thread (each wakes the event loop).
* **PostgreSQL**: every statement SQLAlchemy sends (its ``before_cursor_execute`` event)
  and every call made on an asyncpg connection itself (the hot path's statements, and
  ``BEGIN``/``COMMIT``, which SQLAlchemy's asyncpg adapter sends that way).

A transaction is a ``BEGIN`` .. ``COMMIT``/``ROLLBACK`` pair, or a statement run outside
one (autocommitted: the PostgreSQL hot path's single statement, a SQLite read); a commit is
a transaction that wrote (ended by ``COMMIT`` after a write, or an autocommitted write). A
new SQLite connection's ``PRAGMA`` set-up is not counted.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import aiosqlite
import asyncpg
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["Counts", "counting"]

_CONTROL = {"BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE"}
_READS = {"SELECT", "SHOW"}


@dataclass
class Counts:
    """What was counted while :func:`counting` was open."""

    transactions: int = 0
    commits: int = 0
    statements: int = 0
    hops: int = 0
    #: Every statement sent, ``BEGIN`` and ``COMMIT`` included: on PostgreSQL, the round trips.
    sent: int = 0
    _open: dict[int, bool] = field(default_factory=dict)  # connection -> wrote in its tx
    _begun: set[int] = field(default_factory=set)  # a BEGIN that comes after its statement
    #: The transactions that wrote nothing, by their first statement (to say what they were).
    reads: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _first: dict[int, str] = field(default_factory=dict)

    def seen(self, conn: int, sql: str, *, begins: bool = False) -> None:
        """``sql`` sent on connection ``conn``; ``begins``: SQLAlchemy's asyncpg adapter
        sends the ``BEGIN`` of a transaction after the event for its first statement."""
        words = sql.lstrip().split(None, 2)
        if not words or sql.lstrip().startswith("--"):
            return  # a trigger's statement (SQLite traces them with a comment)
        verb = words[0].upper().rstrip(";")
        with self._lock:
            self.sent += 1
            if verb == "BEGIN":
                if conn in self._begun:
                    self._begun.discard(conn)
                else:
                    self._open[conn] = False
                    self._first.pop(conn, None)
                return
            if begins and conn not in self._open:
                self._open[conn] = False
                self._begun.add(conn)
            if verb in ("COMMIT", "END") or (
                verb == "ROLLBACK" and (len(words) < 2 or words[1].upper() != "TO")
            ):
                wrote = self._open.pop(conn, False)
                self.transactions += 1
                self.commits += int(wrote and verb != "ROLLBACK")
                if not wrote:
                    self.reads.append(self._first.pop(conn, "") + f" .. {verb}")
                return
            if verb in _CONTROL or verb == "PRAGMA":  # a new connection's set-up: no work
                return
            self.statements += 1
            write = verb not in _READS and not (verb == "WITH" and "INSERT" not in sql.upper())
            if conn in self._open:
                self._open[conn] = self._open[conn] or write
                self._first.setdefault(conn, " ".join(sql.split())[:80])
            else:
                self.transactions += 1
                self.commits += int(write)
                if not write:
                    self.reads.append(" ".join(sql.split())[:80])

    def per(self, n: int) -> dict[str, float]:
        return {
            "transactions": self.transactions / n,
            "commits": self.commits / n,
            "statements": self.statements / n,
            "hops": self.hops / n,
        }


@contextmanager
def counting(engine: AsyncEngine) -> Iterator[Counts]:
    """Count what ``engine``'s connections (and the store's hot path on them) do inside."""
    counts = Counts()
    postgres = engine.dialect.name == "postgresql"
    traced: set[int] = set()
    original_hop = aiosqlite.Connection._execute
    originals = {
        name: getattr(asyncpg.Connection, name)
        for name in ("execute", "executemany", "fetch", "fetchrow", "fetchval")
    }

    async def hop(self: Any, fn: Any, *args: Any, **kw: Any) -> Any:
        counts.hops += 1
        key = id(self)
        if key not in traced and self._conn is not None:
            traced.add(key)
            raw = self._conn

            def with_trace(*a: Any, **k: Any) -> Any:
                raw.set_trace_callback(lambda sql: counts.seen(key, sql))
                return fn(*a, **k)

            return await original_hop(self, with_trace, *args, **kw)
        return await original_hop(self, fn, *args, **kw)

    def wrap(name: str) -> Any:
        original = originals[name]

        async def wrapper(self: Any, query: str, *args: Any, **kw: Any) -> Any:
            counts.seen(id(self), query)
            return await original(self, query, *args, **kw)

        return wrapper

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        adapted = conn.connection.dbapi_connection
        # Its BEGIN is sent after this event, when no transaction is open yet.
        begins = not adapted.autocommit and adapted._transaction is None
        counts.seen(id(conn.connection.driver_connection), statement, begins=begins)

    if postgres:
        for name in originals:
            setattr(asyncpg.Connection, name, wrap(name))
        event.listen(engine.sync_engine, "before_cursor_execute", on_execute)
    else:
        aiosqlite.Connection._execute = hop  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        if postgres:
            event.remove(engine.sync_engine, "before_cursor_execute", on_execute)
            for name, original in originals.items():
                setattr(asyncpg.Connection, name, original)
        else:
            aiosqlite.Connection._execute = original_hop  # type: ignore[method-assign]
