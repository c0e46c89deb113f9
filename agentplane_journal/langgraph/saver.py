"""``JournalSaver``: a LangGraph checkpoint saver whose checkpoints are journal records.

What it adds to LangGraph's own savers (see docs/guides/langgraph.md):

* **Verified reads.** A thread is read with its seal in one transaction, every record
  re-hashed, the chain checked from seq 1 (a deleted, reordered or inserted row), signatures
  with a verifier, and a sealed thread against its seal (truncation, a forged tail). A thread
  that does not verify raises :class:`CorruptRecordError`; nothing is returned from it, so a
  graph never resumes from a forged checkpoint. A thread read before is read on from its
  last verified record, which must be unchanged (records are append-only: the verified
  prefix is kept, see :meth:`JournalSaver._view`).
* **One writer per thread.** The first write takes the thread's lease; another saver's write
  is :class:`ThreadBusyError` while it is held, and a saver that read the thread before
  someone else wrote it is :class:`ThreadMovedError` (it would fork the history from a stale
  state). The journal's fencing makes a displaced writer's late append fail, never land.
* **Deletion as a record.** ``delete_thread``, ``prune`` and ``delete_for_runs`` append a
  deletion record naming what goes; reads leave it out from then on. The bytes stay in the
  journal (it is append-only, that is what makes an attacker's deletion visible).

Sync methods bridge to the loop the saver was made on, as ``AsyncSqliteSaver`` and
``AsyncPostgresSaver`` do: call them from another thread (a sync graph run in a worker
thread), never from the loop's own. :meth:`JournalSaver.open` runs a private loop in a
thread for a program that is all sync.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import socket
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Coroutine, Hashable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from agentplane_journal.core.chain import RunCheck
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.record import Record
from agentplane_journal.core.signing import Verifier
from agentplane_journal.core.values import Lease
from agentplane_journal.db.dialect import database_key
from agentplane_journal.db.hotpath import HeadMoved
from agentplane_journal.errors import (
    DAMAGE,
    CorruptRecordError,
    DamagedRunsError,
    FencedError,
    LeaseHeldError,
    LeaseNotHeldError,
    SchemaOutOfDateError,
    StoreError,
    ThreadBusyError,
    ThreadMovedError,
)
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.keyring.ring import Keyring
from agentplane_journal.keyring.store import SealingStore
from agentplane_journal.langgraph.erasure import ThreadSealingStore, erase_thread, require_sealing
from agentplane_journal.langgraph.lean import Names, lean_view
from agentplane_journal.langgraph.memo import THREADS
from agentplane_journal.langgraph.records import (
    KINDS,
    WRITES,
    StoredCheckpoint,
    ThreadView,
    checkpoint_append,
    copied_appends,
    deleted_append,
    thread_run,
    version_key,
    writes_append,
)

__all__ = ["JournalSaver"]

T = TypeVar("T")
_Key = tuple[str, RunId]
#: Runs read per statement when ``list`` or ``delete_for_runs`` walks every thread.
_SCAN_PAGE = 200
#: Threads whose blob records a saver remembers to name in their next checkpoint.
_NAMES = 1024
_log = logging.getLogger(__name__)


class JournalSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer over a :class:`SqlJournalStore` (PostgreSQL or SQLite).

    ``store``: an open store; the saver serves its tenant unless a config names another in
    ``configurable["tenant"]``. ``lease_ttl``: seconds a thread stays this saver's after its
    last write (renewed as it writes; released by :meth:`aclose`). ``verifier`` and
    ``require_signature``: check record signatures on every read (the store needs a signer
    to make them). ``owner``: the lease holder's name (host, pid and a random suffix by
    default, so two savers in one process are two writers too). ``wait``: seconds a write
    waits, with backoff, for a thread another saver holds before :class:`ThreadBusyError`
    (default 0: refused at once; a web app whose workers take turns on a thread passes a
    few seconds, and releases the thread at the end of each request with :meth:`arelease`).
    ``share_verified``: resume a thread from the point any saver of this process verified
    it up to (:mod:`agentplane_journal.langgraph.memo`, bounded), so a new saver (a new
    request's) reads only the records after it instead of the whole thread; an edit made at
    rest before that point is then left to a saver without it, ``averify_thread`` and
    ``agentplane-journal verify`` (docs/guides/langgraph.md, the trust model).
    ``keyring``: seal each thread under its own erasure scope, and ``erase_on_delete``: make
    every ``delete_thread`` erase it too (:mod:`agentplane_journal.langgraph.erasure`).
    """

    def __init__(
        self,
        store: SqlJournalStore,
        *,
        serde: SerializerProtocol | None = None,
        lease_ttl: int = 30,
        owner: str | None = None,
        verifier: Verifier | None = None,
        require_signature: bool = False,
        cache_threads: int = 256,
        wait: float = 0.0,
        share_verified: bool = False,
        keyring: Keyring | None = None,
        erase_on_delete: bool = False,
        lean_resume: bool = False,
    ) -> None:
        super().__init__(serde=serde)
        if not isinstance(store, SqlJournalStore):
            raise TypeError(f"store must be a SqlJournalStore, not {type(store).__name__}")
        if keyring is not None:  # sealed threads (langgraph/erasure.py)
            store = ThreadSealingStore(store, keyring)
        self.erase_on_delete = erase_on_delete
        if isinstance(lease_ttl, bool) or not isinstance(lease_ttl, int) or lease_ttl < 2:
            raise ValueError("lease_ttl must be a whole number of seconds, at least 2")
        if require_signature and verifier is None:
            raise ValueError("require_signature needs a verifier that trusts the signers' keys")
        if isinstance(cache_threads, bool) or not isinstance(cache_threads, int):
            raise TypeError("cache_threads must be an int (0: no cache)")
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not wait >= 0:
            raise ValueError("wait must be a number of seconds, at least 0")
        self.wait = float(wait)
        self.cache_threads = max(0, cache_threads)
        #: Whether this saver goes on from (and keeps) the verified points every saver of
        #: the process shares (:mod:`agentplane_journal.langgraph.memo`) instead of its own.
        self.share_verified = bool(share_verified)
        #: Whether a read of a namespace's latest checkpoint with no verified point reads that
        #: checkpoint and the records it names instead of the thread (langgraph/lean.py).
        self.lean_resume = bool(lean_resume)
        self.store = store
        self.lease_ttl = lease_ttl
        self.owner = (
            owner or f"langgraph:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        )
        self._verifier = verifier
        self._require = require_signature
        self._tenant = store.tenant
        #: Runs the last tenant-wide ``list`` passed over because they did not verify, each
        #: with its error (also logged as a warning as it is met).
        self.damaged: list[tuple[RunId, StoreError]] = []
        self._owns_store = False
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None
        # Shared by the handles of for_tenant (shallow copies), so one lease table per saver.
        self._stores: dict[str, SqlJournalStore] = {store.tenant: store}
        self._leases: dict[_Key, tuple[int, float]] = {}
        self._seen: dict[_Key, int] = {}
        self._known: dict[_Key, tuple[int, Digest]] = {}
        #: Each thread's write lock and how many calls hold or wait for it: dropped when
        #: none does, so an idle thread keeps no lock.
        self._locks: dict[_Key, tuple[asyncio.Lock, int]] = {}
        self._cache: OrderedDict[_Key, ThreadView] = OrderedDict()
        #: What this saver knows to name in a thread's next checkpoint (langgraph/lean.py).
        self._names: OrderedDict[_Key, Names] = OrderedDict()

    # -- construction ------------------------------------------------------------------

    @classmethod
    @asynccontextmanager
    async def from_url(cls, url: str, **options: Any) -> AsyncIterator[JournalSaver]:
        """``async with JournalSaver.from_url(url) as saver``: a store of its own, closed
        (leases released, engine disposed) on exit. ``store_options`` go to
        :meth:`SqlJournalStore.connect` (``tenant``, ``signer``, ...); the rest to the saver.
        A database not migrated yet is opened all the same, for :meth:`setup` to migrate."""
        store_options = options.pop("store_options", None) or {}
        try:
            store = await SqlJournalStore.connect(url, **store_options)
        except SchemaOutOfDateError as exc:
            if exc.newer or exc.elsewhere:
                raise
            # Not migrated yet: LangGraph's idiom is `await saver.setup()` next, so the
            # schema is checked at the first statement instead (setup() migrates first).
            store = await SqlJournalStore.connect(url, **store_options, check_at_open=False)
        try:
            saver = cls(store, **options)
        except BaseException:
            await store.close()
            raise
        saver._owns_store = True
        try:
            yield saver
        finally:
            try:
                await saver.aclose()
            finally:
                await store.close()

    @classmethod
    @contextmanager
    def open(cls, url: str, **options: Any) -> Iterator[JournalSaver]:
        """``with JournalSaver.open(url) as saver``: for a program with no event loop. The
        store lives on a private loop in a daemon thread; use the saver's sync methods (a
        sync graph's ``invoke``), never its async ones, from the caller's thread."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="JournalSaver", daemon=True)
        thread.start()
        entered: list[Any] = []

        async def enter() -> JournalSaver:
            manager = cls.from_url(url, **options)
            entered.append(manager)
            return await manager.__aenter__()

        try:
            saver = asyncio.run_coroutine_threadsafe(enter(), loop).result()
            try:
                yield saver
            finally:
                asyncio.run_coroutine_threadsafe(
                    entered[0].__aexit__(None, None, None), loop
                ).result()
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()

    async def setup(self) -> None:
        """Migrate the store's database to this package's schema, as LangGraph's own savers'
        ``setup()`` creates their tables: safe when every worker calls it at start-up (the
        migration takes a lock; the later ones find the schema at head and do nothing).
        The same as ``await upgrade(url, schema=...)`` (see docs/operations/deployment.md)."""
        from agentplane_journal.migrations.commands import upgrade

        await upgrade(self.store.engine, schema=self.store.schema)

    def for_tenant(self, tenant: str) -> JournalSaver:
        """A handle whose default tenant is ``tenant`` (the calls without a config, such as
        ``delete_thread``, act there); leases and state are shared with this saver."""
        clone = copy.copy(self)
        clone._tenant = self._store(tenant).tenant
        return clone

    async def aclose(self) -> None:
        """Release every thread lease this saver holds, so another writer may go on at once."""
        held, self._leases = dict(self._leases), {}
        for (tenant, run), (epoch, _) in held.items():
            await self._stores[tenant].release_lease(run, epoch)

    # -- plumbing ----------------------------------------------------------------------

    def _store(self, tenant: str | None) -> SqlJournalStore:
        name = self._tenant if tenant is None else tenant
        found = self._stores.get(name)
        if found is None:
            found = self._stores[name] = self.store.for_tenant(name)
        return found

    def _target(self, config: RunnableConfig) -> tuple[SqlJournalStore, str, str]:
        configurable = config.get("configurable") or {}
        thread_id = configurable.get("thread_id")
        if not isinstance(thread_id, str) or not thread_id:
            raise ValueError("a LangGraph config needs configurable['thread_id'] (a string)")
        ns = configurable.get("checkpoint_ns") or ""
        return self._store(configurable.get("tenant")), str(thread_id), str(ns)

    @asynccontextmanager
    async def _lock(self, key: _Key) -> AsyncIterator[None]:
        """The thread's write lock, held in the block (one write of this saver at a time)."""
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    async def _walked(self, store: SqlJournalStore, run: RunId, got: Any) -> list[Record]:
        """A run's records from ``read_runs`` (the walk over every thread), verified
        together as :meth:`_view` verifies a thread: chain from seq 1, signatures, the seal."""
        if got.error is not None:
            raise got.error
        check = RunCheck(self._verifier, self._require)
        if got.whole:
            records: list[Record] = got.records
            check.feed(records)
        else:  # larger than a page: read apart, in pages, after the seal
            records = []
            async for page in store.pages(run):
                check.feed(page)
                records.extend(page)
        sealed: Digest | None = None
        if got.sealed is not None:
            try:
                sealed = Digest(bytes(got.sealed))
            except (TypeError, ValueError) as exc:
                raise CorruptRecordError(check.last, "the seal is not a digest") from exc
        check.finish(sealed)
        return records

    async def _view(
        self,
        store: SqlJournalStore,
        thread_id: str,
        *,
        cold: bool = False,
        latest: str | None = None,
    ) -> ThreadView:
        """The thread as its records say, verified.

        A thread this saver has read before is read on from where it stopped: the records
        it verified are append-only, so it keeps them (the last one is read again and must
        be unchanged, so a cut or rewritten tail is still caught) and checks what follows
        against them: new records' chain, signatures and the seal, as a cold read would.
        ``cold`` (and ``cache_threads=0``) reads and checks the whole thread instead.
        ``latest``: the caller wants that namespace's newest checkpoint only, so a saver made
        with ``lean_resume`` and no verified point reads it and the records it names
        (:mod:`agentplane_journal.langgraph.lean`) instead of the thread.
        """
        run = thread_run(thread_id)
        key = (store.tenant, run)
        shared = self._memo_key(store, run) if self.share_verified else None
        if cold:
            cached = None
        elif shared is not None:
            cached = THREADS.take(shared)  # now this saver's alone until given back
        else:
            cached = self._cache.pop(key, None)
        if cached is not None and cached.partial_ns is not None and cached.partial_ns != latest:
            cached = None  # one namespace's newest checkpoint: not what this call needs
        if cached is None and latest is not None and self.lean_resume and not cold:
            got = await lean_view(store, thread_id, run, latest, self._verifier, self._require)
            if got is not None:
                view, records, last = got
                self._check_known(key, records, last)
                return self._keep(key, view, last, shared)
        check = RunCheck(self._verifier, self._require)
        if cached is None or cached.head[0] == 0:
            records, sealed = await store.read_sealed(run)
            view, fresh = ThreadView(thread_id), records
        else:
            seq = cached.head[0]
            records, sealed = await store.read_sealed(run, seq)
            if not records or records[0].seq != seq or records[0].hash != cached.digest:
                raise CorruptRecordError(
                    seq,
                    f"this saver verified the thread up to seq {seq}, and that record is now "
                    "gone or different: records were deleted or rewritten",
                )
            if cached.partial_ns is not None and any(r.kind != WRITES for r in records[1:]):
                # A new checkpoint (its blobs are named, not here), a deletion or a copy.
                return await self._view(store, thread_id, latest=latest)
            check.head, check.last = cached.digest, seq
            view, fresh = cached, records[1:]
        check.feed(fresh)
        check.finish(sealed)
        self._check_known(key, records, check.last)
        view.extend(fresh)
        return self._keep(key, view, check.last, shared)

    def _check_known(self, key: _Key, records: list[Record], last: int) -> None:
        """The head this saver wrote must still be there (a cut or rewritten tail)."""
        known = self._known.get(key)
        if known is not None:
            seq, head = known
            mine = [r for r in records if r.seq == seq]
            if last < seq or (mine and mine[0].hash != head):
                raise CorruptRecordError(
                    min(seq, last + 1),
                    f"this saver wrote the thread up to seq {seq}, and the journal now ends at "
                    f"seq {last} or holds another record there: records were deleted or "
                    "rewritten",
                )

    def _keep(self, key: _Key, view: ThreadView, last: int, shared: Hashable | None) -> ThreadView:
        """Remember a verified ``view`` (read up to ``last``) for the next read and write."""
        self._seen[key] = last
        self._names[key] = Names.of(view)
        while len(self._names) > _NAMES:
            self._names.popitem(last=False)
        if shared is not None and view.partial_ns is None:
            THREADS.give(shared, view)
        elif self.cache_threads:
            self._cache[key] = view
            while len(self._cache) > self.cache_threads:
                self._cache.popitem(last=False)
        return view

    def _memo_key(self, store: SqlJournalStore, run: RunId) -> Hashable:
        """What a shared verified point is kept under: the database, the schema, the
        tenant, the run, and the trust its records were checked under."""
        engine = store.engine.sync_engine
        return (
            database_key(engine),
            store.schema,
            store.tenant,
            run,
            self._verifier,
            self._require,
        )

    async def _lease(self, store: SqlJournalStore, thread_id: str, run: RunId) -> int:
        """The epoch to write under: this saver's lease, renewed or taken, after checking
        that nobody wrote the thread since this saver last read it."""
        key = (store.tenant, run)
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
        key = (store.tenant, run)
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

    async def _write(self, store: SqlJournalStore, thread_id: str, appends: list[Any]) -> None:
        run = thread_run(thread_id)
        key = (store.tenant, run)
        async with self._lock(key):
            if key not in self._leases and not isinstance(store, SealingStore):
                records = await self._admit(store, thread_id, run, appends)
            else:
                epoch = await self._lease(store, thread_id, run)
                try:
                    records = await store.append(epoch, appends)
                except FencedError as exc:
                    self._leases.pop(key, None)
                    raise ThreadBusyError(thread_id, "another saver", exc.current, 0) from exc
            if records:
                last = records[-1]
                self._known[key] = (last.seq, last.hash)
                self._seen[key] = last.seq
                names = self._names.pop(key, None)
                if names is None and records[0].seq == 1:
                    names = Names(0, complete=True)  # a thread this write began
                if names is not None and names.apply(records):
                    self._names[key] = names
                    while len(self._names) > _NAMES:
                        self._names.popitem(last=False)

    def _tuple(
        self, view: ThreadView, stored: StoredCheckpoint, tenant: str | None
    ) -> CheckpointTuple:
        checkpoint: dict[str, Any] = dict(self.serde.loads_typed(stored.checkpoint))
        values: dict[str, Any] = {}
        for channel, version in checkpoint.get("channel_versions", {}).items():
            blob = view.blobs.get((stored.ns, channel, version_key(version)))
            if blob is not None and blob[0] != "empty":
                values[channel] = self.serde.loads_typed(blob)
        checkpoint["channel_values"] = values
        writes = view.writes.get((stored.ns, stored.id), {})
        ordered = sorted(writes.items(), key=lambda kv: writes_sort_key(kv[1][3], *kv[0]))
        pending = [
            (task, channel, self.serde.loads_typed(v)) for _, (task, channel, v, _p) in ordered
        ]

        def config(checkpoint_id: str) -> RunnableConfig:
            configurable: dict[str, Any] = {
                "thread_id": view.thread_id,
                "checkpoint_ns": stored.ns,
                "checkpoint_id": checkpoint_id,
            }
            if tenant is not None:
                configurable["tenant"] = tenant
            return {"configurable": configurable}

        return CheckpointTuple(
            config=config(stored.id),
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=self.serde.loads_typed(stored.metadata),
            parent_config=config(stored.parent) if stored.parent else None,
            pending_writes=pending,
        )

    async def _threads(
        self, store: SqlJournalStore, damaged: list[tuple[RunId, StoreError]]
    ) -> AsyncIterator[ThreadView]:
        """Every LangGraph thread of the store's tenant, verified (runs of other kinds are
        passed over). A walk over the tenant's runs: ``list`` without a thread and
        ``delete_for_runs`` cost one read of every run.

        A run that does not verify is appended to ``damaged`` with its error (and logged)
        and the walk goes on: one damaged thread never hides the others."""
        after: Any = None
        while True:
            runs = await store.audit_runs(after, _SCAN_PAGE)
            if not runs:
                return
            after = runs[-1]
            ids = [RunId.parse(r) for r in runs if isinstance(r, str)]
            while ids:
                got = await store.read_runs(ids)
                for run, read in got.items():
                    try:
                        records = await self._walked(store, run, read)
                        if not records or records[0].kind not in KINDS:
                            continue
                        thread_id = records[0].body.get("thread")
                        if not isinstance(thread_id, str) or thread_run(thread_id) != run:
                            raise CorruptRecordError(
                                1, "a LangGraph record in another thread's run"
                            )
                        view = ThreadView.replay(thread_id, records)
                    except DAMAGE as error:
                        _log.warning("LangGraph thread run %s passed over: %s", run, error)
                        damaged.append((run, error))
                        continue
                    yield view
                ids = ids[len(got) :]
            if len(runs) < _SCAN_PAGE:
                return

    # -- the async interface -----------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        store, thread_id, ns = self._target(config)
        checkpoint_id = get_checkpoint_id(config)
        view = await self._view(store, thread_id, latest=None if checkpoint_id else ns)
        stored = view.checkpoints.get((ns, checkpoint_id)) if checkpoint_id else view.latest(ns)
        if stored is None:
            view.check_readable()  # erased without a tombstone: typed, not "no checkpoint"
            return None
        return self._tuple(view, stored, (config.get("configurable") or {}).get("tenant"))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if limit is not None and limit <= 0:
            return
        before_id = get_checkpoint_id(before) if before else None
        if config is not None:
            store, thread_id, _ = self._target(config)
            configurable = config.get("configurable") or {}
            ns = configurable.get("checkpoint_ns")
            wanted = get_checkpoint_id(config)
            views: AsyncIterator[ThreadView] | None = None
            single = [await self._view(store, thread_id)]
            tenant = configurable.get("tenant")
        else:
            store, ns, wanted, tenant = self._store(None), None, None, None
            self.damaged = []
            views = self._threads(store, self.damaged)
            single = []
        count = 0

        async def each() -> AsyncIterator[ThreadView]:
            for view in single:
                yield view
            if views is not None:
                async for view in views:
                    yield view

        async for view in each():
            stored = sorted(view.checkpoints.values(), key=lambda c: c.id, reverse=True)
            for c in stored:
                if ns is not None and c.ns != ns:
                    continue
                if wanted is not None and c.id != wanted:
                    continue
                if before_id is not None and c.id >= before_id:
                    continue
                if filter:
                    metadata = self.serde.loads_typed(c.metadata)
                    if any(metadata.get(k) != v for k, v in filter.items()):
                        continue
                yield self._tuple(view, c, tenant)
                count += 1
                if limit is not None and count >= limit:
                    return

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        store, thread_id, ns = self._target(config)
        stripped: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = stripped.pop("channel_values", {}) or {}
        blobs = [
            (
                channel,
                version_key(version),
                self.serde.dumps_typed(values[channel]) if channel in values else ("empty", b""),
            )
            for channel, version in new_versions.items()
        ]
        configurable = config.get("configurable") or {}
        profile = await store.wire_profile()
        key = (store.tenant, thread_run(thread_id))
        names, uses = self._names.get(key), None
        if names is not None and names.upto == self._seen.get(key):
            uses = names.uses(
                ns, checkpoint["id"], dict(checkpoint["channel_versions"]), set(new_versions)
            )
        append = checkpoint_append(
            thread_run(thread_id),
            thread_id,
            ns,
            checkpoint["id"],
            configurable.get("checkpoint_id"),
            self.serde.dumps_typed(stripped),
            self.serde.dumps_typed(get_checkpoint_metadata(config, metadata)),
            blobs,
            profile=profile,
            uses=uses,
        )
        await self._write(store, thread_id, [append])
        out: dict[str, Any] = {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
        }
        if configurable.get("tenant") is not None:
            out["tenant"] = configurable["tenant"]
        return {"configurable": out}

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        store, thread_id, ns = self._target(config)
        checkpoint_id = get_checkpoint_id(config)
        if not checkpoint_id:
            raise ValueError("put_writes needs configurable['checkpoint_id']")
        items = [
            (WRITES_IDX_MAP.get(channel, idx), channel, self.serde.dumps_typed(value))
            for idx, (channel, value) in enumerate(writes)
        ]
        run = thread_run(thread_id)
        profile = await store.wire_profile()
        append = writes_append(
            run, thread_id, ns, checkpoint_id, task_id, task_path, items, profile=profile
        )
        await self._write(store, thread_id, [append])

    async def adelete_thread(
        self, thread_id: str, *, erase: bool | None = None, by: str | None = None, reason: str = ""
    ) -> None:
        """Append a deletion of the whole thread (every namespace); a thread with nothing
        live is left as it is. ``erase`` (default: the saver's ``erase_on_delete``), on a
        saver made with ``keyring=``: then erase the thread's scope, journaled as asked
        ``by`` (default: this saver's owner) for ``reason`` (see langgraph/erasure.py)."""
        store = self._store(None)
        view = await self._view(store, thread_id)
        if self.erase_on_delete if erase is None else erase:
            require_sealing(store)
            await self._delete(store, view, thread_id)
            why = reason or "LangGraph delete_thread"
            await erase_thread(store, thread_id, by=by or self.owner, reason=why)
            await self.arelease(thread_id)
            return
        await self._delete(store, view, thread_id)

    async def _delete(self, store: SqlJournalStore, view: ThreadView, thread_id: str) -> None:
        if view.checkpoints or view.writes:
            await self._write(
                store,
                thread_id,
                [
                    deleted_append(
                        thread_run(thread_id),
                        thread_id,
                        "delete_thread",
                        profile=await store.wire_profile(),
                    )
                ],
            )

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Append, to every thread holding a checkpoint of one of ``run_ids`` (its metadata's
        ``run_id``), a deletion of those checkpoints and their writes."""
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        store = self._store(None)
        found: list[tuple[str, list[tuple[str, str]]]] = []
        damaged: list[tuple[RunId, StoreError]] = []
        async for view in self._threads(store, damaged):
            doomed = [
                key
                for key, c in view.checkpoints.items()
                if self.serde.loads_typed(c.metadata).get("run_id") in wanted
            ]
            if doomed:
                found.append((view.thread_id, doomed))
        profile = await store.wire_profile()
        for thread_id, doomed in found:
            run = thread_run(thread_id)
            append = deleted_append(run, thread_id, "delete_for_runs", doomed, profile=profile)
            await self._write(store, thread_id, [append])
        if damaged:
            raise DamagedRunsError("delete_for_runs", damaged)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Append the source's live records to the target, after a record naming the source
        and the head they were copied at (provenance the target's chain carries)."""
        store = self._store(None)
        view = await self._view(store, source_thread_id)
        view.check_readable()
        if not view.live:
            return
        appends = copied_appends(
            thread_run(target_thread_id),
            target_thread_id,
            source_thread_id,
            view.head,
            view.live,
            profile=await store.wire_profile(),
        )
        await self._view(store, target_thread_id)  # the writer reads before it writes
        await self._write(store, target_thread_id, appends)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: a deletion of every checkpoint but the newest of each namespace;
        ``delete``: a deletion of the whole thread."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: 'keep_latest' or 'delete'")
        store = self._store(None)
        profile = await store.wire_profile()
        for thread_id in thread_ids:
            view = await self._view(store, thread_id)
            if not view.checkpoints:
                continue
            run = thread_run(thread_id)
            if strategy == "delete":
                append = deleted_append(run, thread_id, "prune", profile=profile)
            else:
                keep = {
                    (c.ns, c.id)
                    for c in (view.latest(ns) for ns in {n for n, _ in view.checkpoints})
                    if c is not None
                }
                doomed = [key for key in view.checkpoints if key not in keep]
                if not doomed:
                    continue
                append = deleted_append(run, thread_id, "prune", doomed, profile=profile)
            await self._write(store, thread_id, [append])

    # -- beyond LangGraph's interface --------------------------------------------------

    async def aseal_thread(self, thread_id: str, outcome: str = "closed") -> Digest:
        """Freeze the thread into the tenant's Merkle log: no write lands after this, and a
        read checks the records against the seal, so a cut or forged tail is caught too.
        Returns the sealed head."""
        store = self._store(None)
        run = thread_run(thread_id)
        async with self._lock((store.tenant, run)):
            epoch = await self._lease(store, thread_id, run)
            return await store.seal(run, epoch, outcome)

    async def averify_thread(self, thread_id: str) -> Digest:
        """Read and check the whole thread from seq 1, as a reader with no cache does (this
        saver's cached view of it is replaced); return its head digest."""
        return (await self._view(self._store(None), thread_id, cold=True)).digest

    async def arelease(self, thread_id: str) -> None:
        """Give the thread's lease back now (another saver may write it at once)."""
        store = self._store(None)
        key = (store.tenant, thread_run(thread_id))
        held = self._leases.pop(key, None)
        if held is not None:
            await store.release_lease(key[1], held[0])

    # -- the sync interface: bridged to the saver's loop -------------------------------

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self.loop
        if loop is None:
            coro.close()
            raise asyncio.InvalidStateError(
                "this JournalSaver was made outside an event loop; make it inside one "
                "(JournalSaver.from_url) or use JournalSaver.open(url) for a sync program"
            )
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise asyncio.InvalidStateError(
                "synchronous calls to JournalSaver are only allowed from a thread other than "
                "its event loop's; there, use the async interface (await saver.aget_tuple(...), "
                "graph.ainvoke(...))"
            )
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._sync(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.alist(config, filter=filter, before=before, limit=limit)]

        return iter(self._sync(collect()))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._sync(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._sync(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._sync(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._sync(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._sync(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._sync(self.aprune(thread_ids, strategy=strategy))

    def seal_thread(self, thread_id: str, outcome: str = "closed") -> Digest:
        return self._sync(self.aseal_thread(thread_id, outcome))

    def verify_thread(self, thread_id: str) -> Digest:
        return self._sync(self.averify_thread(thread_id))

    def release(self, thread_id: str) -> None:
        self._sync(self.arelease(thread_id))
