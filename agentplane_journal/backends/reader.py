"""The store's lean reads: one statement each, one round trip on PostgreSQL, one thread hop
on SQLite, and no ORM.

Part of the repository (the statements live here, with the hot append path's). The general
unit of work (``db/unit.py``) costs a read an ORM session, ``BEGIN``, ``COMMIT``, a statement
rebuilt and looked up in SQLAlchemy's cache, and on SQLite about a dozen hops to aiosqlite's
thread, for a read whose rows take a few microseconds to fetch. Here a read is one statement
whose text is built once (per schema), sent on a pooled connection's driver:

Reads queue, and leaders drain them on pooled connections they keep while reads keep
arriving (the append writer's skeleton,
:class:`~agentplane_journal.backends.writer.GroupWriter`: no checkout per read, the
connection back in the pool once one event-loop turn brings nothing new):

* **PostgreSQL**: up to four leaders, each read asyncpg's ``fetch`` in autocommit, one round
  trip (a statement is its own snapshot). Behind a transaction pooler (no statement cache) it
  runs in a transaction, as the append path does, so asyncpg's prepare and execute reach one
  server connection.
* **SQLite**: one leader; every read waiting when it turns is run in the same hop to
  aiosqlite's thread, each its own statement outside any transaction (WAL: each statement
  sees the last commit).

The rows come back as the driver gives them (tuples, asyncpg's records), in
:data:`~agentplane_journal.db.statements.RECORD_COLUMNS` order, for the caller to check
(``records_from_rows``): nothing here vouches for a row. A read that needs the seal and the
records together (:data:`SEALED`) gets both from one statement, so one snapshot.

A driver error is :class:`BackendError` naming it; the caller's read was not answered, and
nothing was written. Reads of a store with a replica, a host's session, a per-table schema
map or an in-memory SQLite database take the general unit of work instead (:func:`open_reader`
answers ``None``), whose routing they need.
"""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from agentplane_journal.backends.head_cache import HeadCache
from agentplane_journal.backends.postgresql.writer import schema_of
from agentplane_journal.backends.writer import GroupWriter
from agentplane_journal.db.dialect import Dialect, SqliteDialect
from agentplane_journal.db.statements import RECORD_COLUMNS
from agentplane_journal.db.unit import describe
from agentplane_journal.errors import BackendError, PoolerError

__all__ = [
    "AT",
    "BACK",
    "FROM",
    "HEAD",
    "PAGE",
    "SEAL",
    "SEALED",
    "SEQS",
    "Reader",
    "open_reader",
]

_COLUMNS = ", ".join(c.name for c in RECORD_COLUMNS)
_J_COLUMNS = ", ".join("j." + c.name for c in RECORD_COLUMNS)

#: A run's records from ``$3`` on, by seq.
FROM = (
    f"SELECT {_COLUMNS} FROM {{s}}journal WHERE tenant = $1 AND run_id = $2 AND seq >= $3"
    " ORDER BY seq"
)
#: A run's last record (its head), re-hashed by the caller like any other.
HEAD = (
    f"SELECT {_COLUMNS} FROM {{s}}journal WHERE tenant = $1 AND run_id = $2"
    " ORDER BY seq DESC LIMIT 1"
)
#: One record by seq.
AT = f"SELECT {_COLUMNS} FROM {{s}}journal WHERE tenant = $1 AND run_id = $2 AND seq = $3"
#: The records at the seqs listed in ``$3``, by seq: ``{seqs}`` is the dialect's subquery over
#: that one text parameter (``Dialect.seqs_from_param``, ``Dialect.seq_list``).
SEQS = (
    f"SELECT {_COLUMNS} FROM {{s}}journal WHERE tenant = $1 AND run_id = $2"
    " AND seq IN ({seqs}) ORDER BY seq"
)
#: The run's sealed head alone.
SEAL = "SELECT chain_head FROM {s}run_seal WHERE tenant = $1 AND run_id = $2"
#: The run's seal (``chain_head``, the last column of every row) and its records from ``$3``
#: on, in one statement: at least one row (all record columns NULL when there is none).
SEALED = (
    f"SELECT {_J_COLUMNS}, s.chain_head FROM (SELECT 1 AS one) o"
    " LEFT JOIN {s}run_seal s ON s.tenant = $1 AND s.run_id = $2"
    " LEFT JOIN {s}journal j ON j.tenant = $1 AND j.run_id = $2 AND j.seq >= $3"
    " ORDER BY j.seq"
)


