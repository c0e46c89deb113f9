"""What one SQLite write transaction of the hot path is and does, on the connection's thread:
the statements, a queued append (:class:`Request`), one append inside the open transaction
(fence, seal, activity, head, records, admission claims, a conclusion), a group's savepoints
and rounds (:func:`transaction`), and a failed append's error for its caller
(:func:`translate`). :mod:`agentplane_journal.backends.sqlite.writer` queues the appends and
runs these; its docstring says why the path is shaped so.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentplane_journal.backends.sqlite.conclude import finish
from agentplane_journal.core.append import EFFECT_STARTED, RUN_SEALED, Append
from agentplane_journal.core.batch import COLUMNS, chain_batch, fenced
from agentplane_journal.core.ids import Digest, EffectKey, RunId
from agentplane_journal.core.profile import WireProfile
from agentplane_journal.core.record import Record
from agentplane_journal.core.signing import Signer
from agentplane_journal.db.dialect import SqliteDialect
from agentplane_journal.db.dialect.sqlite import commit_error_in_doubt
from agentplane_journal.db.hotpath import CancelRequested, HeadMoved, LogSeal
from agentplane_journal.db.statements import (
    RECORD_COLUMNS,
    record_from_row,
    stored_int,
    stored_run,
    stored_text,
)
from agentplane_journal.db.violations import Collision, append_raced, journal_collision
from agentplane_journal.errors import (
    BackendError,
    CommitUnknownError,
    DuplicateAdmissionError,
    DuplicateEffectError,
    LeaseHeldError,
    RunSealedError,
)

__all__ = ["INSERT", "Request", "commit_failed", "transaction", "translate"]

#: The run's activity, kept at ``max(updated_at, now)`` as the general unit of work keeps it.
#: On SQLite the run mutex itself is the database's write lock, taken by ``BEGIN IMMEDIATE``
#: before anything is read, so this statement runs only when the row is missing or behind
#: (``_STATE`` says which): a row rewritten with its own value would still cost a page in the
#: WAL, written and synced at every commit.
_MUTEX = (
    "INSERT INTO run_activity (tenant, run_id, updated_at) VALUES (?, ?, ?) "
    "ON CONFLICT (tenant, run_id) DO UPDATE SET updated_at = max(updated_at, excluded.updated_at)"
)
#: Everything an append checks, in one statement: the lease, the seal, whether the activity
#: is current (``updated_at >= now``, the same order ``max`` uses, whatever a hostile row's
#: storage class), and whether the head row's ``seq`` and ``hash`` columns are the ones this
#: process wrote (``?4``, ``?5``; NULL without a cached head). ``=`` never equates a BLOB with
#: a TEXT or a number.
_STATE = (
    "SELECT (SELECT epoch FROM run_lease WHERE tenant = ?1 AND run_id = ?2),"
    " (SELECT owner FROM run_lease WHERE tenant = ?1 AND run_id = ?2),"
    " (SELECT outcome FROM run_seal WHERE tenant = ?1 AND run_id = ?2),"
    " (SELECT updated_at >= ?3 FROM run_activity WHERE tenant = ?1 AND run_id = ?2),"
    " (SELECT seq = ?4 AND hash = ?5 FROM journal WHERE tenant = ?1 AND run_id = ?2"
    " ORDER BY seq DESC LIMIT 1)"
)
#: ``_STATE`` and the run's stop request, for an append made ``unless_cancelled`` (an
#: effect's start): the check and the write in one transaction, under the write lock.
_STATE_CANCEL = (
    _STATE + ", (SELECT actor FROM run_cancel WHERE tenant = ?1 AND run_id = ?2),"
    " (SELECT reason FROM run_cancel WHERE tenant = ?1 AND run_id = ?2)"
)
#: The whole last row, so the head is re-hashed and checked against its columns before
#: anything is chained onto it (``statements.record_from_row``, as every read does), unless
#: ``_STATE`` found the head this process wrote.
_HEAD = (
    f"SELECT {', '.join(c.name for c in RECORD_COLUMNS)} FROM journal"
    " WHERE tenant = ? AND run_id = ? ORDER BY seq DESC LIMIT 1"
)
INSERT = f"INSERT INTO journal ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * 12)})"
_STARTED = (
    "SELECT effect_key FROM journal WHERE tenant = ? AND run_id = ?"
    f" AND kind = '{EFFECT_STARTED}'"
    " AND effect_key = ? AND seq <= ?"
)
#: An admission's lease claim (``RunControl.acquire``'s statement): a fresh row at epoch 1,
#: a lapsed or released one at epoch + 1, a live one nothing.
_CLAIM = (
    "INSERT INTO run_lease (tenant, run_id, owner, epoch, expires_at) VALUES (?, ?, ?, 1, ?)"
    " ON CONFLICT (tenant, run_id) DO UPDATE SET owner = excluded.owner,"
    " epoch = run_lease.epoch + 1, expires_at = excluded.expires_at"
    " WHERE run_lease.expires_at <= ? RETURNING epoch"
)
_LEASE = "SELECT owner, epoch, expires_at FROM run_lease WHERE tenant = ? AND run_id = ?"
#: An admission key's claim (``Admissions._claim``'s statements): the primary key decides.
_KEY = (
    "INSERT INTO run_admission (tenant, key, run_id, admitted_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (tenant, key) DO NOTHING RETURNING key"
)
_KEY_HOLDER = "SELECT run_id FROM run_admission WHERE tenant = ? AND key = ?"
_SAVEPOINT = "agentplane_journal_append"
#: Reads this path's driver errors (which constraint a unique violation names).
_DIALECT = SqliteDialect()


@dataclass(slots=True)
class Request:
    """One append waiting for a transaction: its inputs, and where its answer goes."""

    tenant: str
    run: RunId
    epoch: int
    now: int
    items: Sequence[Append]
    signer: Signer | None
    profile: WireProfile
    keys: Sequence[EffectKey]
    known: tuple[int, Digest] | None  # the head after this process's last commit to the run
    sealed: tuple[list[Record], list[tuple[Any, ...]]] | None  # the batch chained onto it
    unless_cancelled: bool
    #: An admission (``SqlJournalStore.admit``): the lease's owner and expiry, and the
    #: admission keys the batch claims; ``epoch`` is then the one the batch was chained at.
    admit: tuple[str, int, list[str]] | None
    future: asyncio.Future[list[Record]] = field(repr=False)
    #: A conclusion (``SqlJournalStore.conclude``): the log leaf's outcome and the log's
    #: seal, run after the records (:func:`~.conclude.finish`).
    conclude: tuple[str, LogSeal] | None = None
    #: An admission's expected head seq (``HeadMoved`` when the run's head is elsewhere).
    after: int | None = None


def _append_in(conn: sqlite3.Connection, r: Request) -> list[Record]:
    """One append inside the open write transaction: fence, seal, activity, head, records.

    The head: when its row's ``seq`` and ``hash`` columns are the ones this process computed
    at its last commit to the run (``r.known``), the records chain onto that hash, which is
    what the head row must hash to; an edit of the row's other columns is then verify's to
    report, and the new records chain onto the true chain. Any other head (another writer's,
    an edited ``hash`` or ``seq``, no cached entry) is re-hashed from its whole row first, so
    a forged one is refused before anything is chained onto it.
    """
    tenant, run_id, known = r.tenant, str(r.run), r.known
    if r.admit is not None:
        _claim_lease(conn, r)
    state = conn.execute(
        _STATE_CANCEL if r.unless_cancelled else _STATE,
        (tenant, run_id, r.now, *((None, None) if known is None else (known[0], bytes(known[1])))),
    ).fetchone()
    lease_epoch, lease_owner, sealed_outcome, current, head_known = state[:5]
    if lease_epoch is not None:  # SQLite columns can hold any type: a hostile row is corrupt
        lease_epoch = stored_int(lease_epoch, 0, "run_lease.epoch")
        lease_owner = stored_text(lease_owner, 0, "run_lease.owner")
    error = fenced(r.run, r.epoch, lease_epoch, lease_owner)
    if error is not None:
        raise error
    if sealed_outcome is not None:
        raise RunSealedError(r.run, stored_text(sealed_outcome, 0, "run_seal.outcome"))
    if r.unless_cancelled and state[5] is not None:
        actor = stored_text(state[5], 0, "run_cancel.actor")
        raise CancelRequested(actor, stored_text(state[6], 0, "run_cancel.reason"))
    if current != 1:
        conn.execute(_MUTEX, (tenant, run_id, r.now))
    if (
        r.sealed is not None
        and known is not None
        and (head_known == 1 or (r.admit is not None and head_known is None))
    ):  # the head this process knows, or an admission's run that has no record yet
        head_seq = known[0]
        records, rows = r.sealed
    else:
        last = conn.execute(_HEAD, (tenant, run_id)).fetchone()
        if last is None:
            head_seq, head_hash = 0, Digest.ZERO
        else:
            head = record_from_row(last)
            head_seq, head_hash = head.seq, head.hash
        records, rows, _ = chain_batch(
            tenant, run_id, r.epoch, head_seq, head_hash, r.items, r.signer, r.profile
        )
    if r.after is not None and head_seq != r.after:
        raise HeadMoved(head_seq)  # rolled back with the lease claim before it
    try:
        conn.executemany(INSERT, rows)
    except sqlite3.IntegrityError as exc:
        what, name = journal_collision(_DIALECT, exc) or (None, "")
        if what is Collision.CHAIN_POSITION:
            # Not reachable through the store under BEGIN IMMEDIATE (the head was read under
            # the write lock); a position taken anyway is a race, never a duplicate effect.
            raise append_raced(r.run, head_seq + 1, name, exc) from exc
        if what is not Collision.EFFECT_STARTED or not r.keys:
            raise
        # Exactly-once. Which key had started before this batch (the batch's own earlier
        # rows are in the transaction)?
        for key in r.keys:
            if conn.execute(_STARTED, (tenant, run_id, key.hex(), head_seq)).fetchone():
                raise DuplicateEffectError(key) from exc
        raise DuplicateEffectError(r.keys[0]) from exc
    if r.admit is not None:
        for claim in r.admit[2]:  # sorted, as the general unit claims them
            if conn.execute(_KEY, (tenant, claim, run_id, r.now)).fetchone() is None:
                held = conn.execute(_KEY_HOLDER, (tenant, claim)).fetchone()
                if held is None:  # nothing retires a key while this holds the write lock
                    raise BackendError(f"admission key {claim!r} was refused but has no holder")
                raise DuplicateAdmissionError(claim, stored_run(held[0], "run_admission.run_id"))
    if r.conclude is not None:
        outcome, seal = r.conclude
        last = r.items[-1]
        conclusion = last.payload["outcome"] if last.kind == RUN_SEALED else None
        finish(
            conn, tenant, run_id, r.epoch, r.now, bytes(records[-1].hash), conclusion, outcome, seal
        )
    return records


def _claim_lease(conn: sqlite3.Connection, r: Request) -> None:
    """An admission's lease claim, first in its transaction; the batch is chained again
    (in :func:`_append_in`) unless it got the epoch it was chained at."""
    assert r.admit is not None
    owner, expires, _ = r.admit
    tenant, run_id = r.tenant, str(r.run)
    row = conn.execute(_CLAIM, (tenant, run_id, owner, expires, r.now)).fetchone()
    if row is None:
        held = conn.execute(_LEASE, (tenant, run_id)).fetchone()
        if held is None:
            raise BackendError(f"the lease claim of {r.run} was refused but it has no lease row")
        holder = stored_text(held[0], 0, "run_lease.owner")
        epoch = stored_int(held[1], 0, "run_lease.epoch")
        remaining = max(stored_int(held[2], 0, "run_lease.expires_at") - r.now, 0)
        raise LeaseHeldError(r.run, holder, epoch, remaining)
    epoch = stored_int(row[0], 0, "run_lease.epoch")
    if epoch != r.epoch:
        r.epoch, r.sealed = epoch, None


def transaction(conn: sqlite3.Connection, group: list[Request]) -> list[Any]:
    """Run ``group`` in write transactions, on the connection's thread: one answer per request.

    Usually one transaction. A lone append is the whole transaction; in a group each append
    has its own savepoint, so a failure rolls back that append alone and becomes its answer
    (whatever it is: a contract error, a record over the size limit, the database's own
    error), and the others commit together. Some errors end the whole transaction instead:
    SQLite rolls it back itself on ``SQLITE_FULL`` (and may on ``SQLITE_IOERR``, ``SQLITE_NOMEM``
    and a few others), which undoes the appends before the failing one and their savepoints
    with it. That append keeps its error; the rest run again in a new transaction (each
    round answers at least one append, so the rounds end).
    """
    answers: list[Any] = [None] * len(group)
    todo = list(range(len(group)))
    while todo:
        todo = _attempt(conn, group, todo, answers)
    return answers


def _attempt(
    conn: sqlite3.Connection, group: list[Request], todo: list[int], answers: list[Any]
) -> list[int]:
    """One write transaction over ``group[i]`` for each ``i`` in ``todo``, filling their
    ``answers``; returns the requests to run again (empty once the transaction has ended).
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:  # busy past busy_timeout, or worse: nothing was written
        for i in todo:
            answers[i] = exc
        return []
    lone = len(todo) == 1
    try:
        for i in todo:
            if not lone:
                conn.execute(f"SAVEPOINT {_SAVEPOINT}")
            try:
                answers[i] = _append_in(conn, group[i])
            except Exception as exc:
                answers[i] = exc
                if not conn.in_transaction:
                    # SQLite rolled the whole transaction back: the appends before this one
                    # were undone with it, so they run again, with the ones not yet run.
                    return [j for j in todo if j != i and not _failed(answers[j])]
                if lone:
                    conn.execute("ROLLBACK")
                    return []
                conn.execute(f"ROLLBACK TO {_SAVEPOINT}")
            if not lone:
                conn.execute(f"RELEASE {_SAVEPOINT}")
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            outcome = commit_failed(conn, exc)
            for i in todo:
                if not _failed(answers[i]):
                    answers[i] = outcome
        return []
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def commit_failed(conn: sqlite3.Connection, exc: sqlite3.Error) -> BaseException:
    """What a write transaction whose ``COMMIT`` raised ``exc`` answers, once it is rolled
    back: ``exc`` (nothing was written), or :class:`CommitUnknownError` for an I/O error.

    SQLite either rolled the transaction back itself (``SQLITE_FULL`` while writing the
    WAL: its commit frame is written last, and a short write leaves it invalid) or left it
    open, and it is rolled back here (a ROLLBACK that fails then raises its own error, as
    before). Either way nothing of it is visible now, but an I/O error may have left its
    commit frame in the WAL, which a crash's recovery replays
    (:func:`~agentplane_journal.db.dialect.sqlite.commit_error_in_doubt`): its outcome is
    unknown, and a ROLLBACK failing after it changes nothing of that, so it is not raised.
    """
    in_doubt = commit_error_in_doubt(exc)
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            if not in_doubt:
                raise
    if not in_doubt:
        return exc
    unknown = CommitUnknownError(f"{exc.sqlite_errorname}: {exc}")
    unknown.__cause__ = exc
    return unknown


def _failed(answer: Any) -> bool:
    return isinstance(answer, BaseException)


def translate(exc: BaseException) -> BaseException:
    """The caller's error for a failed append: the driver's error as :class:`BackendError`
    (saying so when the database is full), the contract's own as they are."""
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorname", None)
        if code == "SQLITE_FULL":
            detail = (
                f"the database or its disk is full ({code}: {exc}); nothing of this append "
                "was written: free disk space (or raise PRAGMA max_page_count) and retry"
            )
        else:
            detail = f"{type(exc).__name__} [{code}]: {exc}"
        error = BackendError(detail)
        error.__cause__ = exc
        return error
    return exc
