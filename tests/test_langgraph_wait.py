"""A second LangGraph worker on a thread another one holds: refused at once, or after ``wait``.

The saver keeps a thread's lease for ``lease_ttl`` after its last write, so a web app whose
requests for one thread land on different workers meets ``ThreadBusyError``. Two ways out,
both shown here on both dialects: the worker that finished its request releases the thread
(``arelease``), or the next one waits for it (``JournalSaver(..., wait=SECONDS)``, with
backoff, as the session adapters wait for a conversation's claim). The default, ``wait=0``,
refuses at once. Two stores on their own engines: two workers, as the database sees them.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

import pytest

from agentplane_journal import ThreadBusyError

try:
    from langgraph.graph import END, START, StateGraph

    from agentplane_journal.langgraph import JournalSaver
except ImportError:  # pragma: no cover - the extra is absent
    if os.environ.get("CI"):
        raise
    pytest.skip("langgraph is not installed (pip install -e '.[test]')", allow_module_level=True)

THREAD = "ticket-7"


def _step(state: dict[str, Any]) -> dict[str, Any]:
    return {"n": state["n"] + 1}


def _graph(saver: JournalSaver) -> Any:
    builder = StateGraph(dict)
    builder.add_node("step", _step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


def _cfg() -> dict[str, Any]:
    return {"configurable": {"thread_id": THREAD}}


async def _workers(make_store: Callable[..., Any], **second: Any) -> tuple[Any, Any, Any, Any]:
    first = JournalSaver(await make_store())
    other = JournalSaver(await make_store(), **second)
    return first, _graph(first), other, _graph(other)


async def test_by_default_a_held_thread_is_refused_at_once(
    make_store: Callable[..., Any],
) -> None:
    first, one, _, two = await _workers(make_store)
    await one.ainvoke({"n": 0}, _cfg())
    started = time.monotonic()
    with pytest.raises(ThreadBusyError) as busy:
        await two.ainvoke({"n": 0}, _cfg())
    assert time.monotonic() - started < 2
    assert busy.value.owner == first.owner and busy.value.waited == 0
    assert "arelease" in str(busy.value) and "wait=" in str(busy.value)


async def test_releasing_per_request_lets_the_next_worker_go_on_at_once(
    make_store: Callable[..., Any],
) -> None:
    first, one, second, two = await _workers(make_store)
    for saver, app in [(first, one), (second, two), (first, one)]:  # requests alternate
        await app.ainvoke({"n": 0}, _cfg())
        await saver.arelease(THREAD)  # the end of the request
    state = await two.aget_state(_cfg())
    assert state.values["n"] == 1 and len([s async for s in second.alist(_cfg())]) >= 3


async def test_a_worker_with_wait_goes_on_once_the_holder_releases(
    make_store: Callable[..., Any],
) -> None:
    first, one, _, two = await _workers(make_store, wait=10)
    await one.ainvoke({"n": 0}, _cfg())

    async def release_later() -> None:
        await asyncio.sleep(0.5)
        await first.arelease(THREAD)

    started = time.monotonic()
    await asyncio.gather(release_later(), two.ainvoke({"n": 5}, _cfg()))
    assert 0.4 < time.monotonic() - started < 8  # it waited, and not for the whole lease
    assert (await two.aget_state(_cfg())).values["n"] == 6


async def test_a_worker_with_wait_is_refused_when_the_thread_stays_held(
    make_store: Callable[..., Any],
) -> None:
    _, one, _, two = await _workers(make_store, wait=0.6)
    await one.ainvoke({"n": 0}, _cfg())
    started = time.monotonic()
    with pytest.raises(ThreadBusyError, match=r"after waiting 0\.6s") as busy:
        await two.ainvoke({"n": 0}, _cfg())
    assert time.monotonic() - started >= 0.5
    assert busy.value.waited == 0.6


async def test_wait_must_be_seconds(make_store: Callable[..., Any]) -> None:
    store = await make_store()
    for wrong in (-1, True, "3", float("nan")):
        with pytest.raises(ValueError, match="wait must be a number of seconds"):
            JournalSaver(store, wait=wrong)
