"""A journal whose payloads are sealed under erasure scopes, and the erasure itself.

:class:`SealedJournal` wraps a :class:`~agentplane_journal.SqlJournalStore`: ``append``
seals each record's payload fields under the caller's scope (a run, a case, a tenant, a
conversation: :meth:`SealedJournal.scope` derives ``{tenant}/{unit}``), ``read`` opens them
where the key exists and returns :class:`~agentplane_journal.core.sealed.Erased` where it
was destroyed. The store hashes what it is given, so the chain, the log, exports and proofs
commit to the ciphertext and verify with no key at all, before and after an erasure.

:meth:`SealedJournal.erase` destroys the scope's wrapping key and journals the erasure
(scope, who, when, why, and for a run scope the run's head it covered) as a run of its own,
sealed into the tenant's log, so the erasure is provable by anyone who can verify the log.
A sealing write holds the scope's lock shared from its "not erased" check to its commit and
an erasure holds it exclusively (PostgreSQL advisory locks; SQLite's write lock), so no
write under a scope lands after its erasure, on any instance.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.core.append import Append
from agentplane_journal.core.envelope import ScopeErasedError
from agentplane_journal.core.ids import RunId
from agentplane_journal.core.record import Record
from agentplane_journal.core.sealed import scope as derive_scope
from agentplane_journal.errors import CorruptRecordError, RunSealedError
from agentplane_journal.journal.erasures import erasure_run, lock_scope
from agentplane_journal.keyring.ring import Keyring, OpenedRecord

__all__ = [
    "ERASED_OUTCOME",
    "ERASURE_CAPABILITY",
    "Erasure",
    "SealedJournal",
    "journaled_erasures",
]

ERASURE_CAPABILITY = "agentplane-journal.erasure"
"""The ``capability`` of the run an erasure is journaled in."""
ERASED_OUTCOME = "erased"
"""The outcome the erasure run is sealed into the log with."""

_LABEL = {"provenance": [], "trust": "trusted", "sensitivity": "internal"}


@dataclass(frozen=True, slots=True)
class Erasure:
    """A journaled erasure: the scope, who asked, when (unix seconds), why, the run it is
    journaled in, and for a run scope the head of that run it covered."""

    scope: str
    by: str
    at: float
    reason: str
    run: RunId
    covered_run: str | None = None
    covered_through_seq: int | None = None


class _Already(Exception):
    """The scope was erased before (an erasure is idempotent)."""


class SealedJournal:
    """A :class:`~agentplane_journal.SqlJournalStore` whose payloads are sealed.

    Every other store method is the store's own (``store.verify``, ``store.checkpoint``,
    exports, ...): they read ciphertext and need no key.
    """

    def __init__(self, store: Any, keyring: Keyring) -> None:
        self.store = store
        self.keyring = keyring

    def __repr__(self) -> str:
        return f"SealedJournal(tenant={self.tenant!r}, {self.keyring!r})"

    @property
    def tenant(self) -> str:
        tenant: str = self.store.tenant
        return tenant

    def scope(self, unit: str | RunId) -> str:
        """The erasure scope of ``unit`` (a run, a case, a conversation id) in this tenant."""
        return derive_scope(self.tenant, str(unit))

    # -- writing and reading -------------------------------------------------------------

    async def append(self, epoch: int, batch: Sequence[Append], *, scope: str) -> list[Record]:
        """Seal ``batch``'s payloads under ``scope`` and append them in one transaction.

        :class:`ScopeErasedError` when ``scope`` was erased (checked under the scope's
        lock, so a write never lands after an erasure that reported success). Returns the
        records as written (sealed); :meth:`read` opens them.
        """
        items = list(batch)
        if not items:
            return []
        sealed = await self.sealed(items, scope)
        marker = erasure_run(self.tenant, scope)

        async def work(session: AsyncSession) -> list[Append]:
            await lock_scope(self.store, session, scope, exclusive=False)
            erased = await self._erasure_in(session, marker)
            if erased is not None:
                raise ScopeErasedError(scope, erased.at, erased.reason)
            return sealed

        records: list[Record] = await self.store.append_atomic(items[0].run, epoch, work)
        return records

    async def sealed(self, items: Sequence[Append], scope: str) -> list[Append]:
        """``items`` with their payloads sealed under ``scope`` (a fresh data key each)."""
        return [
            await self.keyring.seal_append(item, tenant=self.tenant, scope=scope) for item in items
        ]

    async def read(
        self, run: RunId, from_seq: int = 1, *, scope: str | None = None
    ) -> list[OpenedRecord]:
        """The run's records with their payloads opened (``Erased`` where the key is gone).

        ``scope``: refuse envelopes sealed under any other scope. Damage or a moved envelope
        raises :class:`~agentplane_journal.core.envelope.EnvelopeRefusedError`.
        """
        records = await self.store.read(run, from_seq)
        return [await self.keyring.open_record(self.tenant, r, scope=scope) for r in records]

    # -- erasure -------------------------------------------------------------------------

    async def _erasure_in(self, session: AsyncSession | None, run: RunId) -> Erasure | None:
        records = await self.store.read(run, session=session)
        for record in records:
            if record.kind == "RunAdmitted":
                return _erasure_of(record, run)
        return None

    async def erasure(self, scope: str) -> Erasure | None:
        """The journaled erasure of ``scope``, or ``None``."""
        return await self._erasure_in(None, erasure_run(self.tenant, scope))

    async def erase(self, scope: str, *, by: str, reason: str = "") -> Erasure:
        """Destroy ``scope``'s wrapping key and journal the erasure; return its record.

        Under the scope's exclusive lock, in one transaction: the covered head read (for a
        run scope), the key destroyed, the erasure's record appended; then the erasure run
        is sealed into the log. Idempotent: erasing an erased scope destroys again (a no-op)
        and returns the first erasure, unchanged. A failure before the commit leaves the key
        destroyed and no record: retry ``erase``, which completes it.
        """
        if not by or not isinstance(by, str):
            raise ValueError("by must name who asked for the erasure (a person or a service)")
        run = erasure_run(self.tenant, scope)
        at = time.time()
        store = self.store
        profile = await store.wire_profile()  # a fresh handle may not know it yet

        async def work(session: AsyncSession) -> list[Append]:
            await lock_scope(store, session, scope, exclusive=True)
            if await self._erasure_in(session, run) is not None:
                raise _Already
            entry: dict[str, Any] = {"scope": scope, "by": by, "at": int(at), "reason": reason}
            unit = scope[len(self.tenant) + 1 :] if scope.startswith(self.tenant + "/") else ""
            covered = _run_or_none(unit)
            if covered is not None:
                head = await store.head(covered, session=session)
                entry["run"] = str(covered)
                entry["through_seq"] = head.seq
            await self.keyring.source.destroy(scope, at, reason)
            payload = {"capability": ERASURE_CAPABILITY, "input": entry, "input_label": _LABEL}
            return [profile.append(run, "RunAdmitted", payload)]

        try:
            await store.append_atomic(run, 0, work)
        except (_Already, RunSealedError):
            await self.keyring.source.destroy(scope, at, reason)
        await self._conclude(run)
        done = await self.erasure(scope)
        if done is None:  # pragma: no cover - the append above committed it
            raise RuntimeError(f"the erasure of {scope!r} was not found after it committed")
        return done

    async def _conclude(self, run: RunId) -> None:
        """Conclude the erasure run (``RunSealed``, outcome ``erased``: the outcome index
        lists it) and seal it into the log; each step skipped when a retry finds it done."""
        store = self.store
        head = await store.head(run)
        if head.seq == 1:
            sealed = {"outcome": ERASED_OUTCOME, "chain_head": head.hash.hex()}
            try:
                await store.append(0, [store.profile.append(run, "RunSealed", sealed)])
            except RunSealedError:
                pass  # a concurrent erase of the same scope concluded it
        await store.seal(run, 0, ERASED_OUTCOME)

    async def erasures(self, limit: int = 1000) -> list[Erasure]:
        """This tenant's journaled erasures (:func:`journaled_erasures`)."""
        return await journaled_erasures(self.store, limit)


