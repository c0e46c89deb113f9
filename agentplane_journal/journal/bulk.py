"""Many runs' appends and seals in one transaction, each through the store's own checks.

A restore (and a bench's seeding) writes tens of thousands of runs. One transaction per
append and one per seal spends nearly all its time committing and in round trips (on
SQLite, thread hops); this module writes a *chunk of operations* — appends and seals of
any number of runs, in the order given — in ONE unit of work, all or nothing, in a handful
of statements per chunk rather than several per run (an operation is not a durable op:
see the glossary). Nothing is bypassed:

* the chunk's runs are locked as ``lock_run`` locks one (the store's mutex statement, then
  in later statements the lease rows ``FOR UPDATE``, the seals and the re-hashed heads), and
  every operation is judged by the same :func:`~agentplane_journal.journal.writes.run_state_from`
  (the fence for that operation's epoch, sealed or not, the head);
* every append is checked and chained by the store's own ``chain_rows`` onto the head the
  chunk's earlier operations left, its rows inserted with the others' by the store's INSERT
  (exactly-once rows skipped and named, as ``append`` names them), then its admission claims
  and outcome written by the store's ``after_rows``;
* the seals' leaves are entered into the log together, at the end, by the same
  :meth:`TenantLog.append <agentplane_journal.journal.log.TenantLog.append>` a live seal
  calls (it takes a list): in the order the seal operations were given, one leaf after another
  through the same tree builder, so the stored tree is the one the seals would have built
  one by one. The log counter is taken last, keeping the store's lock order (run mutexes,
  then the counter) however many runs a chunk holds.

Within a chunk a seal is final: an append after its own run's seal operation is
:class:`RunSealedError`, as it would be after a committed seal; a second seal of the run
returns the first's head and adds no leaf (first seal wins).

:func:`write_rows` is the same unit for records a restore's first pass has already chained
and checked (:mod:`~agentplane_journal.journal.restore_spool`): the same locks, fence, seal
and head judgement per operation (and the rows must continue the head the target holds,
byte for byte), the same admission claims, outcomes and leaves, the rows inserted by one
``executemany`` of the journal's plain INSERT (the driver's, no statement compiled per chunk
and no per-row parameter processing; on PostgreSQL by ``COPY`` first, in a savepoint, the
INSERT only when the server refuses it): a second start of an effect, or a position another
writer took, is refused by the index and fails the chunk, all or nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.core.admission import IDEMPOTENCY_KEY, RUN_ADMITTED
from agentplane_journal.core.append import EFFECT_STARTED, Append
from agentplane_journal.core.batch import COLUMNS
from agentplane_journal.core.checks import check_int, check_label, check_run
from agentplane_journal.core.ids import Digest, EffectKey, RunId
from agentplane_journal.core.profile import WireProfile, profile_named
from agentplane_journal.core.record import Record
from agentplane_journal.db import selfwait
from agentplane_journal.db.dialect import Dialect
from agentplane_journal.db.driver_sql import driver_sql as _driver_sql
from agentplane_journal.db.models import EFFECT_STARTED_PREDICATE, Journal, RunLease, RunSeal
from agentplane_journal.db.statements import RECORD_COLUMNS, digest, hot_statements
from agentplane_journal.errors import ConflictError, DuplicateEffectError, RunSealedError
from agentplane_journal.journal.log import SealedLeaf
from agentplane_journal.journal.store import MAX_INSERT_ROWS, SqlJournalStore
from agentplane_journal.journal.writes import RunState, run_state_from

__all__ = [
    "AppendOp",
    "ChainMovedError",
    "Op",
    "RowOp",
    "RowsOp",
    "SealOp",
    "StoredRow",
    "write_ops",
    "write_rows",
]

_IN_LIST = 500
"""Runs per statement when locking and reading many runs (far under any bound-parameter
limit)."""


@dataclass(frozen=True, slots=True)
class AppendOp:
    """One run's records under ``epoch`` (one ``append``'s batch), in wire ``profile``.

    ``profile`` ``None`` is the tenant's, as for ``append``. A restore names the profile each
    record was written in: a migrated tenant holds records of both, and each must be sealed
    to its own bytes again (checked by that profile's :meth:`WireProfile.refusal`).
    """

    epoch: int
    batch: Sequence[Append]
    profile: WireProfile | None = None


@dataclass(frozen=True, slots=True)
class SealOp:
    """Seal ``run`` at its head as of this point of the chunk (one ``seal``)."""

    run: RunId
    epoch: int
    outcome: str


Op = AppendOp | SealOp

StoredRow = tuple[
    int, int, str, str | None, str | None, bytes, bytes, bytes, str | None, str | None
]
"""A record chained and checked before the transaction (a restore's pass one,
:data:`~agentplane_journal.journal.restore_spool.Spooled`): ``(seq, epoch, kind, effect_key,
case_id, prev_hash, hash, raw, admission_key, outcome)``."""


@dataclass(frozen=True, slots=True)
class RowsOp:
    """One run's records under ``epoch``, in order from the run's next seq: their bytes and
    hashes already established (the caller compared the bytes with what ``append`` writes for
    them, and chained the hashes over them), written as they are (one ``append``'s batch)."""

    run: RunId
    epoch: int
    records: Sequence[StoredRow]


RowOp = RowsOp | SealOp


class ChainMovedError(ConflictError):
    """Rows chained before the transaction do not continue the head the run holds now: another
    writer wrote to the run. Nothing of the chunk was written."""

    def __init__(self, run: RunId, seq: int, head: Digest, first: int) -> None:
        super().__init__(
            f"run {run} ends at seq {seq} ({head.hex()[:12]}) in the target, and the rows being "
            f"written continue a chain to seq {first - 1}: another writer wrote to the run; "
            "nothing of this chunk was written"
        )
        self.run, self.seq, self.head = run, seq, head


def _checked(ops: Sequence[Op], store: SqlJournalStore) -> list[tuple[Op, RunId | None]]:
    """Argument checks before any statement: what ``append`` and ``seal`` check first."""
    out: list[tuple[Op, RunId | None]] = []
    for i, op in enumerate(ops):
        if isinstance(op, AppendOp):
            epoch = check_int(op.epoch, f"ops[{i}].epoch")
            items, run = store.check_batch(op.batch)
            profile = None if op.profile is None else profile_named(op.profile)
            out.append((AppendOp(epoch, items, profile), run))
        elif isinstance(op, SealOp):
            run = check_run(op.run)
            seal = SealOp(
                run,
                check_int(op.epoch, f"ops[{i}].epoch"),
                check_label(op.outcome, f"ops[{i}].outcome"),
            )
            out.append((seal, run))
        else:
            raise TypeError(f"ops[{i}] must be an AppendOp or a SealOp")
    return out


async def write_ops(store: SqlJournalStore, ops: Sequence[Op]) -> list[list[Record] | Digest]:
    """Write ``ops`` in order in one transaction; per operation, the records an append wrote or
    the head a seal froze. All or nothing: any refusal (fenced, sealed, duplicate effect or
    admission, another profile) rolls the whole chunk back and propagates as ``append`` or
    ``seal`` would raise it."""
    checked = _checked(ops, store)
    if not checked:
        return []
    for _, run in checked:
        store.refuse_own_wait(run)

    async def unit(session: AsyncSession) -> list[list[Record] | Digest]:
        results: list[list[Record] | Digest] = []
        sealed: dict[RunId, tuple[str, Digest]] = {}
        rows = await _lock_runs(store, session, [run for _, run in checked if run is not None])
        held: dict[RunId, RunState] = {}
        leaves: list[SealedLeaf] = []
        pending = _Rows()
        for op, run in checked:
            if run is None:  # an empty append
                results.append([])
                continue
            # The row was read under this transaction's mutex (and, on PostgreSQL, its lease
            # row FOR UPDATE; on SQLite the write lock): the fence is judged for each operation's
            # epoch on it, and the head is what this transaction's own writes made it.
            state = run_state_from(run, op.epoch, rows[run])
            if run in held:
                state = held[run]
            if isinstance(op, AppendOp):
                if run in sealed:
                    raise RunSealedError(run, sealed[run][0])
                batch = [*op.batch]
                chained = store.chain_rows(run, op.epoch, state, batch, op.profile)
                written = [] if chained is None else chained[0]
                if chained is not None:
                    pending.add(run, state.head_seq + 1, batch, chained)
                    state = replace(state, head_seq=written[-1].seq, head_hash=written[-1].hash)
                held[run] = state
                results.append(written)
                continue
            held[run] = state
            if state.sealed_head is not None:
                results.append(digest(state.sealed_head, state.head_seq))
            elif run in sealed:
                results.append(sealed[run][1])
            else:
                sealed[run] = (op.outcome, state.head_hash)
                leaves.append((str(run), bytes(state.head_hash), store.now(), op.outcome))
                results.append(state.head_hash)
        await pending.write(store, session)
        await store.tenant_log.append(session, leaves)
        return results

    return await store.unit(unit)


async def write_rows(store: SqlJournalStore, ops: Sequence[RowOp]) -> None:
    """:func:`write_ops` for records already chained and checked (:class:`RowsOp`): in one
    transaction, each run locked and fenced for each operation's epoch, each run's rows
    continuing its head exactly (else :class:`ChainMovedError`), unsealed; then the rows,
    the admission claims, the outcomes and the seals' leaves, as ``append`` and ``seal``
    leave them. All or nothing."""
    runs: list[RunId] = []
    for i, op in enumerate(ops):
        if isinstance(op, RowsOp):
            check_int(op.epoch, f"ops[{i}].epoch")
            if not op.records:
                raise ValueError(f"ops[{i}] holds no records")
        elif isinstance(op, SealOp):
            check_label(op.outcome, f"ops[{i}].outcome")
        else:
            raise TypeError(f"ops[{i}] must be a RowsOp or a SealOp")
        runs.append(check_run(op.run))
    if not ops:
        return
    for run in set(runs):
        store.refuse_own_wait(run)
    tenant, attest = store.tenant, store.attest

    async def unit(session: AsyncSession) -> None:
        states = await _lock_runs(store, session, runs)
        held: dict[RunId, RunState] = {}
        sealed: dict[RunId, str] = {}
        leaves: list[SealedLeaf] = []
        rows: list[tuple[Any, ...]] = []  # BARE_COLUMNS' while every row is bare, else COLUMNS'
        bare = True
        after: list[tuple[RunId, list[Append], str | None]] = []
        for op in ops:
            run = op.run
            state = run_state_from(run, op.epoch, states[run])  # the fence, for this epoch
            state = held.get(run, state)
            if run in sealed or state.sealed_outcome is not None:
                if isinstance(op, SealOp):  # first seal wins, as in write_ops
                    continue
                raise RunSealedError(run, sealed.get(run) or str(state.sealed_outcome))
            if isinstance(op, SealOp):
                if state.sealed_head is None:
                    sealed[run] = op.outcome
                    leaves.append((str(run), bytes(state.head_hash), store.now(), op.outcome))
                held[run] = state
                continue
            first = op.records[0]
            if first[0] != state.head_seq + 1 or first[5] != bytes(state.head_hash):
                raise ChainMovedError(run, state.head_seq, state.head_hash, first[0])
            run_id, epoch = str(run), op.epoch
            claims: list[Append] = []
            conclusion = None
            for seq, _, kind, effect, case, prev, hash_, raw, key, outcome in op.records:
                key_id, signature = attest(hash_)  # the restoring store's own signer, if any
                if (
                    bare
                    and effect is None
                    and case is None
                    and key_id is None
                    and signature is None
                ):
                    rows.append((tenant, run_id, seq, epoch, kind, prev, hash_, raw))
                else:
                    if bare:
                        rows, bare = [_with_nulls(r) for r in rows], False
                    rows.append(
                        (
                            tenant,
                            run_id,
                            seq,
                            epoch,
                            kind,
                            effect,
                            prev,
                            hash_,
                            raw,
                            key_id,
                            signature,
                            case,
                        )
                    )
                if key is not None:  # the claim alone: what after_rows reads of it
                    claims.append(Append(run, RUN_ADMITTED, {IDEMPOTENCY_KEY: key}))
                if outcome is not None:
                    conclusion = outcome
            last = op.records[-1]
            held[run] = RunState(state.sealed_outcome, state.sealed_head, last[0], Digest(last[6]))
            if claims or conclusion is not None:
                after.append((run, claims, conclusion))
        await _insert_rows(store, session, rows, bare)
        for run, claims, conclusion in after:
            await store.after_rows(session, run, claims, conclusion)
        await store.tenant_log.append(session, leaves)

    await store.unit(unit)


async def _insert_rows(
    store: SqlJournalStore, session: AsyncSession, rows: list[tuple[Any, ...]], bare: bool
) -> None:
    """``rows`` (in :data:`~agentplane_journal.core.batch.COLUMNS` order, or
    :data:`BARE_COLUMNS` order when ``bare``) by one ``executemany`` of the journal's plain
    INSERT: no ``ON CONFLICT``, so a second start of an effect or a taken position raises
    (mapped as ``append`` maps it) and the chunk rolls back.

    ``bare``: no row has an effect key, a case, a key id or a signature, and the INSERT names
    only the other columns (those four are NULL, as the table leaves a column it is not
    given). Python's ``sqlite3`` binds every ``None`` (and ``bytes``) parameter through its
    adaptation protocol, a formatted ``AttributeError`` each: four of them a row, left out."""
    if not rows:
        return
    conn = await session.connection()
    columns = BARE_COLUMNS if bare else COLUMNS
    text, names = _driver_sql(
        conn, "journal_bare" if bare else "journal", _JOURNAL_BARE if bare else _JOURNAL_INSERT
    )
    if names != columns:
        raise RuntimeError("the journal INSERT's parameters are not in the rows' order")
    if await store.dialect.copy_rows(conn, _JOURNAL, columns, rows):
        return  # PostgreSQL's COPY; refused, it left nothing and the INSERT below names why
    try:
        await conn.exec_driver_sql(text, rows)
    except DBAPIError as exc:
        started = (
            set()
            if bare
            else {
                EffectKey.from_hex(r[5])
                for r in rows
                if r[4] == EFFECT_STARTED and r[5] is not None
            }
        )
        first = rows[0]
        raise store.insert_refused(exc, RunId.parse(first[1]), first[2], started) from exc


_JOURNAL: Any = Journal.__table__
_JOURNAL_INSERT = Journal.__table__.insert().values(dict.fromkeys(COLUMNS))
"""The journal's INSERT of every column, in :data:`COLUMNS` order."""

_NULLABLE = ("effect_key", "key_id", "signature", "case_id")
BARE_COLUMNS = tuple(c for c in COLUMNS if c not in _NULLABLE)
"""The journal's columns a row always has (a bare row: its :data:`_NULLABLE` ones NULL)."""
_JOURNAL_BARE = Journal.__table__.insert().values(dict.fromkeys(BARE_COLUMNS))
"""The journal's INSERT of a bare row, in :data:`BARE_COLUMNS` order."""


def _with_nulls(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A bare row (:data:`BARE_COLUMNS`) in :data:`COLUMNS` order, its NULLs in place."""
    tenant, run_id, seq, epoch, kind, prev, hash_, raw = row
    return (tenant, run_id, seq, epoch, kind, None, prev, hash_, raw, None, None, None)


class _Rows:
    """The chunk's records, chained and checked (``chain_rows``), inserted together: one
    multi-row INSERT per :data:`~agentplane_journal.journal.store.MAX_INSERT_ROWS` rows
    instead of one per append; then each append's admission claims and outcome, in order."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.appends: list[tuple[RunId, int, list[Append], str | None, set[EffectKey]]] = []

    def add(
        self,
        run: RunId,
        seq: int,
        batch: list[Append],
        chained: tuple[list[Record], list[dict[str, Any]], str | None, set[EffectKey]],
    ) -> None:
        _, rows, conclusion, seen = chained
        self.rows.extend(rows)
        self.appends.append((run, seq, batch, conclusion, seen))

    async def write(self, store: SqlJournalStore, session: AsyncSession) -> None:
        conn = await session.connection()
        insert = _insert_statement(store.dialect)
        for start in range(0, len(self.rows), MAX_INSERT_ROWS):
            chunk = self.rows[start : start + MAX_INSERT_ROWS]
            try:
                written = {(r, q) for r, q in (await conn.execute(insert, chunk)).all()}
            except DBAPIError as exc:
                # The statement holds several runs' rows; the first is named (in a restore,
                # a collision means another writer is in the target: it is refused whole).
                first = chunk[0]
                seen = {k for _, _, _, _, keys in self.appends for k in keys}
                run = RunId.parse(first["run_id"])
                raise store.insert_refused(exc, run, first["seq"], seen) from exc
            if len(written) != len(chunk):
                # The exactly-once index skipped a row: its key had already started.
                for row in chunk:
                    if (row["run_id"], row["seq"]) not in written:
                        raise DuplicateEffectError(EffectKey.from_hex(row["effect_key"]))
        for run, _, batch, conclusion, _ in self.appends:
            await store.after_rows(session, run, batch, conclusion)


@functools.cache
def _insert_statement(dialect: Dialect) -> Any:
    """The store's records INSERT (``insert_records``: exactly-once rows skipped, never
    raised), returning each row's run with its seq, as one statement holds several runs."""
    return (
        dialect.insert(Journal)
        .on_conflict_do_nothing(
            index_elements=[Journal.tenant, Journal.run_id, Journal.effect_key],
            index_where=EFFECT_STARTED_PREDICATE,
        )
        .returning(Journal.run_id, Journal.seq)
    )


@functools.cache
def _state_reads(dialect: Dialect) -> tuple[Any, Any, Any]:
    """``_lock_runs``' reads of many runs, built once: the lease rows ``FOR UPDATE``, the
    seals, and the last seq of the runs that have records (the primary key's prefix alone:
    joined back to the rows in the same statement, a planner without fresh statistics, a
    tenant just written beside a large one, took ~45 s a chunk at 100k runs). The run ids
    are one list parameter, ``ids`` (:meth:`Dialect.text_in`)."""
    tenant: Any = bindparam("tenant")
    lease = (
        select(RunLease.run_id, RunLease.epoch, RunLease.owner)
        .where(RunLease.tenant == tenant, dialect.text_in(RunLease.run_id, "ids"))
        .with_for_update()
    )
    seal = select(RunSeal.run_id, RunSeal.outcome, RunSeal.chain_head).where(
        RunSeal.tenant == tenant, dialect.text_in(RunSeal.run_id, "ids")
    )
    last = (
        select(Journal.run_id, func.max(Journal.seq))
        .where(Journal.tenant == tenant, dialect.text_in(Journal.run_id, "ids"))
        .group_by(Journal.run_id)
    )
    return lease, seal, last


async def _lock_runs(
    store: SqlJournalStore, session: AsyncSession, runs: list[RunId]
) -> dict[RunId, tuple[Any, ...]]:
    """``lock_run`` for many runs at once: each run's ``run_state`` row, read under its mutex.

    The mutexes first, in run id order (so two chunks take shared runs in one order), in one
    executemany of the store's own mutex statement; then, in later statements (fresh
    snapshots that see every earlier holder's commit), the lease rows ``FOR UPDATE``, the
    seals and the last seq of all of them, and the head row of each run that has records (a
    restore's runs have none): four round trips a chunk instead of two per run.
    Each row has ``run_state``'s shape, for :func:`run_state_from` to judge.
    """
    tenant = store.tenant
    by_id = {str(r): r for r in runs}
    ids = sorted(by_id)
    if not ids:
        return {}
    conn = await session.connection()
    now = store.now()
    text, names = _driver_sql(conn, "run_mutex", hot_statements(store.dialect).run_mutex)
    # Each row is the fixed values with the run id in its place (a tuple, no dict per run).
    fixed = {"tenant": tenant, "now": now, "run_id": None}
    at = names.index("run_id")
    before, after = tuple(fixed[n] for n in names[:at]), tuple(fixed[n] for n in names[at + 1 :])
    if "run_id" in names[at + 1 :]:
        raise RuntimeError("the run mutex statement names its run id twice")
    for start in range(0, len(ids), _IN_LIST):
        rows = [(*before, i, *after) for i in ids[start : start + _IN_LIST]]
        await conn.exec_driver_sql(text, rows)
    if conn.sync_connection is not None:  # so that this task never waits on them itself
        selfwait.hold_all(conn.sync_connection, tenant, ids)
    leases: dict[str, tuple[Any, Any]] = {}
    seals: dict[str, tuple[Any, Any]] = {}
    heads: dict[str, tuple[Any, ...]] = {}
    lease_stmt, seal_stmt, last = _state_reads(store.dialect)
    for start in range(0, len(ids), _IN_LIST):
        params = {"tenant": tenant, "ids": ids[start : start + _IN_LIST]}
        for run_id, epoch, owner in (await conn.execute(lease_stmt, params)).all():
            leases[run_id] = (epoch, owner)
        for run_id, outcome, head in (await conn.execute(seal_stmt, params)).all():
            seals[run_id] = (outcome, head)
        for run_id, seq in (await conn.execute(last, params)).all():
            heads[run_id] = (seq,)
    for run_id, (seq, *_) in list(heads.items()):
        # A run that already has records (none, in a restore): its head row by primary key.
        head_stmt = select(*RECORD_COLUMNS).where(
            Journal.tenant == tenant, Journal.run_id == run_id, Journal.seq == seq
        )
        heads[run_id] = tuple((await conn.execute(head_stmt)).one())
    empty = (None,) * len(RECORD_COLUMNS)
    return {
        by_id[i]: (*leases.get(i, (None, None)), *seals.get(i, (None, None)), *heads.get(i, empty))
        for i in ids
    }
