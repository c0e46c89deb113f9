"""One saver's turns on one thread at once: taken one at a time (the saver's thread lock,
``langgraph/thread_writes.py``), every put and put_writes lands, the chain holds, and no
lock outlives its last user. Both dialects: the first write claims the thread's lease in the
same transaction as its record, so two first writes racing inside one saver would refuse
each other (the thread "moved", or busy) without the lock."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import pytest

try:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    from agentplane_journal.langgraph import JournalSaver
except ImportError:  # pragma: no cover - the extra is absent
    if os.environ.get("CI"):
        raise
    pytest.skip("langgraph is not installed (pip install -e '.[test]')", allow_module_level=True)

TURNS = 24


async def test_one_savers_turns_on_one_thread_at_once_all_land(
    make_store: Callable[..., Any],
) -> None:
    saver = JournalSaver(await make_store())
    thread = "turns-at-once"
    ids = [str(uuid6(clock_seq=-1)) for _ in range(TURNS)]

    async def turn(i: int) -> None:
        checkpoint = empty_checkpoint()
        checkpoint["id"] = ids[i]
        checkpoint["channel_values"] = {"step": i}
        checkpoint["channel_versions"] = {"step": i + 1}
        config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        config = await saver.aput(config, checkpoint, {"step": i}, {"step": i + 1})
        await saver.aput_writes(config, [("step", i)], f"task-{i}")

    await asyncio.gather(*(turn(i) for i in range(TURNS)))
    assert not saver._locks  # dropped with their last user
    await saver.averify_thread(thread)  # the whole chain, read and checked from seq 1
    base: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    listed = [c async for c in saver.alist(base)]
    assert sorted(c.checkpoint["id"] for c in listed) == sorted(ids)
    assert all(len(c.pending_writes or []) == 1 for c in listed)
    fresh = JournalSaver(saver.store)  # a new saver reads what landed, as written
    latest = await fresh.aget_tuple(base)
    assert latest is not None and latest.checkpoint["id"] == max(ids)