#: The run's seal (the last column) and its last ``$4`` records below seq ``$3``, newest
#: first, in one statement (one snapshot): a reader that wants a run's end, not the run,
#: reads back from the head a page at a time (LangGraph's ``list`` with ``limit``). At least
#: one row (all record columns NULL when there is none).
BACK = (
    f"SELECT {_J_COLUMNS}, s.chain_head FROM (SELECT 1 AS one) o"
    " LEFT JOIN {s}run_seal s ON s.tenant = $1 AND s.run_id = $2"
    f" LEFT JOIN (SELECT {_COLUMNS} FROM {{s}}journal WHERE tenant = $1 AND run_id = $2"
    " AND seq < $3 ORDER BY seq DESC LIMIT $4) j ON 1 = 1"
    " ORDER BY j.seq DESC"
)


_SIZES = (
    "SELECT coalesce(length(raw), 0) AS n{seq} FROM {{s}}journal"
    " WHERE tenant = $1 AND run_id = $2 AND seq >= $3 ORDER BY seq LIMIT $5"
)
#: A page of a run's records from ``$3``: at most ``$5`` records, and only those stored before
#: ``$4`` bytes of ``raw`` were reached (so always the first): the text of
#: :func:`~agentplane_journal.db.statements.page_statement` (which says why it reads the
#: lengths first), for the lean reads.
PAGE = (
    f"SELECT {_COLUMNS} FROM {{s}}journal WHERE tenant = $1 AND run_id = $2 AND seq >= $3"
    " ORDER BY seq LIMIT (SELECT CASE WHEN coalesce(sum(t.n), 0) < $4 THEN $5 ELSE"
    " (SELECT count(*) FROM (SELECT sum(w.n) OVER (ORDER BY w.seq) - w.n AS before FROM ("
    + _SIZES.format(seq=", seq")
    + ") w) b WHERE b.before < $4) END FROM ("
    + _SIZES.format(seq="")
    + ") t)"
)


@lru_cache(maxsize=64)
def _text(statement: str, schema: str | None, sqlite: bool) -> str:
    """``statement`` for one database: its tables in ``schema``, its parameters numbered
    as the driver takes them (``$n`` for asyncpg, ``?n`` for sqlite3)."""
    prefix = "" if schema is None else '"' + schema.replace('"', '""') + '".'
    text = statement.replace("{s}", prefix)
    return text.replace("$", "?") if sqlite else text


@dataclass(slots=True)
class _Read:
    """One read waiting for the SQLite leader's next hop."""

    sql: str
    args: tuple[Any, ...]
    future: asyncio.Future[list[Any]] = field(repr=False)
    #: ``(column, budget)``: only the rows before whose ``column`` bytes reach ``budget``
    #: (:meth:`Reader.rows_within`); ``None``: every row.
    within: tuple[int, int] | None = None


def _hop(conn: sqlite3.Connection, group: list[_Read]) -> list[Any]:
    """Every read of ``group``, on aiosqlite's thread: its rows, or the error it met."""
    out: list[Any] = []
    for read in group:
        try:
            cursor = conn.execute(read.sql, read.args)
            out.append(cursor.fetchall() if read.within is None else _within(cursor, *read.within))
        except sqlite3.Error as exc:
            out.append(exc)
    if conn.in_transaction:  # a SELECT begins none; never leave one open on a kept connection
        conn.rollback()
    return out


def _within(cursor: sqlite3.Cursor, column: int, budget: int) -> list[Any]:
    """``cursor``'s rows while the bytes of ``column`` in the rows before reach no ``budget``
    (so always the first; ``NULL`` and any other value count 0, text its length), stepped
    one at a time: the rows past the cut are never read."""
    out: list[Any] = []
    before = 0
    for row in cursor:
        if before >= budget:
            break
        out.append(row)
        value = row[column]
        if type(value) is bytes or type(value) is str:
            before += len(value)
    cursor.close()
    return out


class Reader:
    """One store's lean reads (see the module); shared by its tenant handles."""

    def __init__(
        self, bind: AsyncEngine, *, sqlite: bool, schema: str | None, dialect: Dialect
    ) -> None:
        self._bind = bind
        self._dialect = dialect
        self._sqlite = sqlite
        self._schema = schema
        self._queue: GroupWriter[_Read, list[Any]] = (
            _SqliteReads(bind) if sqlite else _PostgresReads(bind, dialect)
        )
        self.dialect = "sqlite" if sqlite else "postgresql"
        #: Whether :meth:`rows_within` serves (SQLite's: its rows are stepped on its thread).
        self.cuts_pages = sqlite

    async def rows(self, statement: str, *args: Any) -> list[Any]:
        """``statement``'s rows (one of this module's), with ``args`` for ``$1``, ``$2``..."""
        sql = _text(statement, self._schema, self._sqlite)
        loop = asyncio.get_running_loop()
        return await self._queue.submit(_Read(sql, args, loop.create_future()))

    async def rows_within(
        self, sql: str, args: tuple[Any, ...], column: int, budget: int
    ) -> list[Any]:
        """SQLite only: ``sql``'s rows (the driver's own text and positional ``args``) up to
        the first whose ``column`` bytes before it reach ``budget`` (always the first), cut
        as they are stepped on SQLite's thread, in the one hop: a page bounded by bytes
        without a ``LIMIT`` the database computes first by reading the page's rows twice
        (``export --all``'s pages, :mod:`agentplane_journal.journal.export_pages`)."""
        if not self._sqlite:
            raise ValueError("rows_within is SQLite's (PostgreSQL's pages cut in SQL)")
        loop = asyncio.get_running_loop()
        read = _Read(sql, args, loop.create_future(), (column, budget))
        return await self._queue.submit(read)

    async def idle(self) -> None:
        """Wait until every queued read is answered and the connection is back."""
        await self._queue.idle()


