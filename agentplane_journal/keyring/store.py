"""A store that encrypts every append and decrypts every read: for code written against a store.

:class:`SealingStore` wraps a :class:`~agentplane_journal.SqlJournalStore` for a layer that
only knows the store's interface (the durable steps: ``Steps(SealingStore(store, keyring))``
encrypts effect arguments, results, failures and notes with no change to the layer). Each
append is encrypted under ``scope_for(run)`` (default: the run, ``{tenant}/{run}``) and checked
against the scope's erasure under its lock (:class:`~agentplane_journal.keyring.SealedJournal`).
Reads return the records as written (``raw``, hashes and signatures untouched) with a body
decrypted where the key exists; a payload whose scope was erased stays encrypted in the body, as
agentplane's ``SealedJournal`` leaves it, so a run whose data is gone still lists, verifies
and audits. Every other method is the store's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from agentplane_journal.core.append import Append
from agentplane_journal.core.envelope import ScopeErasedError
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.record import Record, stored_record
from agentplane_journal.core.sealed import Erased, get_at, sealed_fields, set_at
from agentplane_journal.core.values import Cancellation, Lease
from agentplane_journal.journal.guarded import Tail
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.keyring.journal import Erasure, SealedJournal
from agentplane_journal.keyring.ring import Keyring

__all__ = ["SealingStore"]


class SealingStore(SqlJournalStore):
    """A handle on ``store``'s database and tenant whose appends are encrypted under
    ``scope_for(run)`` and whose reads are decrypted.

    A :class:`~agentplane_journal.SqlJournalStore` itself (it shares ``store``'s engine, as
    :meth:`~agentplane_journal.SqlJournalStore.for_tenant` does), so a layer that asks for
    a store takes it. Close ``store``, not this handle. An append inside a host's session
    (``session=``) is refused: encrypting takes its own transaction, under the scope's lock.
    """

    def __init__(
        self,
        store: SqlJournalStore,
        keyring: Keyring,
        scope_for: Callable[[RunId], str] | None = None,
    ) -> None:
        super().__init__(store.engine, **store.handle_options())
        self.keyring = keyring
        self._journal = SealedJournal(self, keyring)
        self._scope_for = scope_for or self._journal.scope

    def __repr__(self) -> str:
        return f"SealingStore(tenant={self.tenant!r}, {self.keyring!r})"

    def for_tenant(self, name: str, *, profile: Any = None) -> SealingStore:
        """The same encryption for another tenant's handle (its own scopes: ``{name}/...``)."""
        handle = SqlJournalStore.for_tenant(self, name, profile=profile)
        scope_for = None if self._scope_for == self._journal.scope else self._scope_for
        return SealingStore(handle, self.keyring, scope_for)

    def scope_of(self, run: RunId) -> str:
        """The erasure scope this handle encrypts ``run``'s records under."""
        return self._scope_for(run)

    async def erase(self, scope: str, *, by: str, reason: str = "") -> Erasure:
        """:meth:`SealedJournal.erase` of ``scope`` (destroy its key, journal the erasure)."""
        return await self._journal.erase(scope, by=by, reason=reason)

    async def erasure(self, scope: str) -> Erasure | None:
        """The journaled erasure of ``scope``, or ``None``."""
        return await self._journal.erasure(scope)

    async def append(
        self, epoch: int, batch: Sequence[Append], *, session: Any = None
    ) -> list[Record]:
        """Encrypt ``batch`` under its run's scope and append it (records handed back decrypted)."""
        items = list(batch)
        if not items:
            return []
        if session is not None:
            raise ValueError("a SealingStore appends in its own transaction (no session=)")
        written = await self._journal.append(epoch, items, scope=self._scope_for(items[0].run))
        return [await self._opened(r) for r in written]

    async def read(self, run: RunId, from_seq: int = 1, *, session: Any = None) -> list[Record]:
        """The run's records, opened where the key exists (erased payloads stay encrypted)."""
        records = await SqlJournalStore.read(self, run, from_seq, session=session)
        return [await self._opened(r) for r in records]

    async def _sealed_batch(self, run: RunId, items: list[Append]) -> list[Append]:
        """``items`` encrypted under ``run``'s scope; :class:`ScopeErasedError` when the scope's
        erasure is journaled. The store's one-transaction calls below (the durable steps'
        admission, start and conclusion, the adapters' guarded change) check this before
        their transaction, not under the scope's lock as :meth:`append` does: a write racing
        an erasure can land after it, sealed under the destroyed key, so unreadable at once
        (erased content, never tampering)."""
        scope = self._scope_for(run)
        erased = await self._journal.erasure(scope)
        if erased is not None:
            raise ScopeErasedError(scope, erased.at, erased.reason)
        return await self._journal.sealed(items, scope)

    async def admit(
        self,
        run: RunId,
        owner: str,
        ttl: int | timedelta,
        batch: Sequence[Append],
        *,
        after: int | None = None,
    ) -> tuple[Lease, list[Record]]:
        """The store's admission (lease and first batch in one transaction), sealed."""
        sealed = await self._sealed_batch(run, list(batch))
        lease, written = await SqlJournalStore.admit(self, run, owner, ttl, sealed, after=after)
        return lease, [await self._opened(r) for r in written]

    async def append_unless_cancelled(
        self, epoch: int, batch: Sequence[Append]
    ) -> list[Record] | Cancellation:
        """The store's append unless the run has a stop request, sealed."""
        items = list(batch)
        if not items:
            return []
        sealed = await self._sealed_batch(items[0].run, items)
        written = await SqlJournalStore.append_unless_cancelled(self, epoch, sealed)
        if not isinstance(written, list):
            return written
        return [await self._opened(r) for r in written]

    async def conclude(
        self, epoch: int, batch: Sequence[Append], outcome: str
    ) -> tuple[list[Record], Digest]:
        """The store's conclusion (closing records, seal, release in one transaction), sealed."""
        items = list(batch)
        sealed = await self._sealed_batch(items[0].run, items) if items else items
        written, head = await SqlJournalStore.conclude(self, epoch, sealed, outcome)
        return [await self._opened(r) for r in written], head

    async def guarded_append(
        self, run: RunId, batch: Sequence[Append], *, expected: Any = None
    ) -> list[Record]:
        """The store's guarded append (the session adapters' one-transaction change) with the
        batch sealed under ``run``'s scope first (records handed back opened).

        :class:`ScopeErasedError` when the scope's erasure is journaled (see
        :meth:`_sealed_batch` for the race with an erasure)."""
        items = list(batch)
        if not items:
            return []
        sealed = await self._sealed_batch(run, items)
        written = await SqlJournalStore.guarded_append(self, run, sealed, expected=expected)
        return [await self._opened(r) for r in written]

    async def guarded_read(self, run: RunId, from_seq: int = 1) -> Tail:
        """The store's tail read, the records opened where the key exists."""
        tail = await SqlJournalStore.guarded_read(self, run, from_seq)
        return Tail([await self._opened(r) for r in tail.records], tail.sealed)

    async def guarded_read_admitted(self, key: str) -> tuple[RunId | None, Tail]:
        """The store's cold conversation read, the records opened where the key exists."""
        run, tail = await SqlJournalStore.guarded_read_admitted(self, key)
        return run, Tail([await self._opened(r) for r in tail.records], tail.sealed)

    async def _opened(self, record: Record) -> Record:
        opened = await self.keyring.open_record(self.tenant, record)
        if not opened.sealed:
            return record
        body = dict(record.body)
        for field in sealed_fields(record.kind, opened.payload):
            value = get_at(opened.payload, field.path)
            if not isinstance(value, Erased):  # erased: left sealed, as written
                body = set_at(body, field.path, value)
        return stored_record(body, record.raw, record.prev_hash, record.hash, record.attestation)
