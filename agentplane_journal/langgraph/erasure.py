"""Sealed LangGraph threads, and ``delete_thread`` that erases.

``JournalSaver(store, keyring=keyring)`` reads and writes through a
:class:`ThreadSealingStore`: every record of a thread is sealed under the thread's scope
(:func:`thread_scope`: ``{tenant}/{the thread's run}``, one run per thread), with the
checkpoint, its metadata, its channel values and pending writes sealed and the ids a reader
routes on clear (:func:`~agentplane_journal.core.sealed.sealed_fields`). The saver's reads
(``read_sealed``, ``pages``, ``read_runs``) come back opened, with the records' bytes and
hashes untouched, so the saver verifies the chain exactly as it does unsealed.

``delete_thread(thread_id, erase=True)`` (or ``erase_on_delete=True``) first appends the
usual whole-thread deletion record (a tombstone in the clear), then erases the thread's scope
(:func:`erase_thread`): the key is destroyed and the erasure journaled, so the thread reads
as absent (``get_tuple`` is ``None``) on every saver, its history still verifies, and a late
write to it is refused (:class:`~agentplane_journal.keyring.ScopeErasedError`). A thread whose
scope was erased without the tombstone (``agentplane-journal erase SCOPE``) reads as
:class:`~agentplane_journal.errors.PayloadsErasedError`: typed, never tampering.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

from agentplane_journal.core.envelope import EnvelopeRefusedError, UnknownEnvelopeFormatError
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.record import Record
from agentplane_journal.core.sealed import scope
from agentplane_journal.errors import CorruptRecordError
from agentplane_journal.journal.audits import RunRead
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.keyring.journal import Erasure
from agentplane_journal.keyring.ring import Keyring
from agentplane_journal.keyring.store import SealingStore
from agentplane_journal.langgraph.records import thread_run

__all__ = ["ThreadSealingStore", "erase_thread", "require_sealing", "thread_scope"]


def thread_scope(tenant: str, thread_id: str) -> str:
    """The erasure scope of a LangGraph thread in ``tenant``: its run's scope."""
    return scope(tenant, str(thread_run(thread_id)))


class ThreadSealingStore(SealingStore):
    """A :class:`SealingStore` whose reads the saver uses (the seal-checked read, the pages
    and the many-runs read of a tenant walk) are opened too. For the saver: hand the saver
    ``keyring=`` rather than building one."""

    def __init__(self, store: SqlJournalStore, keyring: Keyring) -> None:
        super().__init__(store, keyring)

    def __repr__(self) -> str:
        return f"ThreadSealingStore(tenant={self.tenant!r}, {self.keyring!r})"

    def for_tenant(self, name: str, *, profile: Any = None) -> ThreadSealingStore:
        return ThreadSealingStore(
            SqlJournalStore.for_tenant(self, name, profile=profile), self.keyring
        )

    async def _all_opened(self, records: list[Record]) -> list[Record]:
        return [await self._opened(r) for r in records]

    async def read_sealed(
        self, run: RunId, from_seq: int = 1, *, session: Any = None
    ) -> tuple[list[Record], Digest | None]:
        records, sealed = await SqlJournalStore.read_sealed(self, run, from_seq, session=session)
        return await self._all_opened(records), sealed

    async def pages(
        self, run: RunId, from_seq: int = 1, **options: Any
    ) -> AsyncIterator[list[Record]]:
        async for page in SqlJournalStore.pages(self, run, from_seq, **options):
            read = await self._opened_read(RunRead(page))
            if read.error is not None:
                raise read.error  # a refused envelope, as a corrupt row (see _opened_read)
            yield read.records

    async def read_runs(
        self, runs: Sequence[RunId], *, page_bytes: int | None = None, session: Any = None
    ) -> dict[RunId, RunRead]:
        got = await SqlJournalStore.read_runs(self, runs, page_bytes=page_bytes, session=session)
        return {run: await self._opened_read(read) for run, read in got.items()}

    async def _opened_read(self, read: RunRead) -> RunRead:
        """``read`` opened; an envelope refused (damaged, moved, or of an unknown format)
        ends the run's records there, as a corrupt row does, so a walk over every thread
        reports that run as damaged and goes on (a hostile row is never a crash)."""
        opened: list[Record] = []
        for record in read.records:
            try:
                opened.append(await self._opened(record))
            except (EnvelopeRefusedError, UnknownEnvelopeFormatError) as refused:
                error = CorruptRecordError(record.seq, str(refused))
                return replace(read, records=opened, error=error)
        return replace(read, records=opened)


def require_sealing(store: SqlJournalStore) -> SealingStore:
    """``store`` as a :class:`SealingStore`, or a ``TypeError`` saying how to make one (asked
    before anything is written: a thread written in the clear has no key to destroy, and
    pretending to erase it would be a lie)."""
    if not isinstance(store, SealingStore):
        raise TypeError(
            "delete_thread(erase=True) needs a saver that seals: JournalSaver(store, "
            "keyring=Keyring(...)); this saver writes threads in the clear, so there is no "
            "key to destroy (nothing was written)"
        )
    return store


async def erase_thread(store: SqlJournalStore, thread_id: str, *, by: str, reason: str) -> Erasure:
    """Erase ``thread_id``'s scope in ``store``'s tenant (destroy its key, journal it);
    ``store`` must seal (:func:`require_sealing`)."""
    sealing = require_sealing(store)
    return await sealing.erase(thread_scope(sealing.tenant, thread_id), by=by, reason=reason)