async def journaled_erasures(store: Any, limit: int = 1000) -> list[Erasure]:
    """``store``'s tenant's journaled erasures, oldest first: the runs concluded with
    outcome ``erased`` whose admission is an erasure's. Reads the journal only (no key)."""
    runs = await store.runs_by_outcome(ERASED_OUTCOME, limit=limit)
    found: list[Erasure] = []
    for run in runs:
        try:
            records = await store.read(run)
        except CorruptRecordError:
            continue  # a damaged erasure run: verify reports it, the listing skips it
        for record in records:
            if record.kind == "RunAdmitted":
                erasure = _erasure_of(record, run)
                if erasure is not None:
                    found.append(erasure)
                break
    return sorted(found, key=lambda e: (e.at, e.scope))


def _run_or_none(unit: str) -> RunId | None:
    try:
        return RunId.parse(unit)
    except (ValueError, TypeError):
        return None


def _erasure_of(record: Record, run: RunId) -> Erasure | None:
    """The erasure a record journals, or ``None`` when it is not one's: a hostile row of
    another shape is skipped (and ``verify`` judges its chain), never a crash."""
    body = record.body
    entry = body.get("input")
    if body.get("capability") != ERASURE_CAPABILITY or not isinstance(entry, dict):
        return None
    scope, by, at = entry.get("scope"), entry.get("by"), entry.get("at")
    if not isinstance(scope, str) or not isinstance(by, str):
        return None
    if isinstance(at, bool) or not isinstance(at, int | float):
        return None
    reason, covered, through = entry.get("reason"), entry.get("run"), entry.get("through_seq")
    return Erasure(
        scope=scope,
        by=by,
        at=float(at),
        reason=reason if isinstance(reason, str) else "",
        run=run,
        covered_run=covered if isinstance(covered, str) else None,
        covered_through_seq=through if type(through) is int else None,
    )
