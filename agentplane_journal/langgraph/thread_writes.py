"""The saver's writes: one writer per thread (its lease, taken with the first write in one
transaction, renewed as it writes), a refusal when someone wrote since the saver read the
thread, and what the saver then knows of the thread to name in its next checkpoint."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from agentplane_journal.core.append import Append
from agentplane_journal.core.ids import RunId
from agentplane_journal.core.record import Record
from agentplane_journal.core.values import Lease
from agentplane_journal.db.hotpath import HeadMoved
from agentplane_journal.errors import (
    FencedError,
    LeaseHeldError,
    LeaseNotHeldError,
    ThreadBusyError,
    ThreadMovedError,
)
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.keyring.store import SealingStore
from agentplane_journal.langgraph.base import SaverBase, _Key
from agentplane_journal.langgraph.lean import Names
from agentplane_journal.langgraph.records import (
    thread_run,
)

__all__ = ["ThreadWrites"]


class _Held:
    """A thread's write lock while it is waited for or held: an ``async with`` written out
    (a generator-based context manager costs a few µs more, twice per LangGraph turn)."""

    __slots__ = ("_key", "_lock", "_locks")

    def __init__(self, locks: dict[_Key, tuple[asyncio.Lock, int]], key: _Key) -> None:
        lock, users = locks.get(key) or (asyncio.Lock(), 0)
        locks[key] = (lock, users + 1)
        self._locks, self._key, self._lock = locks, key, lock

    async def __aenter__(self) -> None:
        try:
            await self._lock.acquire()
        except BaseException:
            self._leave()  # cancelled while waiting: no longer a user
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._lock.release()
        self._leave()

    def _leave(self) -> None:
        lock, users = self._locks[self._key]
        if users == 1:
            del self._locks[self._key]
        else:
            self._locks[self._key] = (lock, users - 1)


class ThreadWrites(SaverBase):
    """The lease and the append (see the module)."""

    def _lock(self, key: _Key) -> _Held:
        """The thread's write lock, held in an ``async with`` (one write of this saver at a
        time); its entry is dropped with its last user."""
        return _Held(self._locks, key)

    async def _lease(self, store: SqlJournalStore, thread_id: str, run: RunId) -> int:
        """The epoch to write under: this saver's lease, renewed or taken, after checking
        that nobody wrote the thread since this saver last read it."""
        key = (store.tenant, thread_id)
        now = time.monotonic()
        held = self._leases.get(key)
        if held is not None:
            epoch, renew_at = held
            if now < renew_at:
                return epoch
            try:
                await store.renew(run, self.owner, epoch, self.lease_ttl)
                self._leases[key] = (epoch, now + self.lease_ttl / 2)
                return epoch
            except LeaseNotHeldError:
                del self._leases[key]  # lapsed or taken over: claim it again, checked below
        lease = await self._acquire(store, thread_id, run)
        seen = self._seen.get(key)
        if seen is not None:
            head = await store.head(run)
            if head.seq != seen:
                # Someone wrote after this saver read: give the thread back (it wrote nothing).
                await store.release_lease(run, lease.epoch)
                raise ThreadMovedError(thread_id, seen, head.seq)
        self._leases[key] = (lease.epoch, now + self.lease_ttl / 2)
        return lease.epoch

    async def _admit(
        self, store: SqlJournalStore, thread_id: str, run: RunId, appends: list[Any]
    ) -> list[Record]:
        """A write without the thread's lease: the claim, the check that nobody wrote the
        thread since this saver read it, and the records, in one transaction (``store.admit``);
        waits as :meth:`_acquire` does. A sealing store (``keyring=``) takes the lease apart
        instead, so its erasure check runs under the scope's lock (:meth:`_lease`)."""
        key = (store.tenant, thread_id)
        seen = self._seen.get(key)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait
        pause = 0.005
        while True:
            now = time.monotonic()
            try:
                lease, records = await store.admit(
                    run, self.owner, self.lease_ttl, appends, after=seen
                )
            except HeadMoved as exc:  # nothing written, nothing claimed
                raise ThreadMovedError(thread_id, seen or 0, exc.found) from None
            except LeaseHeldError as exc:
                if loop.time() + pause > deadline:
                    raise ThreadBusyError(
                        thread_id, exc.owner, exc.epoch, exc.remaining_secs, waited=self.wait
                    ) from exc
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.25)
                continue
            self._leases[key] = (lease.epoch, now + self.lease_ttl / 2)
            return records

    async def _acquire(self, store: SqlJournalStore, thread_id: str, run: RunId) -> Lease:
        """Take the thread's lease, waiting with backoff up to ``wait`` seconds while another
        saver holds it (as the session adapters wait for a conversation's claim)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait
        pause = 0.005
        while True:
            try:
                return await store.acquire(run, self.owner, self.lease_ttl)
            except LeaseHeldError as exc:
                if loop.time() + pause > deadline:
                    raise ThreadBusyError(
                        thread_id, exc.owner, exc.epoch, exc.remaining_secs, waited=self.wait
                    ) from exc
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.25)

    async def _write(
        self,
        store: SqlJournalStore,
        thread_id: str,
        appends: list[Append] | Callable[[], list[Append]],
    ) -> None:
        """Append ``appends`` (or what ``appends()`` builds under the thread's write lock,
        from what the saver then knows: a checkpoint's names) under the thread's lease."""
        run = thread_run(thread_id)
        key = (store.tenant, thread_id)
        async with self._lock(key):
            if callable(appends):
                appends = appends()
            held = self._leases.get(key)
            if held is None and not isinstance(store, SealingStore):
                records = await self._admit(store, thread_id, run, appends)
            else:
                if held is not None and time.monotonic() < held[1]:
                    epoch = held[0]  # :meth:`_lease`'s first answer, without its coroutine
                else:
                    epoch = await self._lease(store, thread_id, run)
                try:
                    records = await store.append(epoch, appends)
                except FencedError as exc:
                    self._leases.pop(key, None)
                    raise ThreadBusyError(thread_id, "another saver", exc.current, 0) from exc
            if records:
                last = records[-1]
                seq = last.seq
                self._known[key] = (seq, last.hash)
                self._seen[key] = seq
                names = self._names.pop(key, None)
                if names is None and seq == len(records):
                    names = Names(0, complete=True)  # a thread this write began
                if names is not None and names.apply(records):
                    self._names[key] = names

    async def arelease(self, thread_id: str) -> None:
        """Give the thread's lease back now (another saver may write it at once)."""
        store = self._store(None)
        held = self._leases.pop((store.tenant, thread_id), None)
        if held is not None:
            await store.release_lease(thread_run(thread_id), held[0])
