"""The journal store: agentplane's store contract over one AsyncSession, on PostgreSQL or SQLite.

This module is the repository: the only code that builds statements. It is dialect-agnostic;
the few backend differences live in :mod:`agentplane_journal.db.dialect`.

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
  constraint becomes :class:`DuplicateEffectError`, and the primary key refusing a chain
  position (a writer that bypassed the run mutex) is :class:`AppendConflictError`, both by the
  constraint the database names (:mod:`agentplane_journal.db.violations`).
* **At-most-once admission** is ``run_admission``'s primary key, claimed in the append's own
  transaction (:mod:`agentplane_journal.journal.admissions`).
* **A fresh lease** is one ``INSERT .. ON CONFLICT DO UPDATE .. WHERE`` statement
  (:mod:`agentplane_journal.journal.leases`, which says why exactly one first acquire gets epoch 1).
* **The log** (dense commit-ordered positions, proofs from one snapshot) is
  :mod:`agentplane_journal.journal.log`'s; a seal takes its log counter after the run mutex.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from agentplane_journal.backends import dispatch
from agentplane_journal.backends.head_cache import HeadCache
from agentplane_journal.core.append import Append
from agentplane_journal.core.checks import (
    check_int,
    check_key_id,
    check_label,
    check_run,
    check_text,
)
from agentplane_journal.core.ids import DEFAULT_TENANT, Digest, RunId, validate_tenant
from agentplane_journal.core.profile import WireProfile
from agentplane_journal.core.record import Record
from agentplane_journal.core.signing import Signer
from agentplane_journal.core.values import Cancellation
from agentplane_journal.db.hotpath import HotPath
from agentplane_journal.db.statements import digest
from agentplane_journal.db.txcontrol import refusing_transaction_control
from agentplane_journal.db.unit import Passthrough, Rollback, TransactionAnchor
from agentplane_journal.errors import RunSealedError, TransactionEndedError
from agentplane_journal.journal.admissions import Admissions
from agentplane_journal.journal.audits import AuditReads
from agentplane_journal.journal.cosignatures import Cosignatures
from agentplane_journal.journal.guarded import GuardedAppends
from agentplane_journal.journal.leases import RunControl
from agentplane_journal.journal.log import TenantLog
from agentplane_journal.journal.profiles import Profiles
from agentplane_journal.journal.reads import RunReads
from agentplane_journal.journal.step_transactions import StepTransactions
from agentplane_journal.journal.writes import MAX_INSERT_ROWS, RunWrites

__all__ = ["MAX_INSERT_ROWS", "SqlJournalStore"]


class SqlJournalStore(
    RunReads,
    AuditReads,
    RunControl,
    Admissions,
    Profiles,
    Cosignatures,
    GuardedAppends,
    StepTransactions,
    RunWrites,
):
    """agentplane's journal store over SQLAlchemy's async engine (PostgreSQL or SQLite).

    Build it over an existing ``AsyncEngine`` (a host application's own works; SQLite's
    write serialisation is installed on it) or open one with :meth:`connect`. The store
    never creates or alters tables: run ``agentplane-journal upgrade`` (or
    ``alembic upgrade head``) first; an out-of-date database is refused with
    :class:`SchemaOutOfDateError` before the first statement.

    A handle made by :meth:`for_tenant`, or constructed for a tenant other than
    ``default``, names its log ``{origin}/{tenant}``; the default handle's log is ``origin``.

    ``profile`` is the wire profile the handle writes in: ``"agentplane-0.4"`` (agentplane
    0.4.0's bytes) or ``"agentplane-0.22"`` (0.22.0's: record v1, ``RunAdmitted.canon``,
    RFC 8785), or ``None`` (the default): the journal's own, ``agentplane-0.4`` for a journal
    that never recorded one. A tenant's profile is recorded in the database, and a handle
    opened in the other one is refused with :class:`WireProfileError` before its first
    statement (:mod:`agentplane_journal.journal.profiles`; :meth:`migrate_profile` is the
    explicit way across). :attr:`profile` says which, ``profile.append(...)`` builds appends
    in it.

    ``read_engine`` (a streaming replica) takes the audit reads: ``read``, ``verify``,
    ``case_history``, the log, checkpoints and proofs, and the run indexes. A replica may be
    behind, so what it answers is an older state, never a wrong one (its checkpoint is a
    prefix of the primary's). ``head`` and ``cancellation`` stay on the primary: a writer
    acts on them (reconciling after :class:`CommitUnknownError`, stopping a run).

    ``group_commit`` (on by default): appends that arrive while a commit is in flight share
    the next one, so concurrent writers in one process pay for one commit per group instead
    of one each, and each append keeps its own outcome and its own error. SQLite: one
    transaction, each append in its own savepoint. PostgreSQL: one statement for appends to
    distinct runs, each run checked on its own
    (:mod:`agentplane_journal.backends.postgresql.writer`). A lone
    writer's append is a group of one: the same transaction or statement as without it, so
    its latency does not change. ``group_commit=False`` commits each append on its own
    (SQLite: appends still queue in the process, one transaction at a time; PostgreSQL: up
    to ``backends.postgresql.writer.UNGROUPED_CONNECTIONS`` statements in flight).

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
        profile: WireProfile | str | None = None,
        read_your_writes: bool = True,
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
            read_your_writes=read_your_writes,
            _shared=_shared,
        )
        shared = self._shared
        writer = shared.writer
        if writer is None:
            writer = shared.writer = dispatch.hot_path(
                self.dialect,
                bind=self._bind,
                engine=shared.engine,
                heads=HeadCache(),
                group_commit=bool(group_commit),
                turn=shared.turn,
                parks=lambda: shared.owns_engine,  # set once `connect` opened the engine
            )
        # The hot append path, typed (db/hotpath.py): one per store, shared by its handles.
        self._writer: HotPath = writer
        self._base_origin = origin
        self._signer = signer
        self._request_profile(profile)
        #: The name of this tenant's log in checkpoint notes.
        # A handle for a tenant (for_tenant, or a constructor tenant other than the default)
        # names its log "{origin}/{tenant}", as agentplane does.
        named = _named or self.tenant != DEFAULT_TENANT
        self.origin: str = f"{origin}/{self.tenant}" if named else origin
        # This tenant's Merkle log (package-internal: the bulk writer, export and tiles
        # append to it and read it inside their own units).
        self.tenant_log = TenantLog(self.dialect, self.tenant, self.origin)

    @property
    def _log(self) -> TenantLog:
        """The old private name of :attr:`tenant_log`, kept for the tests that reach it."""
        return self.tenant_log

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
        profile: WireProfile | str | None = None,
        read_your_writes: bool = True,
        check_at_open: bool = True,
    ) -> SqlJournalStore:
        """Open a store from a URL (``postgresql://…`` or ``sqlite:///…``; async drivers).

        The engine is the store's own and :meth:`close` disposes of it. The schema revision
        is checked here, so a database that needs ``upgrade`` fails now, not mid-run.
        ``read_url`` (a replica) takes the audit reads; see the README's "Production topology".
        With it, the store reads its own acknowledged writes (``read_your_writes``): an audit
        read goes to the replica once it has replayed them, to the primary until then.
        ``read_your_writes=False`` is for pure audit readers that accept the replica's lag.
        ``schema``: the PostgreSQL schema the tables were migrated into (``upgrade(url,
        schema=...)``); none means the default schema. ``profile``: the wire profile, checked
        against the tenant's here (see the class). ``check_at_open=False``: the revision and
        the profile are checked before the first statement instead, for a caller that migrates
        through the store's engine first (``JournalSaver.setup()``).
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
            profile=profile,
            read_your_writes=read_your_writes,
            check_at_open=check_at_open,
        )

    def for_tenant(self, name: str, *, profile: WireProfile | str | None = None) -> SqlJournalStore:
        """A handle whose every statement carries ``name``; its log is ``{origin}/{name}``.

        ``profile``: that tenant's wire profile (``None``: its own), checked before the
        handle's first statement; each tenant's journal has its own.
        """
        return SqlJournalStore(
            self._shared.engine,
            tenant=validate_tenant(name),
            origin=self._base_origin,
            signer=self._signer,
            clock=self._clock,
            profile=profile,
            _shared=self._shared,
            _named=True,
        )

    def remember_head(self, run: RunId, record: Record) -> None:
        """Take ``record`` as the run's head, just read under a lease held here (a resumed
        run's), so its next append goes by the hot path. Package-internal, and only a hint
        (:class:`~agentplane_journal.backends.head_cache.HeadCache`): the append statement
        checks the head under the run mutex, and a wrong one costs a general unit of work."""
        self._writer.remember(self.tenant, str(check_run(run)), record)

    def handle_options(self) -> dict[str, Any]:
        """The constructor arguments of another handle onto this one: the same tenant, log
        name, signer, clock and shared state (engine, writer, schema check). Package-internal:
        :class:`~agentplane_journal.keyring.store.SealingStore` wraps a store with it."""
        return {
            "tenant": self.tenant,
            "origin": self._base_origin,
            "signer": self._signer,
            "clock": self._clock,
            "_shared": self._shared,
            "_named": self.origin != self._base_origin,
        }

    def is_shared(self) -> bool:
        """Whether several processes may append to this store's durable state at once.

        agentplane's runtime asks this to refuse what is unsafe on a shared store (a
        process-local lock beside it), so the answer is about the database, never about this
        handle: PostgreSQL ``True``; a SQLite file ``True`` as well (processes on one file
        append safely, each transaction holding the file's write lock from ``BEGIN
        IMMEDIATE``); an in-memory SQLite database ``False`` (no other process can reach
        it). Decided by the dialect object from the engine's URL; no statement runs.
        """
        return self.dialect.is_shared(self._shared.engine.url)

    async def append(
        self, epoch: int, batch: Sequence[Append], *, session: AsyncSession | None = None
    ) -> list[Record]:
        """Write a batch of one run's records in one transaction: all or nothing.

        Fence first (a run with a lease row accepts only its current epoch, and a released
        lease none), then sealed, then the writes. Returns the written records.
        """
        answer = await self.append_batch(epoch, batch, session=session, unless_cancelled=False)
        assert not isinstance(answer, Cancellation)
        return answer

    async def append_unless_cancelled(
        self, epoch: int, batch: Sequence[Append]
    ) -> list[Record] | Cancellation:
        """:meth:`append`, unless the run has a stop request (:meth:`request_cancel`): then
        nothing is written and the request is returned. The check and the write are one
        transaction (an effect's start and its step boundary's cancellation check)."""
        return await self.append_batch(epoch, batch, session=None, unless_cancelled=True)

    # -- the caller's work in the append's transaction ----------------------------------

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
        connection lost during COMMIT is :class:`CommitUnknownError`. ``work`` may not end
        the transaction: ``session.commit()``/``rollback()``/``close()`` is
        :class:`TransactionEndedError` after it returns, and a transaction-control statement
        sent as SQL (``COMMIT``, ``ROLLBACK``, ``SAVEPOINT``, ...) is refused before it
        reaches the database (:mod:`agentplane_journal.db.txcontrol`).
        """
        run = check_run(run)
        epoch = check_int(epoch, "epoch")
        if not callable(work):
            raise TypeError("work must be an async callable taking the AsyncSession")

        async def unit(session: AsyncSession) -> list[Record]:
            state = await self.lock_run(session, run, epoch)
            if state.sealed_outcome is not None:
                raise RunSealedError(run, state.sealed_outcome)
            anchor = await TransactionAnchor.take(session)
            try:
                # A COMMIT, ROLLBACK, SAVEPOINT... that work sends as SQL text is refused
                # before it reaches the database (db/txcontrol.py): SQLAlchemy would not see
                # it, and the anchor below could not tell.
                with refusing_transaction_control(anchor.connection, run) as refused:
                    async with self._schema_for(session, ours=False):  # the host's own tables
                        returned = await work(session)
                items, batch_run = self.check_batch(returned if returned is not None else [])
            except Exception as error:
                raise Passthrough(error) from None
            if refused:  # work caught the refusal and went on: the batch is refused all the same
                raise Passthrough(TransactionEndedError(run, refused[0]))
            if not await anchor.intact(session):
                # work committed, rolled back or closed: the mutex and the fence are gone.
                raise Passthrough(TransactionEndedError(run))
            if batch_run is not None and batch_run != run:
                raise Passthrough(
                    ValueError(f"work returned appends for {batch_run}, but the unit is for {run}")
                )
            await session.flush()
            return await self.write_batch(session, run, epoch, state, items)

        return await self.unit(unit, session=session, run=run)

    # -- sealing and the log -----------------------------------------------------------

    async def seal(
        self, run: RunId, epoch: int, outcome: str, *, session: AsyncSession | None = None
    ) -> Digest:
        """Freeze the run into this tenant's Merkle log at its current head; return the head.

        Fenced like an append, and atomic with its head read under the run mutex. First seal
        wins: a re-seal changes nothing and returns the sealed head. The log's part (the
        position and the leaf) is :meth:`TenantLog.append
        <agentplane_journal.journal.log.TenantLog>`.
        """
        run = check_run(run)
        epoch = check_int(epoch, "epoch")
        outcome = check_label(outcome, "outcome")

        async def unit(session: AsyncSession) -> Digest:
            state = await self.lock_run(session, run, epoch)
            if state.sealed_head is not None:
                raise Rollback(digest(state.sealed_head, state.head_seq))
            leaf = (str(run), bytes(state.head_hash), self.now(), outcome)
            await self.tenant_log.append(session, [leaf])
            return state.head_hash

        return await self.unit(unit, session=session, run=run)
