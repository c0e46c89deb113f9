"""LangGraph's own conformance suite (``langgraph-checkpoint-conformance``) against
:class:`~agentplane_journal.langgraph.JournalSaver`, on SQLite and PostgreSQL: every base
capability and every extended one the saver implements (all of them: delete_for_runs,
copy_thread, prune), and once more on SQLite with every tenant in ``agentplane-0.22`` (the
store refuses a record in another profile, so the suite passing there means the saver wrote
0.22's). Slow (a few seconds a dialect): marked ``slow`` below."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agentplane_journal import SqlJournalStore

pytestmark = pytest.mark.slow


def _require(module: str) -> None:
    try:
        __import__(module)
    except ImportError:
        message = f"{module} is not installed (pip install -e '.[test]')"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the LangGraph tests: {message}")
        pytest.skip(message)


async def test_the_conformance_suite_passes_every_capability(
    make_store: Callable[..., Any],
) -> None:
    await _conformance(await make_store(), None)


async def test_the_conformance_suite_passes_with_lean_resume(
    make_store: Callable[..., Any],
) -> None:
    # Each thread's first get_tuple by a saver: its newest checkpoint and the records it names.
    await _conformance(await make_store(), None, lean_resume=True)


async def test_the_conformance_suite_passes_on_agentplane_022_tenants(
    sqlite_database: Callable[..., str],
) -> None:
    store = await SqlJournalStore.connect(sqlite_database())
    try:
        await _conformance(store, "agentplane-0.22")
    finally:
        await store.close()


async def _conformance(
    store: SqlJournalStore, profile: str | None, *, lean_resume: bool = False
) -> None:
    _require("langgraph.checkpoint.conformance")
    from langgraph.checkpoint.conformance import checkpointer_test, validate
    from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

    from agentplane_journal.langgraph import JournalSaver

    opened: list[SqlJournalStore] = []

    @checkpointer_test(name="JournalSaver")
    async def journal_saver() -> AsyncIterator[JournalSaver]:
        # One tenant per capability suite: list(None) and delete_for_runs walk a tenant.
        tenant = store.for_tenant(f"lg{os.urandom(5).hex()}", profile=profile)
        opened.append(tenant)
        saver = JournalSaver(tenant, lean_resume=lean_resume)
        yield saver
        await saver.aclose()

    report = await validate(journal_saver)
    failures = {
        name: result.failures for name, result in report.results.items() if not result.passed
    }
    assert not failures, failures
    assert {name for name, r in report.results.items() if r.detected} == {
        c.value for c in ALL_CAPABILITIES
    }
    if profile is not None:
        assert opened and {(await t.wire_profile()).name for t in opened} == {profile}
