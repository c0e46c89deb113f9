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
import os
import socket
import threading
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from agentplane_journal.core.append import Append
from agentplane_journal.core.ids import Digest
from agentplane_journal.core.profile import WireProfile
from agentplane_journal.core.signing import Verifier
from agentplane_journal.errors import (
    SchemaOutOfDateError,
)
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.keyring.ring import Keyring
from agentplane_journal.langgraph.base import _NAMES, Recent
from agentplane_journal.langgraph.bridge import SyncBridge
from agentplane_journal.langgraph.edits import ThreadEdits
from agentplane_journal.langgraph.erasure import ThreadSealingStore
from agentplane_journal.langgraph.records import (
    ThreadView,
    checkpoint_append,
    thread_run,
    version_key,
    writes_append,
)

__all__ = ["JournalSaver"]


class JournalSaver(ThreadEdits, SyncBridge):
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
    ``lean_resume``: a read of a namespace's latest checkpoint with no verified point reads
    that checkpoint and the records it names, not the thread
    (:mod:`agentplane_journal.langgraph.lean`; what it cannot see: the trust model); and
    ``list`` with a ``limit`` of one namespace reads back from the head, not the thread
    (:mod:`agentplane_journal.langgraph.lean_list`). One flag for both: the same trust (a
    read that does not read the thread, checked as far as it reads), opted into once.
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
        self.damaged = []
        self._owns_store = False
        try:
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None
        # Shared by the handles of for_tenant (shallow copies), so one lease table per saver.
        self._stores = {store.tenant: store}
        self._leases = {}
        remember = max(self.remember_threads, self.cache_threads)
        self._seen = Recent(remember)
        self._known = Recent(remember)
        #: Each thread's write lock and how many calls hold or wait for it: dropped when
        #: none does, so an idle thread keeps no lock.
        self._locks = {}
        self._cache = OrderedDict()
        #: What this saver knows to name in a thread's next checkpoint (langgraph/lean.py).
        self._names = Recent(min(_NAMES, remember))

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
        for (tenant, thread_id), (epoch, _) in held.items():
            await self._stores[tenant].release_lease(thread_run(thread_id), epoch)

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
            if self.lean_resume and limit is not None and wanted is None and isinstance(ns, str):
                # A page of history read back from the head (langgraph/lean_list.py).
                page = await self._page(store, thread_id, ns, before_id, limit, filter)
                if page is not None:
                    view, found = page
                    for c in found:
                        yield self._tuple(view, c, configurable.get("tenant"))
                    return
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
        profile = _profile_now(store) or await store.wire_profile()
        key = (store.tenant, thread_id)
        run = thread_run(thread_id)
        serialized = self.serde.dumps_typed(stripped)
        meta = self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))

        def build() -> list[Append]:
            # Under the thread's write lock: what this saver knows of the thread is then
            # what the record follows (LangGraph writes a task's pending writes while it
            # puts the checkpoint they belong to; those must be counted before it names).
            names, uses, pending = self._names.get(key), None, []
            if names is not None and names.upto == self._seen.get(key):
                uses = names.uses(
                    ns, checkpoint["id"], dict(checkpoint["channel_versions"]), set(new_versions)
                )
                if uses is not None:
                    pending = names.pending(ns, checkpoint["id"])
            return [
                checkpoint_append(
                    run,
                    thread_id,
                    ns,
                    checkpoint["id"],
                    configurable.get("checkpoint_id"),
                    serialized,
                    meta,
                    blobs,
                    profile=profile,
                    uses=uses,
                    pending=pending,
                )
            ]

        await self._write(store, thread_id, build)
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
        profile = _profile_now(store) or await store.wire_profile()
        append = writes_append(
            run, thread_id, ns, checkpoint_id, task_id, task_path, items, profile=profile
        )
        await self._write(store, thread_id, [append])

    # -- beyond LangGraph's interface --------------------------------------------------

    async def aseal_thread(self, thread_id: str, outcome: str = "closed") -> Digest:
        """Freeze the thread into the tenant's Merkle log: no write lands after this, and a
        read checks the records against the seal, so a cut or forged tail is caught too.
        Returns the sealed head."""
        store = self._store(None)
        run = thread_run(thread_id)
        async with self._lock((store.tenant, thread_id)):
            epoch = await self._lease(store, thread_id, run)
            return await store.seal(run, epoch, outcome)

    async def averify_thread(self, thread_id: str) -> Digest:
        """Read and check the whole thread from seq 1, as a reader with no cache does (this
        saver's cached view of it is replaced); return its head digest."""
        return (await self._view(self._store(None), thread_id, cold=True)).digest

    def seal_thread(self, thread_id: str, outcome: str = "closed") -> Digest:
        return self._sync(self.aseal_thread(thread_id, outcome))

    def verify_thread(self, thread_id: str) -> Digest:
        return self._sync(self.averify_thread(thread_id))

    def release(self, thread_id: str) -> None:
        self._sync(self.arelease(thread_id))


def _profile_now(store: SqlJournalStore) -> WireProfile | None:
    """The store's wire profile when it is known without a statement (every call after the
    first): a put builds its record in it without awaiting ``wire_profile()`` (a coroutine
    per put). ``None``: not read yet, so the caller awaits it. A profile the store asked
    for but has not checked yet is returned too: the append checks it before it writes."""
    try:
        return store.profile
    except RuntimeError:
        return None
