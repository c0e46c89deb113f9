"""The saver's sync interface, bridged to the loop it was made on, as ``AsyncSqliteSaver``
and ``AsyncPostgresSaver`` do: call it from another thread (a sync graph run in a worker
thread), never from the loop's own."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from agentplane_journal.langgraph.base import SaverBase

T = TypeVar("T")

__all__ = ["SyncBridge"]


class SyncBridge(SaverBase):
    """LangGraph's sync methods over the async ones (see the module)."""

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
