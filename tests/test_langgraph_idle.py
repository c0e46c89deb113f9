"""What a ``JournalSaver`` keeps per thread it no longer uses: bounded, whatever the count."""

from __future__ import annotations

import gc
import os
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

try:
    from langgraph.checkpoint.base import empty_checkpoint

    from agentplane_journal.langgraph import JournalSaver
except ImportError:  # pragma: no cover - the extra is absent
    if os.environ.get("CI"):
        raise
    pytest.skip("langgraph is not installed (pip install -e '.[test]')", allow_module_level=True)


async def _touch(saver: JournalSaver, thread: str) -> None:
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    config = await saver.aput(config, empty_checkpoint(), {"step": 1}, {})
    assert await saver.aget_tuple(config) is not None
    await saver.arelease(thread)  # the thread goes idle


async def test_memory_per_idle_thread_is_bounded(make_store: Callable[..., Any]) -> None:
    saver = JournalSaver(await make_store(), cache_threads=16)
    for i in range(150):  # past the view cache's bound, and every pool warm
        await _touch(saver, f"idle-{i}")
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(150, 450):
            await _touch(saver, f"idle-{i}")
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert not saver._locks and not saver._leases  # no lock, no lease per idle thread
    assert len(saver._cache) <= 16
    per_thousand = grown / 300 * 1000 / 2**20
    # What stays per idle thread (~1.5 MiB per 1,000 measured): the saver's last seen seq
    # and the head it wrote (so a thread moved or cut under it is refused or caught on its
    # next call), the store's known head (the append path), a memoised run id. No lock, no
    # lease, no thread state beyond ``cache_threads``. (Issue 32 measured +5 MiB before.)
    assert per_thousand < 2.5, f"{per_thousand:.2f} MiB per 1,000 idle threads"
