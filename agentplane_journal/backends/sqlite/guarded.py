"""Guarded appends and their tail reads on SQLite: one thread hop each.

Part of the repository (:mod:`agentplane_journal.journal.guarded` says what the two
operations guarantee; this module is how SQLite runs them). aiosqlite runs each call on its
connection's thread and wakes the event loop for each result, and the general unit of work
makes several such hops per statement (16 for a guarded append's five statements, each
costing a thread wake-up that a loaded machine makes slow). Here each operation is one
function run on that thread, as the append hot path's transactions are
(:mod:`agentplane_journal.backends.sqlite.writer`):

* the tail read is one ``SELECT`` (one statement is one snapshot): the seal, the run's leaf
  in the stored tree, and the records from a seq on, decoded and re-hashed on that thread;
* the guarded append is ``BEGIN IMMEDIATE`` (the database's write lock, SQLite's run mutex,
  before anything is read), one ``SELECT`` of the lease, the seal, the activity and the head
  row, the lapsed lease's fence and the activity only when needed, the records' ``INSERT``,
  ``COMMIT``; the checks are :func:`agentplane_journal.journal.guarded.judge`'s, the same
  the general unit makes on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import greenlet_spawn

from agentplane_journal.backends.sqlite.transaction import commit_failed
from agentplane_journal.core.append import Append
from agentplane_journal.core.batch import COLUMNS, RELEASED_OWNER, chain_batch
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.profile import WireProfile
from agentplane_journal.core.record import Record
from agentplane_journal.core.signing import Signer
from agentplane_journal.db.statements import RECORD_COLUMNS, records_from_rows
from agentplane_journal.errors import BackendError, ConflictError

__all__ = ["admitted_in_one_hop", "append_in_one_hop", "checked_out", "read_in_one_hop"]

_CHAIN = ", ".join(f"j.{c.name}" for c in RECORD_COLUMNS)
_TAIL = (
    "SELECT (SELECT chain_head FROM run_seal WHERE tenant = ?1 AND run_id = ?2),"
    " (SELECT hash FROM log_tree WHERE tenant = ?1 AND run_id = ?2 AND level = 0 LIMIT 1),"
    f" {_CHAIN} FROM (SELECT 1) AS one LEFT JOIN journal AS j"
    " ON j.tenant = ?1 AND j.run_id = ?2 AND j.seq >= ?3 ORDER BY j.seq"
)
#: A conversation's cold read: the run its admission key names, that run's seal and leaf,
#: and all its records, in one statement (no row of the key: one row of NULLs).
_ADMITTED = (
    "SELECT a.run_id,"
    " (SELECT chain_head FROM run_seal WHERE tenant = ?1 AND run_id = a.run_id),"
    " (SELECT hash FROM log_tree WHERE tenant = ?1 AND run_id = a.run_id AND level = 0 LIMIT 1),"
    f" {_CHAIN} FROM (SELECT 1) AS one"
    " LEFT JOIN run_admission AS a ON a.tenant = ?1 AND a.key = ?2"
    " LEFT JOIN journal AS j ON j.tenant = ?1 AND j.run_id = a.run_id ORDER BY j.seq"
)
#: The lease (epoch, owner, expiry), the seal's outcome, whether the activity row is current,
#: then the head row's columns (NULLs for a run without records).
_STATE = (
    "SELECT (SELECT epoch FROM run_lease WHERE tenant = ?1 AND run_id = ?2),"
    " (SELECT owner FROM run_lease WHERE tenant = ?1 AND run_id = ?2),"
    " (SELECT expires_at FROM run_lease WHERE tenant = ?1 AND run_id = ?2),"
    " (SELECT outcome FROM run_seal WHERE tenant = ?1 AND run_id = ?2),"
    " (SELECT updated_at >= ?3 FROM run_activity WHERE tenant = ?1 AND run_id = ?2),"
    f" {_CHAIN} FROM (SELECT 1) AS one LEFT JOIN"
    f" (SELECT {', '.join(c.name for c in RECORD_COLUMNS)} FROM journal"
    " WHERE tenant = ?1 AND run_id = ?2 ORDER BY seq DESC LIMIT 1) AS j ON 1"
)
_MUTEX = (
    "INSERT INTO run_activity (tenant, run_id, updated_at) VALUES (?, ?, ?) "
    "ON CONFLICT (tenant, run_id) DO UPDATE SET updated_at = max(updated_at, excluded.updated_at)"
)
_FENCE = (
    f"UPDATE run_lease SET owner = '{RELEASED_OWNER}', expires_at = 0, epoch = epoch + 1"
    " WHERE tenant = ? AND run_id = ? AND epoch = ?"
)
_INSERT = f"INSERT INTO journal ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * 12)})"

#: The checks of a guarded append, given the state row's lease, seal and head columns and
#: ``now``: the epoch to write at, and whether a lapsed lease must be fenced (raises what the
#: caller hears otherwise). :func:`agentplane_journal.journal.guarded.judge`.
Judge = Callable[
    [RunId, int, tuple[Any, ...], tuple[int, Digest] | None], tuple[int, bool, int, Digest]
]


@asynccontextmanager
async def checked_out(bind: AsyncEngine) -> AsyncIterator[Any]:
    """A pooled connection's aiosqlite driver for one of this module's hops, given back to the
    pool **without the pool's reset** when the hop ended its own transaction.

    The pool resets a connection on its return with a ``rollback()``, which aiosqlite runs as
    one more hop to its thread (a wake-up of that thread and then of the event loop, as long
    as the work itself on a quiet machine): half of a warm change's hops. Every function here
    leaves the connection outside a transaction when it returns or raises one of the
    conflicts it judged (it committed, or rolled back before raising), so that reset has
    nothing to do; SQLAlchemy skips it the same way after a transaction it ended itself
    (``_close_special(transaction_reset=True)``, what ``Connection.close`` calls). Any other
    outcome (a driver error, whose rollback may have failed; a cancellation, with the hop
    maybe still running on the thread) returns the connection the ordinary way, reset, and
    so does a SQLAlchemy without that method or with another signature for it (a private
    one: the ``TypeError`` of a call that never ran).
    """
    fairy = await bind.raw_connection()
    clean = False
    try:
        yield fairy.driver_connection
        clean = True
    except ConflictError:
        clean = True  # judged on the thread, after its ROLLBACK
        raise
    finally:
        special = getattr(fairy, "_close_special", None) if clean else None
        try:
            if special is None:
                raise TypeError
            await greenlet_spawn(special, transaction_reset=True)  # no I/O: never suspends
        except TypeError:  # not clean, or a SQLAlchemy whose private method differs
            await _to_completion(greenlet_spawn(fairy.close))


async def _to_completion(coro: Coroutine[Any, Any, None]) -> None:
    """Run ``coro`` (a connection's reset and return) to its end even if the caller is
    cancelled meanwhile, then re-raise that cancellation, as SQLAlchemy's own context
    managers close a connection: abandoned halfway, it would never reach the pool."""
    task = asyncio.get_running_loop().create_task(coro)
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError as err:
            if task.done():
                raise
            cancelled = err
        else:
            break
    if cancelled is not None:
        raise cancelled


async def read_in_one_hop(driver: Any, tenant: str, run: str, from_seq: int) -> list[Any]:
    """The tail statement's rows, the records among them decoded: ``[(seal, leaf), records]``."""
    answer: list[Any] = await driver._execute(_read, driver._conn, tenant, run, from_seq)
    return answer


def _read(conn: sqlite3.Connection, tenant: str, run: str, from_seq: int) -> list[Any]:
    rows = conn.execute(_TAIL, (tenant, run, from_seq)).fetchall()
    first = rows[0] if rows else (None, None)
    return [(first[0], first[1]), records_from_rows(r[2:] for r in rows if r[2] is not None)]


async def admitted_in_one_hop(driver: Any, tenant: str, key: str) -> list[Any]:
    """The cold read's rows, the records decoded: ``[(run_id, seal, leaf), records]``."""
    answer: list[Any] = await driver._execute(_admitted, driver._conn, tenant, key)
    return answer


def _admitted(conn: sqlite3.Connection, tenant: str, key: str) -> list[Any]:
    rows = conn.execute(_ADMITTED, (tenant, key)).fetchall()
    first = rows[0] if rows else (None, None, None)
    return [tuple(first[:3]), records_from_rows(r[3:] for r in rows if r[3] is not None)]


async def append_in_one_hop(
    driver: Any,
    judge: Judge,
    *,
    tenant: str,
    run: RunId,
    now: int,
    expected: tuple[int, Digest] | None,
    items: Sequence[Append],
    signer: Signer | None,
    profile: WireProfile,
) -> list[Record]:
    """One guarded append in one write transaction on the connection's thread."""
    try:
        records: list[Record] = await driver._execute(
            _append,
            driver._conn,
            judge,
            tenant,
            run,
            now,
            expected,
            items,
            signer,
            profile,
        )
    except sqlite3.Error as exc:  # rolled back (busy past the timeout, a full disk, ...)
        raise BackendError(
            f"{type(exc).__name__} [{getattr(exc, 'sqlite_errorname', '')}]: {exc}; "
            "nothing of this change was written"
        ) from exc
    return records


def _append(
    conn: sqlite3.Connection,
    judge: Judge,
    tenant: str,
    run: RunId,
    now: int,
    expected: tuple[int, Digest] | None,
    items: Sequence[Append],
    signer: Signer | None,
    profile: WireProfile,
) -> list[Record]:
    run_id = str(run)
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute(_STATE, (tenant, run_id, now)).fetchone()
        epoch, fence, head_seq, head_hash = judge(run, now, tuple(row), expected)
        if fence:
            conn.execute(_FENCE, (tenant, run_id, epoch - 1))
        if row[4] != 1:
            conn.execute(_MUTEX, (tenant, run_id, now))
        records, rows, _ = chain_batch(
            tenant, run_id, epoch, head_seq, head_hash, items, signer, profile
        )
        conn.executemany(_INSERT, rows)
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            outcome = commit_failed(conn, exc)  # rolled back; an I/O error: in doubt
            if outcome is exc:
                raise
            raise outcome from exc
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return records
