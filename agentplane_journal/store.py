"""The journal store: agentplane's store contract over one AsyncSession, on PostgreSQL or SQLite.

This module is the repository: the only code that builds statements. It is dialect-agnostic;
the few backend differences live in :mod:`agentplane_journal.dialect`.

How the concurrency guarantees are made (each is a storage invariant, not a code path):

* **The run mutex.** Every transaction that changes a run (append, append_atomic, seal)
  starts by upserting the run's ``run_activity`` row. The upsert takes that row's lock and
  holds it to COMMIT, so a run's writers queue, leased or not, and each reads the chain head
  only *after* it holds the lock (in a later statement, hence a fresh snapshot at READ
  COMMITTED). Without it, two unleased appenders read one head and the loser collides on the
  primary key, and a seal can record a head that an append is about to move past.
* **Fencing under the lease row's lock.** The fence reads ``run_lease`` ``FOR UPDATE`` after the
  run mutex, so an ``acquire`` that takes over waits for an in-flight append to finish, and an
  append that starts after the takeover sees the new epoch. Lock order is always
  activity row, then lease row, then the tenant's log counter: no cycles, no deadlocks.
* **Exactly-once** is the partial unique index ``journal_effect_started``; only that
  constraint becomes :class:`DuplicateEffectError`.
* **A fresh lease** is one ``INSERT .. ON CONFLICT DO UPDATE .. WHERE`` statement: a
  concurrent first acquire waits on the unique index and re-evaluates the predicate against
  the winner's row, so exactly one owner gets epoch 1 (0.4.0's read-then-upsert handed two
  owners epoch 1).
* **The log** (dense commit-ordered positions, proofs from one snapshot) is
  :mod:`agentplane_journal.log`'s; a seal takes its log counter after the run mutex.
"""

from __future__ import annotations

import unicodedata
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

from sqlalchemy import and_, bindparam, case, literal, or_, select, tuple_, union, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from . import fastpath, sqlitepath
from .checkpoint import Checkpoint, Inclusion
from .errors import (
    BackendError,
    CorruptRecordError,
    DuplicateEffectError,
    FencedError,
    LeaseHeldError,
    RunSealedError,
    TransactionEndedError,
)
from .ids import DEFAULT_TENANT, CaseId, Digest, EffectKey, RunId, validate_tenant
from .limits import MAX_I64, check_key_id, check_label
from .log import LogAudit, TenantLog
from .models import Journal, RunActivity, RunCancel, RunLease, RunOutcome, RunSeal
from .record import Append, Record, RunCheck
from .repository import (
    Repository,
    TransactionAnchor,
    _Passthrough,
    _Rollback,
    check_int,
    check_run,
    check_text,
    check_ttl,
)
from .signing import Signer, Verifier
from .statements import (
    RECORD_COLUMNS,
    digest,
    hot_statements,
    record_from_row,
    stored_int,
    stored_run,
    stored_text,
)
from .values import Cancellation, Head, Lease

__all__ = ["MAX_INSERT_ROWS", "JournalStore", "RunRead", "SqlJournalStore"]

#: Records per multi-row INSERT. Far under both backends' bound-parameter limits
#: (12 parameters a row); a batch larger than this costs one more statement per chunk.
MAX_INSERT_ROWS = 1000

#: Records per page when ``verify`` streams a run (its memory is one page, not the run).
STREAM_PAGE = 1000

_RELEASED_OWNER = ""  # 0.4.0 marks a released lease with an empty owner and expires_at = 0
_EFFECT_STARTED = "EffectStarted"
_RUN_SEALED = "RunSealed"


# -- the contract ----------------------------------------------------------------------


@runtime_checkable
class JournalStore(Protocol):
    """agentplane's journal store contract (see the README and ``store-contract.md``)."""

    tenant: str

    def for_tenant(self, name: str) -> JournalStore: ...
    async def append(
        self, epoch: int, batch: Sequence[Append], *, session: AsyncSession | None = None
    ) -> list[Record]: ...
    async def append_atomic(
        self,
        run: RunId,
        epoch: int,
        work: Callable[[AsyncSession], Awaitable[Iterable[Append]]],
        *,
        session: AsyncSession | None = None,
    ) -> list[Record]: ...
    async def read(
        self, run: RunId, from_seq: int = 1, *, session: AsyncSession | None = None
    ) -> list[Record]: ...
    async def head(self, run: RunId, *, session: AsyncSession | None = None) -> Head: ...
    async def acquire(
        self, run: RunId, owner: str, ttl: int, *, session: AsyncSession | None = None
    ) -> Lease: ...
    async def release_lease(
        self, run: RunId, epoch: int, *, session: AsyncSession | None = None
    ) -> None: ...
    async def seal(
        self, run: RunId, epoch: int, outcome: str, *, session: AsyncSession | None = None
    ) -> Digest: ...
    async def sealed_runs(
        self, *, session: AsyncSession | None = None
    ) -> list[tuple[RunId, Digest]]: ...
    async def checkpoint(self, *, session: AsyncSession | None = None) -> Checkpoint: ...
    async def consistency_proof(
        self, old_size: int, *, session: AsyncSession | None = None
    ) -> list[Digest]: ...
    async def inclusion_proof(
        self, run: RunId, *, session: AsyncSession | None = None
    ) -> Inclusion | None: ...
    async def runs_by_outcome(
        self, outcome: str, limit: int, *, session: AsyncSession | None = None
    ) -> list[RunId]: ...
    async def recent_runs(
        self,
        after: tuple[RunId, int] | None = None,
        limit: int = 100,
        *,
        session: AsyncSession | None = None,
    ) -> list[tuple[RunId, int]]: ...
    async def case_history(
        self, case: CaseId, limit: int, *, session: AsyncSession | None = None
    ) -> list[Record]: ...
    async def request_cancel(
        self, run: RunId, actor: str, reason: str, *, session: AsyncSession | None = None
    ) -> bool: ...
    async def cancellation(
        self, run: RunId, *, session: AsyncSession | None = None
    ) -> Cancellation | None: ...
    async def verify(
        self,
        run: RunId,
        verifier: Verifier | None = None,
        require_signature: bool = False,
        *,
        session: AsyncSession | None = None,
    ) -> Digest: ...


