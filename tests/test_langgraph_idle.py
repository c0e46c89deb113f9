"""What a ``JournalSaver`` keeps per thread it no longer uses: bounded, whatever the count."""

from __future__ import annotations

import functools
import gc
import os
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

try:
    from langgraph.checkpoint.base import empty_checkpoint

    from agentplane_journal.backends.head_cache import HeadCache
    from agentplane_journal.core import record as core_record
    from agentplane_journal.langgraph import JournalSaver, records

    _derive = records._thread_run.__wrapped__
    _verdict = core_record._ulid_verdict.__wrapped__
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
    # Below its bounds (4,096 threads remembered), what a saver keeps per idle thread: the
    # last seq it read and the head it wrote, the store's known head, a memoised run id.
    # (Issue 32 measured +5 MiB before.) Past them, flat: the next test.
    assert per_thousand < 2.5, f"{per_thousand:.2f} MiB per 1,000 idle threads"


async def test_memory_is_flat_past_the_bounds(
    make_store: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every per-thread memory of the saver, the store, the run-id memo and the reads' ULID
    # verdicts, bounded small here (4,096 threads by default) so that 300 threads pass
    # them; tracemalloc traces from the start, so what an eviction frees is counted too.
    # Red before the saver's last-read seqs and written heads were bounded (~+0.3 MiB per
    # 1,000 threads).
    monkeypatch.setattr(JournalSaver, "remember_threads", 64)
    monkeypatch.setattr(HeadCache.__init__, "__defaults__", (64,))
    monkeypatch.setattr(records, "_thread_run", functools.lru_cache(64)(_derive))
    monkeypatch.setattr(core_record, "_ulid_verdict", functools.lru_cache(64)(_verdict))
    # Two windows of 300 threads each, and the smaller growth: a per-thread leak grows both,
    # while a one-off allocation that happens to fall in a window (the pool opening another
    # connection under load, ~30 KiB: 0.107 "MiB per 1,000" once in CI) grows only one.
    tracemalloc.start()
    try:
        saver = JournalSaver(await make_store(), cache_threads=16)
        for i in range(200):
            await _touch(saver, f"flat-{i}")
        grown = []
        for window in (range(200, 500), range(500, 800)):
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            for i in window:
                await _touch(saver, f"flat-{i}")
            gc.collect()
            grown.append(tracemalloc.get_traced_memory()[0] - before)
    finally:
        tracemalloc.stop()
    per_thousand = min(grown) / 300 * 1000 / 2**20
    assert per_thousand < 0.1, f"{per_thousand:.3f} MiB per 1,000 idle threads ({grown} B)"
    assert len(saver._seen) <= 64 and len(saver._known) <= 64 and len(saver._names) <= 64
