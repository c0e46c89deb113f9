"""A thread as its records say, verified: the saver's reads (see ``_view``), the answer
built from a view (``_tuple``), and the walk over every thread of a tenant (``_threads``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    CheckpointTuple,
    writes_sort_key,
)

from agentplane_journal.core.chain import RunCheck
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.record import Record
from agentplane_journal.errors import (
    DAMAGE,
    CorruptRecordError,
    StoreError,
)
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.langgraph.base import _SCAN_PAGE, SaverBase, _Key, _log
from agentplane_journal.langgraph.lean import Names, lean_view
from agentplane_journal.langgraph.lean_list import lean_page
from agentplane_journal.langgraph.memo import THREADS
from agentplane_journal.langgraph.records import (
    KINDS,
    WRITES,
    StoredCheckpoint,
    ThreadView,
    thread_run,
    typed_member,
    version_key,
)

__all__ = ["ThreadReads"]


class ThreadReads(SaverBase):
    """Verified views of a thread (see the module)."""

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
        key = (store.tenant, thread_id)
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

    async def _page(
        self,
        store: SqlJournalStore,
        thread_id: str,
        ns: str,
        before: str | None,
        limit: int,
        filter: dict[str, Any] | None,
    ) -> tuple[ThreadView, list[StoredCheckpoint]] | None:
        """``list``'s answer read back from the head (:mod:`agentplane_journal.langgraph.
        lean_list`), for a saver made with ``lean_resume`` that has no verified view of the
        thread; ``None``: the caller reads the thread (a view kept, or the page cannot vouch).
        Leaves the saver's state as it was: a page is not a view of the thread to write on."""
        run = thread_run(thread_id)
        key = (store.tenant, thread_id)
        cached = self._cache.get(key)
        if (cached is not None and cached.partial_ns is None) or (
            self.share_verified and self._memo_key(store, run) in THREADS
        ):
            return None  # a verified view is kept: reading on from it is cheaper still

        def matches(record: Record) -> bool:
            if not filter:
                return True
            metadata = self.serde.loads_typed(typed_member(record, "metadata"))
            return all(metadata.get(k) == v for k, v in filter.items())

        got = await lean_page(
            store, thread_id, run, ns, before, limit, matches, self._verifier, self._require
        )
        if got is None:
            return None
        view, keys, records, last = got
        self._check_known(key, records, last)
        return view, [view.checkpoints[k] for k in keys if k in view.checkpoints]

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
        if shared is not None and view.partial_ns is None:
            THREADS.give(shared, view)
        elif self.cache_threads:
            self._cache[key] = view
            while len(self._cache) > self.cache_threads:
                self._cache.popitem(last=False)
        return view

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
