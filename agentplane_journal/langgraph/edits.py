"""Deletion, copy and prune as records (LangGraph's ``delete_thread``, ``delete_for_runs``,
``copy_thread`` and ``prune``): the journal is append-only, so each appends a record naming
what goes or where it came from, and reads leave out what a deletion names."""

from __future__ import annotations

from collections.abc import Sequence

from agentplane_journal.core.ids import RunId
from agentplane_journal.errors import (
    DamagedRunsError,
    StoreError,
)
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.langgraph.erasure import erase_thread, require_sealing
from agentplane_journal.langgraph.records import (
    ThreadView,
    copied_appends,
    deleted_append,
    thread_run,
)
from agentplane_journal.langgraph.thread_reads import ThreadReads
from agentplane_journal.langgraph.thread_writes import ThreadWrites

__all__ = ["ThreadEdits"]


class ThreadEdits(ThreadReads, ThreadWrites):
    """Deleting, copying and pruning threads (see the module)."""

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
