"""What a put builds (``langgraph/records.py``): the same appends as the checked constructor,
without writing the payload's canonical bytes once more; every text checked instead, so what
cannot be written (a lone surrogate) or read back (a checkpoint id that is not text) is
refused at the put, naming the member, with nothing written. Both dialects for the puts."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

try:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    from agentplane_journal.langgraph import JournalSaver
    from agentplane_journal.langgraph.records import (
        CHECKPOINT,
        WRITES,
        checkpoint_append,
        thread_run,
        version_key,
        writes_append,
    )
except ImportError:  # pragma: no cover - the extra is absent
    if os.environ.get("CI"):
        raise
    pytest.skip("langgraph is not installed (pip install -e '.[test]')", allow_module_level=True)

from agentplane_journal.core.profile import AGENTPLANE_0_4, AGENTPLANE_0_22, WireProfile

#: Texts with canonical bytes: any code point but a lone surrogate.
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
typed = st.tuples(st.sampled_from(["msgpack", "json", "empty"]), st.binary(max_size=40))
profiles = st.sampled_from([AGENTPLANE_0_4, AGENTPLANE_0_22])


@given(
    st.one_of(
        st.integers(min_value=-(2**70), max_value=2**70),
        st.text(max_size=12),  # lone surrogates too: json.dumps escapes them
        st.booleans(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.none(),
    )
)
def test_version_key_is_the_json_text_of_the_version(version: object) -> None:
    assert version_key(version) == json.dumps(version, sort_keys=True)


@settings(max_examples=200)
@given(
    texts,
    texts,
    texts,
    st.none() | texts,
    typed,
    typed,
    st.lists(st.tuples(texts, texts, typed), max_size=3),
    st.none() | st.lists(st.tuples(texts, texts, st.integers(1, 2**62), texts), max_size=3),
    st.lists(st.tuples(st.integers(1, 2**62), texts), max_size=2),
    profiles,
)
def test_a_checkpoint_append_is_the_checked_constructors(
    thread: str,
    ns: str,
    cid: str,
    parent: str | None,
    checkpoint: tuple[str, bytes],
    metadata: tuple[str, bytes],
    blobs: list[tuple[str, str, tuple[str, bytes]]],
    uses: list[tuple[str, str, int, str]] | None,
    pending: list[tuple[int, str]],
    profile: WireProfile,
) -> None:
    run = thread_run(thread or "t")
    got = checkpoint_append(
        run, thread, ns, cid, parent, checkpoint, metadata, blobs,
        profile=profile, uses=uses, pending=pending,
    )  # fmt: skip
    payload: dict[str, Any] = {
        "thread": thread,
        "ns": ns,
        "id": cid,
        "checkpoint": _b64(checkpoint),
        "metadata": _b64(metadata),
        "blobs": [[c, v, *_b64(t)] for c, v, t in blobs],
    }
    if parent is not None:
        payload["parent"] = parent
    if uses is not None:
        payload["uses"] = [list(u) for u in uses]
        if pending:
            payload["pending"] = [list(p) for p in pending]
    assert got == profile.append(run, CHECKPOINT, payload)  # built and checked as before
    assert got.body(3, 1) == profile.append(run, CHECKPOINT, payload).body(3, 1)


@settings(max_examples=200)
@given(
    texts,
    texts,
    texts,
    texts,
    texts,
    st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), texts, typed), max_size=3),
    profiles,
)
def test_a_writes_append_is_the_checked_constructors(
    thread: str,
    ns: str,
    cid: str,
    task: str,
    path: str,
    writes: list[tuple[int, str, tuple[str, bytes]]],
    profile: WireProfile,
) -> None:
    run = thread_run(thread or "t")
    got = writes_append(run, thread, ns, cid, task, path, writes, profile=profile)
    payload = {
        "thread": thread,
        "ns": ns,
        "checkpoint": cid,
        "task": task,
        "path": path,
        "writes": [[i, c, *_b64(t)] for i, c, t in writes],
    }
    assert got == profile.append(run, WRITES, payload)


def _b64(value: tuple[str, bytes]) -> list[str]:
    import base64

    return [value[0], base64.b64encode(value[1]).decode("ascii")]


def _checkpoint(cid: object = None) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6(clock_seq=-1)) if cid is None else cid
    checkpoint["channel_values"] = {"step": 1}
    checkpoint["channel_versions"] = {"step": 1}
    return checkpoint


LONE = "\ud800"


@pytest.mark.parametrize(
    ("where", "member"),
    [
        ("thread_id", "thread"),
        ("checkpoint_ns", "ns"),
        ("checkpoint_id", "id"),
        ("parent", "parent"),
        ("channel", "channel"),
    ],
)
async def test_a_put_with_a_lone_surrogate_is_refused_naming_it(
    make_store: Callable[..., Any], where: str, member: str
) -> None:
    saver = JournalSaver(await make_store())
    thread = "surrogate" + (LONE if where == "thread_id" else "")
    configurable: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if where == "checkpoint_ns":
        configurable["checkpoint_ns"] = "ns" + LONE
    if where == "parent":
        configurable["checkpoint_id"] = "parent" + LONE
    checkpoint = _checkpoint("id" + LONE if where == "checkpoint_id" else None)
    versions: dict[str, Any] = {"step": 1}
    if where == "channel":
        checkpoint["channel_values"] = {"x" + LONE: 1}
        versions = {"x" + LONE: 1}
    with pytest.raises(ValueError, match=rf"payload\.{member}: .*lone surrogate"):
        await saver.aput({"configurable": configurable}, checkpoint, {}, versions)
    assert (await saver.store.head(thread_run(thread))).seq == 0  # nothing written


@pytest.mark.parametrize("member", ["task", "path", "channel"])
async def test_put_writes_with_a_lone_surrogate_is_refused_naming_it(
    make_store: Callable[..., Any], member: str
) -> None:
    saver = JournalSaver(await make_store())
    config: Any = {"configurable": {"thread_id": "surrogate-writes", "checkpoint_ns": ""}}
    config = await saver.aput(config, _checkpoint(), {}, {"step": 1})
    head = (await saver.store.head(thread_run("surrogate-writes"))).seq
    task, path, channel = "task", "", "step"
    if member == "task":
        task += LONE
    elif member == "path":
        path += LONE
    else:
        channel += LONE
    with pytest.raises(ValueError, match=rf"payload\.{member}: .*lone surrogate"):
        await saver.aput_writes(config, [(channel, 1)], task, path)
    assert (await saver.store.head(thread_run("surrogate-writes"))).seq == head


async def test_a_checkpoint_id_that_is_not_text_is_refused_at_the_put(
    make_store: Callable[..., Any],
) -> None:
    """It used to land, and then every read of the thread refused it as corrupt."""
    saver = JournalSaver(await make_store())
    config: Any = {"configurable": {"thread_id": "not-text", "checkpoint_ns": ""}}
    with pytest.raises(TypeError, match=r"payload\.id: .* must be a str"):
        await saver.aput(config, _checkpoint(cid=12345), {}, {"step": 1})
    assert await JournalSaver(saver.store).aget_tuple(config) is None  # nothing written