@dataclass(slots=True)
class RunRead:
    """One run of :meth:`SqlJournalStore.read_runs`: its records, or why they are unreadable.

    ``records`` stops before the first row that is corrupt (``error`` names its seq);
    ``sealed`` is the run's ``run_seal.chain_head`` column as stored (``None``: not
    sealed), ``position`` its leaf in the stored tree.
    """

    records: list[Record]
    error: CorruptRecordError | None = None
    sealed: Any = None
    position: int | None = None


@dataclass(frozen=True, slots=True)
class _RunState:
    """What a run-changing transaction learns once it holds the run mutex."""

    sealed_outcome: str | None
    sealed_head: bytes | None
    head_seq: int
    head_hash: Digest


class SqlJournalStore(Repository):
    """agentplane's journal store over SQLAlchemy's async engine (PostgreSQL or SQLite).

    Build it over an existing ``AsyncEngine`` (a host application's own works; SQLite's
    write serialisation is installed on it) or open one with :meth:`connect`. The store
    never creates or alters tables: run ``agentplane-journal upgrade`` (or
    ``alembic upgrade head``) first; an out-of-date database is refused with
    :class:`SchemaOutOfDateError` before the first statement.

    A handle made by :meth:`for_tenant`, or constructed for a tenant other than
    ``default``, names its log ``{origin}/{tenant}``; the default handle's log is ``origin``.

    ``read_engine`` (a streaming replica) takes the audit reads: ``read``, ``verify``,
    ``case_history``, the log, checkpoints and proofs, and the run indexes. A replica may be
    behind, so what it answers is an older state, never a wrong one (its checkpoint is a
    prefix of the primary's). ``head`` and ``cancellation`` stay on the primary: a writer
    acts on them (reconciling after :class:`CommitUnknownError`, stopping a run).

    ``group_commit`` (SQLite, on by default): appends that arrive while a commit is in
    flight share the next transaction, each in its own savepoint (its own outcome, its own
    error), so concurrent writers in one process pay for one commit per group instead of
    one each. A lone writer's append is a group of one: the same transaction as without it,
    so its latency does not change. ``group_commit=False`` commits each append on its own
    (appends still queue in the process, one transaction at a time). On PostgreSQL it
    changes nothing: each append is one statement, and concurrent commits there already
    share a WAL flush.

    Every method takes ``session=``, the host's own ``AsyncSession``: the store then runs in
    that session's transaction (in a savepoint when it writes) and commits nothing, so the
    records go with the host's rows (reads with it go to the session's database, never to
    ``read_engine``). See :meth:`Repository._host_unit` and the README.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        tenant: str = DEFAULT_TENANT,
        origin: str = "agentplane",
        signer: Signer | None = None,
        schema: str | None = None,
        clock: Callable[[], float] | None = None,
        read_engine: AsyncEngine | None = None,
        group_commit: bool = True,
        _shared: Any = None,
        _named: bool = False,
    ) -> None:
        origin = check_text(origin, "origin")
        if any(unicodedata.category(c) == "Cc" for c in origin):
            raise ValueError(
                "origin must be one line without control characters "
                "(it is the checkpoint note's first line)"
            )
        if signer is not None:
            if not (hasattr(signer, "key_id") and hasattr(signer, "sign")):
                raise TypeError("signer must have a key_id and a sign(message) method")
            check_key_id(signer.key_id)  # stored in every row it signs
        super().__init__(
            engine,
            tenant=tenant,
            schema=schema,
            clock=clock,
            read_engine=read_engine,
            _shared=_shared,
        )
        if self._shared.heads is None:
            self._shared.heads = fastpath.HeadCache()
        if self._shared.sqlite_writer is None and self._dialect.name == "sqlite":
            self._shared.sqlite_writer = sqlitepath.Writer(group_commit=bool(group_commit))
        self._base_origin = origin
        self._signer = signer
        #: The name of this tenant's log in checkpoint notes.
        # A handle for a tenant (for_tenant, or a constructor tenant other than the default)
        # names its log "{origin}/{tenant}", as agentplane does.
        named = _named or self.tenant != DEFAULT_TENANT
        self.origin: str = f"{origin}/{self.tenant}" if named else origin
        self._log = TenantLog(self._dialect, self.tenant, self.origin)

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        tenant: str = DEFAULT_TENANT,
        origin: str = "agentplane",
        signer: Signer | None = None,
        schema: str | None = None,
        clock: Callable[[], float] | None = None,
        engine_options: dict[str, Any] | None = None,
        read_url: str | None = None,
        group_commit: bool = True,
    ) -> SqlJournalStore:
        """Open a store from a URL (``postgresql://…`` or ``sqlite:///…``; async drivers).

        The engine is the store's own and :meth:`close` disposes of it. The schema revision
        is checked here, so a database that needs ``upgrade`` fails now, not mid-run.
        ``read_url`` (a replica) takes the audit reads; see the README's "Production topology".
        ``schema``: the PostgreSQL schema the tables were migrated into (``upgrade(url,
        schema=...)``); none means the default schema.
        """
        return await cls._open(
            url,
            engine_options,
            read_url,
            tenant=tenant,
            origin=origin,
            signer=signer,
            schema=schema,
            clock=clock,
            group_commit=group_commit,
        )

    def for_tenant(self, name: str) -> SqlJournalStore:
        """A handle whose every statement carries ``name``; its log is ``{origin}/{name}``."""
        return SqlJournalStore(
            self._shared.engine,
            tenant=validate_tenant(name),
            origin=self._base_origin,
            signer=self._signer,
            clock=self._clock,
            _shared=self._shared,
            _named=True,
        )

    def _key(self, run: RunId) -> Any:
        return and_(Journal.tenant == self.tenant, Journal.run_id == str(run))

    # -- the run mutex, the fence and the head ----------------------------------------

    async def _lock_run(self, session: AsyncSession, run: RunId, epoch: int) -> _RunState:
        """Take the run mutex, then fence; return what the transaction needs to know."""
        params = {"tenant": self.tenant, "run_id": str(run), "now": self._now()}
        statements = hot_statements(self._dialect)
        # Core statements on the session's own connection (same transaction), skipping the
        # ORM's statement handling, which the append path does not need.
        conn = await session.connection()
        await conn.execute(statements.run_mutex, params)
        # A later statement than the lock, so a fresh snapshot that sees the previous
        # writer's commit; see ``_HotStatements.run_state``.
        row = (await conn.execute(statements.run_state, params)).one()
        lease_epoch, lease_owner, sealed_outcome, sealed_head = row[:4]
        if lease_epoch is not None:
            lease_epoch = stored_int(lease_epoch, 0, "run_lease.epoch")
            lease_owner = stored_text(lease_owner, 0, "run_lease.owner")
            if epoch != lease_epoch or lease_owner == _RELEASED_OWNER:
                # A released lease fences every epoch until someone acquires it again.
                raise FencedError(run, epoch, lease_epoch)
        if sealed_outcome is not None:
            sealed_outcome = stored_text(sealed_outcome, 0, "run_seal.outcome")
        if row[4] is None:
            head_seq, head_hash = 0, Digest.ZERO
        else:
            # The head is re-hashed and checked against its columns in this transaction: a
            # forged head is refused here, never chained onto or sealed into the log.
            head = record_from_row(row[4:])
            head_seq, head_hash = head.seq, head.hash
        return _RunState(
            sealed_outcome=sealed_outcome,
            sealed_head=sealed_head,
            head_seq=head_seq,
            head_hash=head_hash,
        )

    # -- appending ---------------------------------------------------------------------

    def _check_batch(self, batch: Iterable[Append]) -> tuple[list[Append], RunId | None]:
        items = list(batch)
        for i, item in enumerate(items):
            if not isinstance(item, Append):
                raise TypeError(f"batch[{i}] must be an Append, not {type(item).__name__}")
            if item.kind == _RUN_SEALED:
                # Its outcome feeds the outcome index (an indexed text column).
                outcome = item.payload.get("outcome")
                if not isinstance(outcome, str):
                    raise ValueError(
                        f"batch[{i}] is a RunSealed record without a non-empty string 'outcome'"
                    )
                check_label(outcome, f"batch[{i}]'s RunSealed outcome")
        if not items:
            return items, None
        run = items[0].run
        for i, item in enumerate(items[1:], start=1):
            if item.run != run:
                raise ValueError(
                    f"batch spans runs {run} and {item.run} (batch[{i}]); "
                    "a batch is one run's atomic unit"
                )
        return items, run

    async def _write_batch(
        self, session: AsyncSession, run: RunId, epoch: int, state: _RunState, batch: list[Append]
    ) -> list[Record]:
        """Seal, sign and insert ``batch`` after the fence, under the run mutex."""
        if state.sealed_outcome is not None:
            raise RunSealedError(run, state.sealed_outcome)
        if not batch:
            return []
        seen: set[EffectKey] = set()
        for item in batch:
            if item.kind == _EFFECT_STARTED and item.effect_key is not None:
                if item.effect_key in seen:
                    raise DuplicateEffectError(item.effect_key)
                seen.add(item.effect_key)

        records: list[Record] = []
        rows: list[dict[str, Any]] = []
        prev, seq, conclusion = state.head_hash, state.head_seq, None
        tenant, run_id, signer = self.tenant, str(run), self._signer
        for item in batch:
            seq += 1
            record = Record.seal(item.body(seq, epoch), prev, signer)
            prev = record.hash
            records.append(record)
            att = record.attestation
            rows.append(
                {
                    "tenant": tenant,
                    "run_id": run_id,
                    "seq": seq,
                    "epoch": epoch,
                    "kind": item.kind,
                    "effect_key": None if item.effect_key is None else item.effect_key.hex(),
                    "prev_hash": bytes(record.prev_hash),
                    "hash": bytes(record.hash),
                    "raw": record.raw,
                    "key_id": None if att is None else att.key_id,
                    "signature": None if att is None else att.signature,
                    "case_id": None if item.case is None else str(item.case),
                }
            )
            if item.kind == _RUN_SEALED:
                conclusion = item.payload["outcome"]

        insert = hot_statements(self._dialect).insert_records
        conn = await session.connection()
        for start in range(0, len(rows), MAX_INSERT_ROWS):
            chunk = rows[start : start + MAX_INSERT_ROWS]
            try:
                written = (await conn.execute(insert, chunk)).scalars().all()
            except DBAPIError as exc:
                table = Journal.__table__
                if self._dialect.constraint(exc, table) == "journal_effect_started":
                    # Not expected (the INSERT skips these rows); kept so that this index,
                    # and only it, still maps to DuplicateEffectError if it ever raises.
                    raise DuplicateEffectError(next(iter(seen)) if seen else None) from exc
                raise
            if len(written) != len(chunk):
                # The exactly-once index skipped a row: its key had already started.
                done = set(written)
                for row in chunk:
                    if row["seq"] not in done:
                        raise DuplicateEffectError(EffectKey.from_hex(row["effect_key"]))

        if conclusion is not None:
            d = self._dialect
            ordinal = await d.conclusion_ordinal(await session.connection())
            stmt = d.insert(RunOutcome).values(
                tenant=tenant, run_id=run_id, outcome=conclusion, ordinal=ordinal
            )
            await session.execute(
                stmt.on_conflict_do_update(
                    index_elements=[RunOutcome.tenant, RunOutcome.run_id],
                    set_={"outcome": stmt.excluded.outcome, "ordinal": stmt.excluded.ordinal},
                )
            )
        return records

    async def append(
        self, epoch: int, batch: Sequence[Append], *, session: AsyncSession | None = None
    ) -> list[Record]:
        """Write a batch of one run's records in one transaction: all or nothing.

        Fence first (a run with a lease row accepts only its current epoch, and a released
        lease none), then sealed, then the writes. Returns the written records.
        """
        epoch = check_int(epoch, "epoch")
        items, run = self._check_batch(batch)
        if run is None:
            return []

        async def work(session: AsyncSession) -> list[Record]:
            state = await self._lock_run(session, run, epoch)
            return await self._write_batch(session, run, epoch, state, items)

        if session is not None:  # the host's transaction: the general unit, no commit
            return await self._unit(work, session=session)

        async def general() -> list[Record]:
            return await self._unit(work)

        # One round trip on PostgreSQL, one thread hop on SQLite; `general` when it cannot.
        return await fastpath.append(self, run, epoch, items, general)

    async def append_atomic(
        self,
        run: RunId,
        epoch: int,
        work: Callable[[AsyncSession], Awaitable[Iterable[Append]]],
        *,
        session: AsyncSession | None = None,
    ) -> list[Record]:
        """Run ``work(session)`` inside the append's transaction, then append what it returns.

        Fenced first, so a displaced writer's ``work`` never runs. ``work`` may use the
        host's ORM models or Core through the session; its changes commit with the records
        or not at all. An exception from ``work`` rolls back and propagates unchanged. A
        connection lost during COMMIT is :class:`CommitUnknownError`.
        """
        run = check_run(run)
        epoch = check_int(epoch, "epoch")
        if not callable(work):
            raise TypeError("work must be an async callable taking the AsyncSession")

        async def unit(session: AsyncSession) -> list[Record]:
            state = await self._lock_run(session, run, epoch)
            if state.sealed_outcome is not None:
                raise RunSealedError(run, state.sealed_outcome)
            anchor = await TransactionAnchor.take(session)
            try:
                async with self._schema_for(session, ours=False):  # the host's own tables
                    returned = await work(session)
                items, batch_run = self._check_batch(returned if returned is not None else [])
            except Exception as error:
                raise _Passthrough(error) from None
            if not await anchor.intact(session):
                # work committed, rolled back or closed: the mutex and the fence are gone.
                raise _Passthrough(TransactionEndedError(run))
            if batch_run is not None and batch_run != run:
                raise _Passthrough(
                    ValueError(f"work returned appends for {batch_run}, but the unit is for {run}")
                )
            await session.flush()
            return await self._write_batch(session, run, epoch, state, items)

        return await self._unit(unit, session=session)

    # -- reading -----------------------------------------------------------------------

    async def read(
        self, run: RunId, from_seq: int = 1, *, session: AsyncSession | None = None
    ) -> list[Record]:
        """The run's records from ``from_seq`` (inclusive; 0 reads like 1), hash-checked."""
        run = check_run(run)
        from_seq = check_int(from_seq, "from_seq")
        stmt = (
            select(*RECORD_COLUMNS)
            .where(self._key(run), Journal.seq >= from_seq)
            .order_by(Journal.seq)
        )

        async def unit(session: AsyncSession) -> list[Record]:
            return [record_from_row(row) for row in await session.execute(stmt)]

        return await self._unit(unit, read_only=True, session=session)

    def stream(
        self,
        run: RunId,
        from_seq: int = 1,
        *,
        page_size: int = 1000,
        session: AsyncSession | None = None,
    ) -> AsyncIterator[Record]:
        """``async for record in store.stream(run)``: :meth:`read` in bounded memory.

        Pages of ``page_size`` records by seq, each its own read (records never change once
        written, so the pages join up; records appended meanwhile are streamed too, up to
        the page that comes back short). Every record is hash-checked as by :meth:`read`.
        """
        run = check_run(run)
        from_seq = check_int(from_seq, "from_seq")
        page_size = check_int(page_size, "page_size", minimum=1, maximum=MAX_INSERT_ROWS * 100)

        async def records() -> AsyncIterator[Record]:
            async for page in self._pages(run, from_seq, page_size, session):
                for record in page:
                    yield record

        return records()

    async def _pages(
        self, run: RunId, from_seq: int, size: int, session: AsyncSession | None
    ) -> AsyncIterator[list[Record]]:
        """The run's records from ``from_seq`` in pages of ``size``, one read each."""
        stmt = (
            select(*RECORD_COLUMNS)
            .where(self._key(run), Journal.seq >= bindparam("from_seq"))
            .order_by(Journal.seq)
            .limit(size)
        )
        at = from_seq
        while True:

            async def unit(session: AsyncSession, at: int = at) -> list[Record]:
                rows = await session.execute(stmt, {"from_seq": at})
                return [record_from_row(row) for row in rows]

            page = await self._unit(unit, read_only=True, session=session)
            if page:
                yield page
            if len(page) < size:
                return
            at = page[-1].seq + 1

    async def read_runs(
        self, runs: Sequence[RunId], *, session: AsyncSession | None = None
    ) -> dict[RunId, RunRead]:
        """Many runs' records and seals in one transaction of two statements (audits' pages).

        A corrupt row ends its own run's records (``RunRead.error``), never the others'.
        Memory is the page: keep ``runs`` to a few hundred small runs.
        """
        runs = [check_run(r) for r in runs]
        by_id = {str(r): r for r in runs}
        stmt = (
            select(*RECORD_COLUMNS)
            .where(Journal.tenant == self.tenant, Journal.run_id.in_(list(by_id)))
            .order_by(Journal.run_id, Journal.seq)
        )

        async def unit(session: AsyncSession) -> dict[RunId, RunRead]:
            # Seals first, as verify does: a sealed run's records cannot change after it.
            seals = await self._log.seals_of(session, list(by_id))
            out = {r: RunRead([]) for r in runs}
            for run_id, (head, position) in seals.items():
                out[by_id[run_id]].sealed, out[by_id[run_id]].position = head, position
            for row in await session.execute(stmt):
                entry = out[by_id[row[6]]]
                if entry.error is None:
                    try:
                        entry.records.append(record_from_row(row))
                    except CorruptRecordError as error:
                        entry.error = error
            return out

        return await self._unit(unit, read_only=True, session=session)

    async def inclusion_paths_at(
        self, size: int, positions: Sequence[int], *, session: AsyncSession | None = None
    ) -> dict[int, list[Digest]]:
        """Inclusion paths of leaf ``positions`` at a past log ``size`` (an export's header)."""
        size = check_int(size, "size")
        positions = [check_int(p, "position") for p in positions]

        async def unit(session: AsyncSession) -> dict[int, list[Digest]]:
            return await self._log.paths_at(session, size, positions)

        return await self._unit(unit, read_only=True, session=session)

    async def head(self, run: RunId, *, session: AsyncSession | None = None) -> Head:
        """``Head(seq, hash)``; an unwritten run is ``Head(0, Digest.ZERO)``.

        The last row is re-hashed and checked against its columns like any read, so a
        forged head is :class:`CorruptRecordError`, not an answer.
        """
        run = check_run(run)
        stmt = select(*RECORD_COLUMNS).where(self._key(run)).order_by(Journal.seq.desc()).limit(1)

        async def unit(session: AsyncSession) -> Head:
            row = (await session.execute(stmt)).one_or_none()
            if row is None:
                return Head(0, Digest.ZERO)
            record = record_from_row(row)
            return Head(record.seq, record.hash)

        return await self._unit(unit, read_only=True, primary=True, session=session)

    async def case_history(
        self, case: CaseId, limit: int, *, session: AsyncSession | None = None
    ) -> list[Record]:
        """Every record whose body names ``case``, from any run, by run id then seq.

        Exact even if the ``case_id`` index lies: candidates are the rows whose column names
        the case *or* whose bytes contain its ULID (every body naming it does: a record is
        refused on read unless its ``case`` member appears in its bytes as written), each is
        hash-checked and compared with its columns, so a row whose ``case_id`` was added or
        removed is :class:`CorruptRecordError`, and a row that merely mentions the ULID is
        left out. The byte scan reads the tenant's journal: this costs a scan, not an index
        lookup (see the README's "Tamper evidence").
        """
        if isinstance(case, str):
            case = CaseId.parse(case)
        if not isinstance(case, CaseId):
            raise TypeError(f"case must be a CaseId, not {type(case).__name__}")
        limit = check_int(limit, "limit")
        ulid = case.ulid
        candidates = or_(
            Journal.case_id == str(case), self._dialect.contains_bytes(Journal.raw, ulid.encode())
        )
        page = max(limit, 100)

        async def unit(session: AsyncSession) -> list[Record]:
            found: list[Record] = []
            after: tuple[Any, Any] | None = None
            while len(found) < limit:
                stmt = select(*RECORD_COLUMNS).where(Journal.tenant == self.tenant, candidates)
                if after is not None:
                    stmt = stmt.where(
                        tuple_(Journal.run_id, Journal.seq)
                        > tuple_(literal(after[0]), literal(after[1]))
                    )
                rows = (
                    await session.execute(stmt.order_by(Journal.run_id, Journal.seq).limit(page))
                ).all()
                for row in rows:
                    record = record_from_row(row)
                    if record.body.get("case") == ulid:
                        found.append(record)
                        if len(found) == limit:
                            break
                if len(rows) < page:
                    break
                after = (rows[-1].run_id, rows[-1].seq)
            return found

        return await self._unit(unit, read_only=True, session=session)

    async def verify(
        self,
        run: RunId,
        verifier: Verifier | None = None,
        require_signature: bool = False,
        *,
        session: AsyncSession | None = None,
    ) -> Digest:
        """Check the whole run and return its head digest; the first bad seq is named.

        Contiguity from seq 1, links, hashes, every column against its body, exactly-once
        over the bodies (no two ``EffectStarted`` of one key), signatures when a verifier is
        given, and, for a sealed run, that its records end exactly at the sealed head (a
        run whose records were deleted, truncated or extended under its seal fails).
        """
        run = check_run(run)
        if require_signature and verifier is None:
            raise ValueError("require_signature needs a verifier that trusts the signers' keys")
        seal_stmt = select(RunSeal.chain_head).where(
            RunSeal.tenant == self.tenant, RunSeal.run_id == str(run)
        )

        async def seal_unit(session: AsyncSession) -> object:
            return (await session.execute(seal_stmt)).scalar_one_or_none()

        # The seal first: once it is there no append lands, so the records read next (later
        # snapshots, page by page) are the ones it sealed. Pages keep memory bounded.
        sealed = await self._unit(seal_unit, read_only=True, session=session)
        check = RunCheck(verifier, require_signature)
        async for page in self._pages(run, 1, STREAM_PAGE, session):
            check.feed(page)
        return check.finish(None if sealed is None else digest(sealed, check.last))

    async def audit_runs(
        self, after: object = None, limit: int = 1000, *, session: AsyncSession | None = None
    ) -> list[object]:
        """Every run of this tenant with a record or a seal, by stored run id, ascending.

        What an audit enumerates (``verify --all``, ``export --all``): the journal and the
        log themselves, not ``run_activity``, which is a side index that can lose a row.
        Values are the ``run_id`` columns *as stored*: one that is not a canonical run id
        is a finding of the audit, not an error here. Page with ``after`` = the last value.
        """
        limit = check_int(limit, "limit", minimum=1)
        journal = select(Journal.run_id).where(Journal.tenant == self.tenant)
        sealed = select(RunSeal.run_id).where(RunSeal.tenant == self.tenant)
        if after is not None:
            journal = journal.where(Journal.run_id > after)
            sealed = sealed.where(RunSeal.run_id > after)
        # Each side stops after `limit` distinct ids (an ordered index scan), then the union.
        j = journal.distinct().order_by(Journal.run_id).limit(limit).subquery()
        s = sealed.order_by(RunSeal.run_id).limit(limit).subquery()
        both = union(select(j.c.run_id), select(s.c.run_id)).subquery()
        stmt = select(both.c.run_id).order_by(both.c.run_id).limit(limit)

        async def unit(session: AsyncSession) -> list[object]:
            return list((await session.execute(stmt)).scalars())

        return await self._unit(unit, read_only=True, session=session)

    # -- leases ------------------------------------------------------------------------

    async def acquire(
        self, run: RunId, owner: str, ttl: int | timedelta, *, session: AsyncSession | None = None
    ) -> Lease:
        """Take, renew or take over the run's lease; ``ttl`` in whole seconds (at least 1).

        No lease: epoch 1. Expired or released: epoch + 1, for the same owner too. Live and
        ours: renewal, same epoch. Live and another's: :class:`LeaseHeldError`.
        """
        run = check_run(run)
        owner = check_label(owner, "owner")
        ttl = check_ttl(ttl)
        if self._now() + ttl > MAX_I64:
            raise ValueError(
                f"ttl {ttl} is too long: now + ttl must fit a signed 64-bit integer "
                f"(at most {MAX_I64 - self._now()} seconds from now)"
            )
        d = self._dialect

        async def unit(session: AsyncSession) -> Lease:
            for _ in range(8):
                now = self._now()
                stmt = d.insert(RunLease).values(
                    tenant=self.tenant,
                    run_id=str(run),
                    owner=owner,
                    epoch=1,
                    expires_at=now + ttl,
                )
                lapsed = RunLease.expires_at <= now
                stmt = stmt.on_conflict_do_update(
                    index_elements=[RunLease.tenant, RunLease.run_id],
                    set_={
                        "owner": stmt.excluded.owner,
                        "epoch": case((lapsed, RunLease.epoch + 1), else_=RunLease.epoch),
                        "expires_at": stmt.excluded.expires_at,
                    },
                    where=or_(lapsed, RunLease.owner == owner),
                ).returning(RunLease.epoch)
                epoch = (await session.execute(stmt)).scalar_one_or_none()
                if epoch is not None:
                    return Lease(run, owner, int(epoch))
                held = (
                    await session.execute(
                        select(RunLease.owner, RunLease.epoch, RunLease.expires_at).where(
                            RunLease.tenant == self.tenant, RunLease.run_id == str(run)
                        )
                    )
                ).one_or_none()
                if held is None:
                    continue
                expires = stored_int(held.expires_at, 0, "run_lease.expires_at")
                holder = stored_text(held.owner, 0, "run_lease.owner")
                if expires > now and holder != owner:
                    held_epoch = stored_int(held.epoch, 0, "run_lease.epoch")
                    raise LeaseHeldError(run, holder, held_epoch, expires - now)
            raise BackendError(f"the lease of {run} kept changing while acquiring it; retry")

        return await self._unit(unit, session=session)

    async def release_lease(
        self, run: RunId, epoch: int, *, session: AsyncSession | None = None
    ) -> None:
        """Free the lease now if ``epoch`` is current; otherwise a silent no-op. Idempotent.

        An update, never a delete: the epoch stays in the row, so the next acquire gets
        epoch + 1 and the released epoch stays fenced.
        """
        run = check_run(run)
        epoch = check_int(epoch, "epoch")
        stmt = (
            update(RunLease)
            .where(
                RunLease.tenant == self.tenant,
                RunLease.run_id == str(run),
                RunLease.epoch == epoch,
            )
            .values(owner=_RELEASED_OWNER, expires_at=0)
        )

        async def unit(session: AsyncSession) -> None:
            await session.execute(stmt)

        await self._unit(unit, session=session)

    # -- sealing and the log -----------------------------------------------------------

    async def seal(
        self, run: RunId, epoch: int, outcome: str, *, session: AsyncSession | None = None
    ) -> Digest:
        """Freeze the run into this tenant's Merkle log at its current head; return the head.

        Fenced like an append, and atomic with its head read under the run mutex. First seal
        wins: a re-seal changes nothing and returns the sealed head. The log's part (the
        position and the leaf) is :meth:`TenantLog.append <agentplane_journal.log.TenantLog>`.
        """
        run = check_run(run)
        epoch = check_int(epoch, "epoch")
        outcome = check_label(outcome, "outcome")

        async def unit(session: AsyncSession) -> Digest:
            state = await self._lock_run(session, run, epoch)
            if state.sealed_head is not None:
                raise _Rollback(digest(state.sealed_head, state.head_seq))
            leaf = (str(run), bytes(state.head_hash), self._now(), outcome)
            await self._log.append(session, [leaf])
            return state.head_hash

        return await self._unit(unit, session=session)

    async def sealed_runs(
        self, *, session: AsyncSession | None = None
    ) -> list[tuple[RunId, Digest]]:
        """This tenant's log in order, from one snapshot: ``(run, sealed chain head)`` per leaf.

        An auditor's index: position ``i`` is leaf ``i``, so every run's current head can be
        compared with the head the log committed to, in one read of the log.
        """
        return await self._unit(self._log.sealed_runs, read_only=True, session=session)

    async def checkpoint(self, *, session: AsyncSession | None = None) -> Checkpoint:
        """``Checkpoint(origin, size, root)`` over this tenant's sealed runs in log order."""
        return await self._unit(self._log.checkpoint, read_only=True, session=session)

    async def consistency_proof(
        self, old_size: int, *, session: AsyncSession | None = None
    ) -> list[Digest]:
        """RFC 6962 proof that the log of ``old_size`` is a prefix of the current one."""
        old_size = check_int(old_size, "old_size")

        async def unit(session: AsyncSession) -> list[Digest]:
            return await self._log.consistency_proof(session, old_size)

        return await self._unit(unit, read_only=True, session=session)

    async def audit_log(self, progress: Callable[[int, int], None] | None = None) -> LogAudit:
        """Re-derive the stored Merkle tree from the seals; the first bad position is named.

        Read-only, one transaction per :data:`~agentplane_journal.log.AUDIT_PAGE` leaves;
        ``progress(done, total)`` after each. ``verify --all`` runs it.
        """

        async def unit(fn: Callable[[AsyncSession], Awaitable[Any]], primary: bool = False) -> Any:
            return await self._unit(fn, read_only=True)

        return await self._log.audit(unit, progress)

    async def reindex_log(self, progress: Callable[[int, int], None] | None = None) -> LogAudit:
        """Rebuild the stored tree where it disagrees with the seals (resumable; see
        :meth:`TenantLog.reindex <agentplane_journal.log.TenantLog.reindex>`)."""

        async def unit(fn: Callable[[AsyncSession], Awaitable[Any]], primary: bool = False) -> Any:
            return await self._unit(fn)

        return await self._log.reindex(unit, progress)

    async def inclusion_proof(
        self, run: RunId, *, session: AsyncSession | None = None
    ) -> Inclusion | None:
        """``Inclusion`` for a sealed run from one snapshot of the log; ``None`` if never sealed."""
        run = check_run(run)

        async def unit(session: AsyncSession) -> Inclusion | None:
            return await self._log.inclusion_proof(session, run)

        return await self._unit(unit, read_only=True, session=session)

    # -- indexes -----------------------------------------------------------------------

    async def runs_by_outcome(
        self, outcome: str, limit: int, *, session: AsyncSession | None = None
    ) -> list[RunId]:
        """Runs whose latest ``RunSealed`` record says ``outcome``, newest conclusion first."""
        outcome = check_label(outcome, "outcome")
        limit = check_int(limit, "limit")
        stmt = (
            select(RunOutcome.run_id)
            .where(RunOutcome.tenant == self.tenant, RunOutcome.outcome == outcome)
            .order_by(RunOutcome.ordinal.desc())
            .limit(limit)
        )

        async def unit(session: AsyncSession) -> list[RunId]:
            rows = (await session.execute(stmt)).scalars()
            return [stored_run(r, "run_outcome.run_id") for r in rows]

        return await self._unit(unit, read_only=True, session=session)

    async def recent_runs(
        self,
        after: tuple[RunId, int] | None = None,
        limit: int = 100,
        *,
        session: AsyncSession | None = None,
    ) -> list[tuple[RunId, int]]:
        """``(run, updated_at)`` newest first, ties by run id descending; ``after`` pages."""
        limit = check_int(limit, "limit")
        where = [RunActivity.tenant == self.tenant]
        if after is not None:
            if not isinstance(after, tuple) or len(after) != 2:
                raise TypeError("after must be a (run, updated_at) pair as recent_runs returns")
            after_run, after_at = check_run(after[0]), check_int(after[1], "after's updated_at")
            where.append(
                tuple_(RunActivity.updated_at, RunActivity.run_id)
                < tuple_(literal(after_at), literal(str(after_run)))
            )
        stmt = (
            select(RunActivity.run_id, RunActivity.updated_at)
            .where(*where)
            .order_by(RunActivity.updated_at.desc(), RunActivity.run_id.desc())
            .limit(limit)
        )

        async def unit(session: AsyncSession) -> list[tuple[RunId, int]]:
            return [
                (
                    stored_run(r[0], "run_activity.run_id"),
                    stored_int(r[1], 0, "run_activity.updated_at"),
                )
                for r in await session.execute(stmt)
            ]

        return await self._unit(unit, read_only=True, session=session)

    # -- cancellation ------------------------------------------------------------------

    async def request_cancel(
        self, run: RunId, actor: str, reason: str, *, session: AsyncSession | None = None
    ) -> bool:
        """Record a stop request (no lease needed); ``True`` if recorded, ``False`` if one was."""
        run = check_run(run)
        actor = check_label(actor, "actor")
        reason = check_text(reason, "reason", allow_empty=True)
        d = self._dialect

        async def unit(session: AsyncSession) -> bool:
            stmt = (
                d.insert(RunCancel)
                .values(
                    tenant=self.tenant,
                    run_id=str(run),
                    actor=actor,
                    reason=reason,
                    requested_at=self._now(),
                )
                .on_conflict_do_nothing(index_elements=[RunCancel.tenant, RunCancel.run_id])
                .returning(RunCancel.run_id)
            )
            return (await session.execute(stmt)).first() is not None

        return await self._unit(unit, session=session)

    async def cancellation(
        self, run: RunId, *, session: AsyncSession | None = None
    ) -> Cancellation | None:
        """The recorded stop request, or ``None``."""
        run = check_run(run)
        stmt = select(RunCancel.actor, RunCancel.reason).where(
            RunCancel.tenant == self.tenant, RunCancel.run_id == str(run)
        )

        async def unit(session: AsyncSession) -> Cancellation | None:
            row = (await session.execute(stmt)).one_or_none()
            if row is None:
                return None
            actor = stored_text(row.actor, 0, "run_cancel.actor")
            return Cancellation(actor, stored_text(row.reason, 0, "run_cancel.reason"))

        return await self._unit(unit, read_only=True, primary=True, session=session)