def _failed(exc: BaseException) -> BackendError:
    return BackendError(f"cannot read from the database, nothing was answered: {describe(exc)}")


class _SqliteReads(GroupWriter[_Read, list[Any]]):
    """The SQLite read queue: one leader, one hop per group of reads."""

    def __init__(self, bind: AsyncEngine) -> None:
        super().__init__(bind, HeadCache(), group_commit=True, connections=1)

    def _take(self) -> list[_Read]:
        group = [r for r in self._pending if not r.future.done()]
        self._pending.clear()
        return group

    async def _execute(
        self, driver: Any, group: list[_Read]
    ) -> tuple[list[list[Any] | BaseException], bool]:
        # aiosqlite's queue onto its thread (``_execute``) and its sqlite3 connection
        # (``_conn``) are private, present since 0.17 (the append writer uses them too).
        try:
            answers: list[list[Any] | BaseException] = await driver._execute(
                _hop, driver._conn, group
            )
        except Exception as exc:  # not SQLite's answer: "Connection closed", ...
            return [_failed(exc)] * len(group), False
        return answers, True

    def _interrupted(self, group: list[_Read], exc: BaseException) -> None:
        for read in group:
            if not read.future.done():
                read.future.cancel()

    async def _abandon(self, conn: AsyncConnection) -> None:
        return None  # a read leaves nothing behind (``_hop`` ends any transaction)

    def _heard(
        self, request: _Read, answer: list[Any] | BaseException
    ) -> list[Any] | BaseException:
        if isinstance(answer, BaseException) and not isinstance(answer, BackendError):
            return _failed(answer)
        return answer


class _PostgresReads(GroupWriter[_Read, list[Any]]):
    """The PostgreSQL read queue: up to :data:`_PG_CONNECTIONS` leaders, each on a pooled
    connection it keeps while reads keep arriving (no checkout per read), one read per
    round trip (asyncpg's ``fetch``). A connection a read failed on is invalidated, never
    pooled again: the pool cannot tell a dropped connection from a live one when the error
    did not pass through SQLAlchemy."""

    def __init__(self, bind: AsyncEngine, dialect: Dialect) -> None:
        super().__init__(bind, HeadCache(), group_commit=False, connections=_PG_CONNECTIONS)
        self._dialect = dialect

    def _take(self) -> list[_Read]:
        while self._pending:
            read = self._pending.pop(0)
            if not read.future.done():
                return [read]
        return []

    async def _execute(
        self, driver: Any, group: list[_Read]
    ) -> tuple[list[list[Any] | BaseException], bool]:
        [read] = group
        try:
            if getattr(driver, "_stmt_cache_enabled", True):
                return [list(await driver.fetch(read.sql, *read.args))], True
            async with driver.transaction(readonly=True):  # behind a transaction pooler
                return [list(await driver.fetch(read.sql, *read.args))], True
        except Exception as exc:  # the driver's, a lost connection's
            if self._dialect.pooler_misrouted(exc):  # a refusal: the statement never ran
                error: BaseException = PoolerError(describe(exc))
            else:
                error = _failed(exc)
            error.__cause__ = exc
            return [error], False

    def _interrupted(self, group: list[_Read], exc: BaseException) -> None:
        for read in group:
            if not read.future.done():
                read.future.cancel()

    async def _abandon(self, conn: AsyncConnection) -> None:
        await conn.invalidate()

    def _heard(
        self, request: _Read, answer: list[Any] | BaseException
    ) -> list[Any] | BaseException:
        return answer


#: Reads in flight at once on PostgreSQL (each on a connection of the engine's pool).
_PG_CONNECTIONS = 4


def open_reader(dialect: Dialect, bind: AsyncEngine) -> Reader | None:
    """The lean reads for ``bind`` (the store's engine, with its schema), or ``None`` where
    they do not apply: an in-memory SQLite database (its one connection is shared with the
    sessions' transactions), a per-table schema map."""
    if isinstance(dialect, SqliteDialect):
        if dialect.database_file(bind.url) is None:
            return None
        return Reader(bind, sqlite=True, schema=None, dialect=dialect)
    usable, schema = schema_of(bind)
    return Reader(bind, sqlite=False, schema=schema, dialect=dialect) if usable else None
