"""The run-changing unit of work: what every transaction that changes a run does, in one place.

An append, an admission, a conclusion, ``append_atomic``, a guarded append and a bulk write
(:mod:`agentplane_journal.journal.bulk`: restore, ``write_ops``) all do the same things in the
same order, inside one transaction: take the run mutex and fence (:meth:`RunWrites.lock_run`,
judged by :func:`run_state_from`), check the batch (:meth:`RunWrites.check_batch`), refuse a
record of the other wire profile, chain and sign the batch onto the head
(:meth:`RunWrites.chain_rows`), insert the rows and map a refused INSERT to the contract's error
(:meth:`RunWrites.insert_refused`), then claim admissions and record the outcome
(:meth:`RunWrites.after_rows`). Keeping them here, under names without underscores, makes them
the package's internal API for writing: :mod:`~agentplane_journal.journal.store` is the facade
that opens the units, and the bulk writer, restore and the guarded appends call these rather
than the store's private members. An append's route is :meth:`RunWrites.append_batch`: the
hot path (:class:`agentplane_journal.db.hotpath.HotPath`, the store's writer) does the same
in its own SQL, and hands a batch it cannot take back to a general unit that calls these.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.core.admission import claimed_keys
from agentplane_journal.core.append import EFFECT_STARTED, RUN_SEALED, Append
from agentplane_journal.core.batch import COLUMNS, chain_batch, fenced
from agentplane_journal.core.checks import check_int, check_label
from agentplane_journal.core.ids import Digest, EffectKey, RunId
from agentplane_journal.core.profile import WireProfile
from agentplane_journal.core.record import Record
from agentplane_journal.core.signing import DOMAIN_RECORD, Signer, signing_hash
from agentplane_journal.core.values import Cancellation
from agentplane_journal.db import selfwait
from agentplane_journal.db.hotpath import CancelRequested, HotPath
from agentplane_journal.db.models import RunOutcome
from agentplane_journal.db.statements import (
    hot_statements,
    record_from_row,
    stored_int,
    stored_text,
)
from agentplane_journal.db.unit import Repository
from agentplane_journal.db.violations import Collision, append_raced, journal_collision
from agentplane_journal.errors import DuplicateEffectError, RunSealedError

__all__ = ["MAX_INSERT_ROWS", "Chained", "RunState", "RunWrites", "run_state_from"]

#: Records per multi-row INSERT. Far under both backends' bound-parameter limits
#: (12 parameters a row); a batch larger than this costs one more statement per chunk.
MAX_INSERT_ROWS = 1000

#: A batch chained onto its run's head (:meth:`RunWrites.chain_rows`): the records, their
#: rows, the conclusion (if a ``RunSealed``), the effect keys started.
Chained = tuple[list[Record], list[dict[str, Any]], str | None, set[EffectKey]]


# -- what the transaction learns under the run mutex ------------------------------------


@dataclass(frozen=True, slots=True)
class RunState:
    """What a run-changing transaction learns once it holds the run mutex."""

    sealed_outcome: str | None
    sealed_head: bytes | None
    head_seq: int
    head_hash: Digest


def run_state_from(run: RunId, epoch: int, row: tuple[Any, ...]) -> RunState:
    """Fence ``epoch`` and read the run's state from its ``run_state`` row (lease epoch and
    owner, seal outcome and head, then the head record's columns or NULLs), as read under
    the run mutex.

    :meth:`RunWrites.lock_run` reads one run's row; :mod:`agentplane_journal.journal.bulk`
    reads many runs' rows at once. Both hand each row here, so the fence, the seal and the
    re-hashed head are judged by the same code whichever path wrote the records."""
    lease_epoch, lease_owner, sealed_outcome, sealed_head = row[:4]
    if lease_epoch is not None:
        lease_epoch = stored_int(lease_epoch, 0, "run_lease.epoch")
        lease_owner = stored_text(lease_owner, 0, "run_lease.owner")
        # A released lease fences every epoch until someone acquires it again.
        refused = fenced(run, epoch, lease_epoch, lease_owner)
        if refused is not None:
            raise refused
    if sealed_outcome is not None:
        sealed_outcome = stored_text(sealed_outcome, 0, "run_seal.outcome")
    if row[4] is None:
        head_seq, head_hash = 0, Digest.ZERO
    else:
        # The head is re-hashed and checked against its columns in this transaction: a
        # forged head is refused here, never chained onto or sealed into the log.
        head = record_from_row(row[4:])
        head_seq, head_hash = head.seq, head.hash
    return RunState(
        sealed_outcome=sealed_outcome,
        sealed_head=sealed_head,
        head_seq=head_seq,
        head_hash=head_hash,
    )


# -- the unit of work ---------------------------------------------------------------------


class RunWrites(Repository):
    """A base of :class:`~agentplane_journal.journal.store.SqlJournalStore`: the steps of a
    run-changing transaction, each called inside a unit the caller opened (no unit, no
    commit of its own). Package-internal: not part of the public API."""

    if TYPE_CHECKING:  # SqlJournalStore's own; declared for the type checker
        _signer: Signer | None

        @property
        def profile(self) -> WireProfile: ...

        _writer: HotPath

        async def _cancel_request(
            self, session: AsyncSession, run: RunId
        ) -> Cancellation | None: ...

        async def _claim_admissions(
            self, session: AsyncSession, run: RunId, items: Sequence[Append]
        ) -> None: ...

    # -- the run mutex, the fence and the head ----------------------------------------

    async def lock_run(
        self, session: AsyncSession, run: RunId, epoch: int, *, held: bool = False
    ) -> RunState:
        """Take the run mutex (unless ``held``: this transaction took it already), then
        fence; return what the transaction needs to know."""
        params = {"tenant": self.tenant, "run_id": str(run), "now": self.now()}
        statements = hot_statements(self.dialect)
        # Core statements on the session's own connection (same transaction), skipping the
        # ORM's statement handling, which the append path does not need.
        conn = await session.connection()
        if not held:
            await conn.execute(statements.run_mutex, params)
        if conn.sync_connection is not None:  # so that this task never waits on it itself
            selfwait.hold(conn.sync_connection, self.tenant, str(run))
        # A later statement than the lock, so a fresh snapshot that sees the previous
        # writer's commit; see ``_HotStatements.run_state``.
        row = (await conn.execute(statements.run_state, params)).one()
        return run_state_from(run, epoch, tuple(row))

    # -- appending ---------------------------------------------------------------------

    def check_batch(self, batch: Iterable[Append]) -> tuple[list[Append], RunId | None]:
        """The batch as a list and its run (``None`` when empty), refused before any statement
        when an item is not an ``Append``, a ``RunSealed`` lacks its outcome, or it spans runs."""
        items = list(batch)
        for i, item in enumerate(items):
            if not isinstance(item, Append):
                raise TypeError(f"batch[{i}] must be an Append, not {type(item).__name__}")
            if item.kind == RUN_SEALED:
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

    @staticmethod
    def refuse_other_profile(batch: Iterable[Append], profile: WireProfile) -> None:
        """A record in another wire profile than the journal's is a ``ValueError``, before
        anything is written (:meth:`WireProfile.refusal` says why and what to do)."""
        for item in batch:
            refused = profile.refusal(item)
            if refused is not None:
                raise ValueError(refused)

    async def write_batch(
        self, session: AsyncSession, run: RunId, epoch: int, state: RunState, batch: list[Append]
    ) -> list[Record]:
        """Seal, sign and insert ``batch`` after the fence, under the run mutex."""
        chained = self.chain_rows(run, epoch, state, batch)
        if chained is None:
            return []
        records, rows, conclusion, seen = chained
        insert = hot_statements(self.dialect).insert_records
        conn = await session.connection()
        for start in range(0, len(rows), MAX_INSERT_ROWS):
            chunk = rows[start : start + MAX_INSERT_ROWS]
            try:
                written: Sequence[int] = (await conn.execute(insert, chunk)).scalars().all()
            except DBAPIError as exc:
                raise self.insert_refused(exc, run, state.head_seq + 1, seen) from exc
            if len(written) != len(chunk):
                # The exactly-once index skipped a row: its key had already started.
                done = set(written)
                for row in chunk:
                    if row["seq"] not in done:
                        raise DuplicateEffectError(EffectKey.from_hex(row["effect_key"]))
        await self.after_rows(session, run, batch, conclusion)
        return records

    def chain_rows(
        self,
        run: RunId,
        epoch: int,
        state: RunState,
        batch: list[Append],
        profile: WireProfile | None = None,
    ) -> Chained | None:
        """The checks before any write, then ``batch`` sealed and signed onto the head: the
        records, their rows, the conclusion (if a ``RunSealed``), the effect keys started.
        ``None`` for an empty batch. No statement. ``profile``: the journal's unless a
        restore names the one the records were written in (journal/bulk.py)."""
        if state.sealed_outcome is not None:
            raise RunSealedError(run, state.sealed_outcome)
        if not batch:
            return None
        seen: set[EffectKey] = set()
        for item in batch:
            if item.kind == EFFECT_STARTED and item.effect_key is not None:
                if item.effect_key in seen:
                    raise DuplicateEffectError(item.effect_key)
                seen.add(item.effect_key)
        profile = profile or self.profile
        self.refuse_other_profile(batch, profile)
        records, row_tuples, conclusion = chain_batch(
            self.tenant,
            str(run),
            epoch,
            state.head_seq,
            state.head_hash,
            batch,
            self._signer,
            profile,
        )
        rows = [dict(zip(COLUMNS, row, strict=True)) for row in row_tuples]
        return records, rows, conclusion, seen

    def attest(self, hash_: bytes) -> tuple[str | None, bytes | None]:
        """The ``(key_id, signature)`` columns ``chain_rows`` writes for a record of hash
        ``hash_`` (the store's signer's, as :meth:`Record.seal` signs; none without one), for
        rows chained before the transaction (journal/bulk.py ``write_rows``)."""
        signer = self._signer
        if signer is None:
            return None, None
        return signer.key_id, signer.sign(signing_hash(DOMAIN_RECORD, Digest(hash_)))

    def insert_refused(
        self, exc: DBAPIError, run: RunId, seq: int, seen: set[EffectKey]
    ) -> BaseException:
        """What the records' INSERT failing with ``exc`` means (``run``'s rows from ``seq``)."""
        what, name = journal_collision(self.dialect, exc) or (None, "")
        if what is Collision.CHAIN_POSITION:
            # A record already holds one of these positions: another writer bypassed
            # the run mutex (raw SQL, or append_atomic's work inserting records).
            return append_raced(run, seq, name, exc)
        if what is Collision.EFFECT_STARTED and seen:
            # Not expected (the INSERT skips these rows); kept so that this index,
            # and only it, still maps to DuplicateEffectError if it ever raises (it
            # cannot without an EffectStarted key in the batch).
            return DuplicateEffectError(next(iter(seen)))
        return exc

    async def after_rows(
        self, session: AsyncSession, run: RunId, batch: list[Append], conclusion: str | None
    ) -> None:
        """What an append writes once its records are in: admission claims, the outcome."""
        # A keyed RunAdmitted claims its key here, in this transaction (journal/admissions.py).
        await self._claim_admissions(session, run, batch)
        if conclusion is not None:
            d = self.dialect
            ordinal = await d.conclusion_ordinal(await session.connection())
            stmt = d.insert(RunOutcome).values(
                tenant=self.tenant, run_id=str(run), outcome=conclusion, ordinal=ordinal
            )
            await session.execute(
                stmt.on_conflict_do_update(
                    index_elements=[RunOutcome.tenant, RunOutcome.run_id],
                    set_={"outcome": stmt.excluded.outcome, "ordinal": stmt.excluded.ordinal},
                )
            )

    # -- the route of an append ------------------------------------------------------

    async def append_batch(
        self,
        epoch: int,
        batch: Sequence[Append],
        *,
        session: AsyncSession | None,
        unless_cancelled: bool,
    ) -> list[Record] | Cancellation:
        """``append``'s and ``append_unless_cancelled``'s route: the hot path (one statement on
        PostgreSQL, one thread hop on SQLite) for a plain batch, else the general unit (the
        steps above, in a unit of work; in the host's transaction with ``session``)."""
        epoch = check_int(epoch, "epoch")
        items, run = self.check_batch(batch)
        if run is None:
            return []

        async def work(session: AsyncSession) -> list[Record]:
            state = await self.lock_run(session, run, epoch)
            if unless_cancelled:
                request = await self._cancel_request(session, run)
                if request is not None:  # rolled back (nothing written), then answered
                    raise CancelRequested(request.actor, request.reason)
            return await self.write_batch(session, run, epoch, state, items)

        if session is not None:  # the host's transaction: the general unit, no commit
            return await self.unit(work, session=session)

        async def general() -> list[Record]:
            return await self.unit(work, run=run)

        self.refuse_own_wait(run)
        await self._ready()
        profile = self.profile
        self.refuse_other_profile(items, profile)
        keys = [
            i.effect_key for i in items if i.kind == EFFECT_STARTED and i.effect_key is not None
        ]
        if (
            len(set(keys)) != len(keys)
            or any(i.kind == RUN_SEALED for i in items)
            or claimed_keys(items)
        ):
            # Rare batches: a duplicate in the batch, a conclusion, or an admission claiming
            # a key (once per run; the claim lives in the general unit only).
            return await general()
        # One round trip on PostgreSQL, one thread hop on SQLite; `general` when it cannot.
        try:
            records: list[Record] = await self._writer.append(
                self.tenant,
                self._signer,
                self.now(),
                run,
                epoch,
                items,
                keys,
                general,
                profile,
                unless_cancelled=unless_cancelled,
            )
        except CancelRequested as request:
            return Cancellation(request.actor, request.reason)
        finally:
            self._wrote()  # ended: read-your-writes covers it from now on
        return records
