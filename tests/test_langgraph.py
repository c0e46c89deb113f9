"""``JournalSaver`` under LangGraph's two published failures, and with a real graph.

* langchain-ai/langgraph#8796: two processes writing one thread fork its history, on
  ``PostgresSaver`` too. Here the second writer is refused (``ThreadBusyError`` while the
  first holds the thread, ``ThreadMovedError`` when it read a state the first has since
  moved past) and the history stays one line.
* langchain-ai/langgraph#8938: ``SqliteSaver`` accepts content tampering, truncation,
  deletion, reordering and forged insertion and resumes from the forged checkpoint. Here each
  edit, made with SQL on the journal table, fails the read (a sealed thread, or a signed
  one, for the two that only a seal or a signature can catch), and the graph does not resume.
* A ``StateGraph`` with a human-in-the-loop interrupt, its resume and time travel, through
  ``ainvoke`` and through ``invoke`` (a sync graph in a worker thread), on both dialects.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable
from typing import Any

import pytest

from agentplane_journal import (
    CorruptRecordError,
    Ed25519Signer,
    Ed25519Verifier,
    RunSealedError,
    ThreadBusyError,
    ThreadMovedError,
    verify_chain,
)
from agentplane_journal.core.canon_v1 import canonical_bytes_v1

pytestmark = pytest.mark.slow

try:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6
    from langgraph.types import Command

    from agentplane_journal.langgraph import JournalSaver, thread_run

    from support.langgraph_graph import cfg, forge_tail, graph, sql
except ImportError:  # pragma: no cover - the extra is absent
    if os.environ.get("CI"):
        raise
    pytest.skip("langgraph is not installed (pip install -e '.[test]')", allow_module_level=True)


async def linear(saver: JournalSaver, thread: str) -> list[str]:
    """The thread's checkpoint ids oldest first, asserting each one's parent is the one
    before it (one line, no fork)."""
    tuples = [t async for t in saver.alist(cfg(thread))][::-1]
    for before, after in itertools.pairwise(tuples):
        assert after.parent_config is not None
        assert after.parent_config["configurable"]["checkpoint_id"] == before.checkpoint["id"]
    return [t.checkpoint["id"] for t in tuples]


# -- #8796: two writers on one thread ------------------------------------------------------


async def test_a_second_process_writing_the_thread_is_refused_and_history_stays_linear(
    make_store: Callable[..., Any],
) -> None:
    # Two stores on their own engines: two processes, as far as the database can tell.
    first = JournalSaver(await make_store())
    second = JournalSaver(await make_store())
    one, two = graph(first), graph(second)
    thread = "thread-8796"

    # Both read the empty thread; the first writes it up to the interrupt.
    assert await second.aget_tuple(cfg(thread)) is None
    await one.ainvoke({"topic": "a", "log": []}, cfg(thread))
    before = await linear(first, thread)

    # The second, started on the same thread while the first holds it: refused, no write.
    with pytest.raises(ThreadBusyError) as busy:
        await two.ainvoke({"topic": "b", "log": []}, cfg(thread))
    assert busy.value.thread_id == thread and busy.value.owner == first.owner
    assert "refused, nothing written" in str(busy.value)
    assert await linear(first, thread) == before

    # The second reads the thread; then the first resumes it and lets go. The second's
    # write from what it read is refused: going on from a stale state would fork.
    stale = await second.aget_tuple(cfg(thread))
    assert stale is not None
    await one.ainvoke(Command(resume="no"), cfg(thread))
    await first.aclose()
    before = await linear(first, thread)
    released = await second.store.lease_of(thread_run(thread))
    with pytest.raises(ThreadMovedError) as moved:
        await second.aput(stale.config, empty_checkpoint(), {"source": "loop", "step": 9}, {})
    assert moved.value.found > moved.value.seen
    assert await linear(first, thread) == before
    # The claim, the check and the write are one transaction: the refusal claimed nothing.
    assert await second.store.lease_of(thread_run(thread)) == released

    # A fresh invocation reads first, then goes on from the first's state: one line.
    done = await two.ainvoke({"topic": "b", "log": []}, cfg(thread))
    assert done["log"][:3] == ["draft:a", "review:no", "published"]
    after = await linear(second, thread)
    assert after[: len(before)] == before and len(after) > len(before)
    await second.averify_thread(thread)
    await second.aclose()


async def test_a_displaced_writer_is_fenced_when_its_lease_is_taken_over(
    make_store: Callable[..., Any],
) -> None:
    first = JournalSaver(await make_store(), lease_ttl=2)
    second = JournalSaver(await make_store(), lease_ttl=2)
    thread = "thread-takeover"
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    await first.aget_tuple(config)
    stored = await first.aput(config, empty_checkpoint(), {"step": 0}, {})
    # The lease lapses (the store's clock is the tests' fake one), the second takes over.
    first.store._clock.advance(5)  # type: ignore[attr-defined]
    await second.aget_tuple(config)
    await second.aput(stored, empty_checkpoint(), {"step": 1}, {})
    # The first's cached epoch is stale: its next write renews, fails, re-acquires -> busy.
    first._leases = {k: (e, 0.0) for k, (e, _) in first._leases.items()}
    with pytest.raises(ThreadBusyError):
        await first.aput(stored, empty_checkpoint(), {"step": 1}, {})
    assert len(await linear(second, thread)) == 2


# -- #8938: five at-rest edits, each caught on read -----------------------------------------


async def written(make_store: Callable[..., Any], thread: str, **kw: Any) -> JournalSaver:
    """A thread written up to the interrupt by a saver that has since closed (a fresh
    reader, later, sees what is at rest)."""
    saver = JournalSaver(await make_store(**kw))
    await graph(saver).ainvoke({"topic": "t", "log": []}, cfg(thread))
    await saver.aclose()
    return saver


EDITS = {
    # A record's body rewritten in place (every body names its kind, LangGraph...).
    "content": "UPDATE journal SET raw = CAST(REPLACE(CAST(raw AS TEXT), 'LangGraph', "
    "'LangGraff') AS BLOB) WHERE tenant = :t AND run_id = :r AND seq = 2",
    "deletion": "DELETE FROM journal WHERE tenant = :t AND run_id = :r AND seq = 2",
    # Rows 2 and 3 change places (by way of a free seq: the primary key holds at each step).
    "reordering": "UPDATE journal SET seq = 1000000 WHERE tenant = :t AND run_id = :r AND seq = 2;"
    "UPDATE journal SET seq = 2 WHERE tenant = :t AND run_id = :r AND seq = 3;"
    "UPDATE journal SET seq = 3 WHERE tenant = :t AND run_id = :r AND seq = 1000000",
}


@pytest.mark.parametrize("edit", sorted(EDITS))
async def test_an_edit_inside_the_thread_is_caught_on_read(
    make_store: Callable[..., Any], dialect: str, edit: str
) -> None:
    thread = f"thread-{edit}"
    await written(make_store, thread)
    reader = JournalSaver(await make_store())
    assert await reader.aget_tuple(cfg(thread)) is not None
    statement = EDITS[edit]
    if dialect == "postgresql" and edit == "content":
        statement = (
            "UPDATE journal SET raw = convert_to(replace(convert_from(raw, 'UTF8'), 'LangGraph', "
            "'LangGraff'), 'UTF8') WHERE tenant = :t AND run_id = :r AND seq = 2"
        )
    for part in statement.split(";"):
        await sql(reader.store, part, r=str(thread_run(thread)))
    # The saver that read the thread before keeps what it verified (records are
    # append-only), so it goes on from the true state; every read that reads the edit
    # fails: its own full check, and any other saver's read.
    with pytest.raises(CorruptRecordError):
        await reader.averify_thread(thread)
    fresh = JournalSaver(await make_store())
    with pytest.raises(CorruptRecordError):
        await fresh.aget_tuple(cfg(thread))
    with pytest.raises(CorruptRecordError):
        [t async for t in JournalSaver(await make_store()).alist(cfg(thread))]
    with pytest.raises(CorruptRecordError):  # the graph does not resume from it
        await graph(JournalSaver(await make_store())).ainvoke(Command(resume="yes"), cfg(thread))


async def test_truncation_is_caught_by_the_seal_and_by_the_writer_that_holds_the_thread(
    make_store: Callable[..., Any],
) -> None:
    # The live writer knows the head it wrote: a cut tail is caught without a seal.
    live = JournalSaver(await make_store())
    await graph(live).ainvoke({"topic": "t", "log": []}, cfg("thread-live"))
    run = str(thread_run("thread-live"))
    await sql(
        live.store,
        "DELETE FROM journal WHERE tenant = :t AND run_id = :r AND seq = "
        "(SELECT MAX(seq) FROM journal WHERE tenant = :t AND run_id = :r)",
        r=run,
    )
    with pytest.raises(CorruptRecordError, match="deleted or rewritten"):
        await live.aget_tuple(cfg("thread-live"))

    # At rest, a fresh reader needs the seal.
    sealer = JournalSaver(await make_store())
    await graph(sealer).ainvoke({"topic": "t", "log": []}, cfg("thread-sealed"))
    await sealer.aseal_thread("thread-sealed")
    await sealer.aclose()
    run = str(thread_run("thread-sealed"))
    await sql(
        sealer.store,
        "DELETE FROM journal WHERE tenant = :t AND run_id = :r AND seq = "
        "(SELECT MAX(seq) FROM journal WHERE tenant = :t AND run_id = :r)",
        r=run,
    )
    reader = JournalSaver(await make_store())
    with pytest.raises(CorruptRecordError, match="sealed"):
        await reader.aget_tuple(cfg("thread-sealed"))


async def test_a_forged_tail_is_caught_by_the_seal_or_the_signature_and_never_resumed(
    make_store: Callable[..., Any],
) -> None:
    # Sealed: the forged record extends the chain past the sealed head.
    sealer = JournalSaver(await make_store())
    await graph(sealer).ainvoke({"topic": "t", "log": []}, cfg("thread-fs"))
    await sealer.aseal_thread("thread-fs")
    await forge_tail(sealer.store, "thread-fs", sealer)
    reader = JournalSaver(await make_store())
    with pytest.raises(CorruptRecordError, match="sealed"):
        await reader.aget_tuple(cfg("thread-fs"))
    with pytest.raises(RunSealedError):  # and a sealed thread takes no write anyway
        await sealer.aput(
            {"configurable": {"thread_id": "thread-fs", "checkpoint_ns": ""}},
            empty_checkpoint(),
            {},
            {},
        )

    # Signed: the attacker holds no key, so the forged record is unsigned.
    signer = Ed25519Signer("lg-key", bytes(range(32)))
    verifier = Ed25519Verifier().trust("lg-key", signer.public_key)
    writer = JournalSaver(
        await make_store(signer=signer), verifier=verifier, require_signature=True
    )
    app = graph(writer)
    await app.ainvoke({"topic": "t", "log": []}, cfg("thread-fg"))
    await writer.aclose()
    await forge_tail(writer.store, "thread-fg", writer)
    reader = JournalSaver(
        await make_store(signer=signer), verifier=verifier, require_signature=True
    )
    with pytest.raises(CorruptRecordError, match="no signature"):
        await graph(reader).ainvoke(Command(resume="yes"), cfg("thread-fg"))
    # Without the seal or a signature, the forged tail is a well-formed record: the limit
    # docs/guides/langgraph.md states.
    plain = JournalSaver(await make_store())
    latest = await plain.aget_tuple(cfg("thread-fg"))
    assert latest is not None and latest.checkpoint["channel_values"]["topic"] == "forged"


# -- a real graph: interrupt, resume, time travel; async and sync ---------------------------


async def run_the_graph(app: Any, call: Callable[..., Any], thread: str) -> None:
    first = await call(app.invoke, {"topic": "x", "log": []}, cfg(thread))
    assert "__interrupt__" in first
    state = await call(app.get_state, cfg(thread))
    assert state.next == ("review",)
    done = await call(app.invoke, Command(resume="yes"), cfg(thread))
    assert done["log"] == ["draft:x", "review:yes", "published"]

    # Time travel: back to the checkpoint before review, and take the other answer.
    history = [s async for s in _history(app, call, thread)]
    before_review = next(s for s in history if s.next == ("review",))
    again = await call(app.invoke, None, before_review.config)
    assert "__interrupt__" in again
    branch = await call(app.invoke, Command(resume="no"), cfg(thread))
    assert branch["log"] == ["draft:x", "review:no", "published"]
    latest = await call(app.get_state, cfg(thread))
    assert latest.values["log"][-2:] == ["review:no", "published"]


async def _history(app: Any, call: Callable[..., Any], thread: str) -> Any:
    for state in await call(lambda c: list(app.get_state_history(c)), cfg(thread)):
        yield state


async def test_a_graph_interrupts_resumes_and_travels_in_time_async(
    make_store: Callable[..., Any],
) -> None:
    saver = JournalSaver(await make_store())
    app = graph(saver)

    async def call(fn: Any, *args: Any) -> Any:
        name = getattr(fn, "__name__", "")
        if name in ("invoke", "get_state"):
            return await getattr(app, "a" + name)(*args)
        return await asyncio.to_thread(fn, *args)  # get_state_history: a sync generator

    await run_the_graph(app, call, "thread-async")
    await saver.averify_thread("thread-async")
    await saver.aclose()


async def test_a_sync_graph_interrupts_resumes_and_travels_in_time(
    make_store: Callable[..., Any],
) -> None:
    saver = JournalSaver(await make_store())
    app = graph(saver)

    async def call(fn: Any, *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)  # a sync graph in a worker thread

    await run_the_graph(app, call, "thread-sync")
    with pytest.raises(asyncio.InvalidStateError, match="other than its event loop"):
        saver.get_tuple(cfg("thread-sync"))  # on the loop's own thread: refused, not deadlocked
    await saver.aclose()


async def test_tenants_come_from_the_config(make_store: Callable[..., Any]) -> None:
    saver = JournalSaver(await make_store())
    app = graph(saver)
    for tenant in ("acme", "globex"):
        config = {"configurable": {"thread_id": "shared", "tenant": tenant}}
        await app.ainvoke({"topic": tenant, "log": []}, config)
    acme = await saver.aget_tuple({"configurable": {"thread_id": "shared", "tenant": "acme"}})
    globex = saver.for_tenant("globex")
    other = await globex.aget_tuple(cfg("shared"))
    assert acme is not None and other is not None
    assert acme.checkpoint["channel_values"]["topic"] == "acme"
    assert other.checkpoint["channel_values"]["topic"] == "globex"
    assert await saver.aget_tuple(cfg("shared")) is None  # the store's own tenant: untouched
    await saver.aclose()


async def test_deleting_pruning_and_copying_are_records_and_the_chain_verifies(
    make_store: Callable[..., Any],
) -> None:
    saver = JournalSaver(await make_store())
    app = graph(saver)
    await app.ainvoke({"topic": "t", "log": []}, cfg("src"))
    await app.ainvoke(Command(resume="yes"), cfg("src"))
    await saver.acopy_thread("src", "dst")
    await saver.aprune(["src"], strategy="keep_latest")
    assert len([t async for t in saver.alist(cfg("src"))]) == 1
    await saver.adelete_thread("src")
    assert await saver.aget_tuple(cfg("src")) is None

    records = await saver.store.read(thread_run("src"))
    kinds = [r.kind for r in records]
    assert kinds[-2:] == ["LangGraphDeleted", "LangGraphDeleted"]  # prune, then delete
    assert records[-2].body["why"] == "prune" and records[-2].body["checkpoints"]
    assert records[-1].body["why"] == "delete_thread" and "checkpoints" not in records[-1].body
    assert kinds.count("LangGraphCheckpoint") > 1  # nothing erased: the journal is append-only
    await saver.averify_thread("src")

    copied = await saver.store.read(thread_run("dst"))
    assert copied[0].kind == "LangGraphCopied" and copied[0].body["from"] == "src"
    assert copied[0].body["from_seq"] == len(records) - 2  # the source's head when copied
    done = await app.aget_state(cfg("dst"))
    assert done.values["log"] == ["draft:t", "review:yes", "published"]
    await saver.aclose()


async def test_a_saver_on_an_agentplane_022_tenant_writes_that_profile(
    make_store: Callable[..., Any],
) -> None:
    """The saver's kinds are our own; a 0.22 tenant takes them at its record version, sealed
    over its canonical bytes, and a cold reader (opened in the journal's own profile) gets
    the same state back."""
    saver = JournalSaver(await make_store(profile="agentplane-0.22"))
    app = graph(saver)
    await app.ainvoke({"topic": "p", "log": []}, cfg("p22"))
    await app.ainvoke(Command(resume="yes"), cfg("p22"))
    await saver.acopy_thread("p22", "p22-copy")
    await saver.aprune(["p22"], strategy="keep_latest")
    records = await saver.store.read(thread_run("p22"))
    copied = await saver.store.read(thread_run("p22-copy"))
    kinds = {r.kind for r in [*records, *copied]}
    assert kinds == {
        "LangGraphCheckpoint",
        "LangGraphWrites",
        "LangGraphDeleted",
        "LangGraphCopied",
    }
    for record in [*records, *copied]:
        assert record.body["v"] == 1
        assert record.raw == canonical_bytes_v1(record.body, path="body")
    head = await saver.averify_thread("p22")
    assert head == verify_chain(records)
    await saver.aclose()

    reader = JournalSaver(await make_store())  # profile=None: the journal's own
    latest = await reader.aget_tuple(cfg("p22"))
    assert latest is not None and latest.checkpoint["channel_values"]["log"] == [
        "draft:p",
        "review:yes",
        "published",
    ]
    assert len([t async for t in reader.alist(cfg("p22"))]) == 1  # pruned to the latest
    done = await graph(reader).aget_state(cfg("p22-copy"))
    assert done.values["log"] == ["draft:p", "review:yes", "published"]
    assert await reader.averify_thread("p22-copy") == verify_chain(copied)
    await reader.aclose()


def test_a_program_without_an_event_loop_opens_the_saver_by_url(database_url: str) -> None:
    thread = f"thread-open-{os.urandom(4).hex()}"
    with JournalSaver.open(database_url) as saver:
        app = graph(saver)
        assert "__interrupt__" in app.invoke({"topic": "s", "log": []}, cfg(thread))
        done = app.invoke(Command(resume="ok"), cfg(thread))
        assert done["log"] == ["draft:s", "review:ok", "published"]
        head = saver.verify_thread(thread)
    with JournalSaver.open(database_url) as again:  # the lease was released on exit
        assert again.verify_thread(thread) == head
        again.delete_thread(thread)
        assert again.get_tuple(cfg(thread)) is None


@pytest.mark.race
async def test_k_processes_resuming_one_thread_at_once_leave_one_line(
    instances: Callable[..., Any],
) -> None:
    """#8796 as a race on PostgreSQL: K savers, each on its own engine, read one thread
    and then all write the next checkpoint from the state they read. Exactly one lands;
    every other is refused (busy or moved), and the thread's history is one line."""
    from support.races import no_surprises, race

    stores = await instances(8)
    savers = [JournalSaver(store) for store in stores]
    thread = f"thread-race-{os.urandom(4).hex()}"
    first = await savers[0].aput(
        {"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
        empty_checkpoint(),
        {"step": 0},
        {},
    )
    await savers[0].aclose()
    read = [await s.aget_tuple(cfg(thread)) for s in savers]
    assert all(r is not None for r in read)

    def put(saver: JournalSaver, parent: Any) -> Callable[[], Any]:
        async def call() -> Any:
            checkpoint = empty_checkpoint()
            checkpoint["id"] = str(uuid6(clock_seq=-1))
            return await saver.aput(parent.config, checkpoint, {"step": 1}, {})

        return call

    results = await race(*(put(s, r) for s, r in zip(savers, read, strict=True)))
    no_surprises(results, ThreadBusyError, ThreadMovedError)
    landed = [r for r in results if not isinstance(r, BaseException)]
    assert len(landed) == 1, results
    ids = await linear(savers[1], thread)
    assert ids[0] == first["configurable"]["checkpoint_id"] and len(ids) == 2
    for saver in savers:
        await saver.aclose()
