"""``audit_runs(after=...)`` refuses a wrong ``after`` before any statement, on both dialects.

Before, an int, a tuple or bytes went to the driver: PostgreSQL's failed inside asyncpg,
SQLite compared it by storage class and answered a page that meant nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event

from agentplane_journal import Append, RunId, SqlJournalStore


@pytest.fixture
def statements(store: SqlJournalStore) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(store.engine.sync_engine, "before_cursor_execute", record)
    yield seen
    event.remove(store.engine.sync_engine, "before_cursor_execute", record)


@pytest.mark.parametrize(
    ("after", "error"),
    [
        (5, TypeError),
        (1.5, TypeError),
        (True, TypeError),
        (b"run_01", TypeError),
        (("run_01", 1), TypeError),
        (["run_01"], TypeError),
        (object(), TypeError),
        ("run_\x00", ValueError),
        ("run_\ud800", ValueError),
    ],
)
async def test_a_wrong_after_is_refused_before_any_statement(
    store: SqlJournalStore, statements: list[str], after: Any, error: type[Exception]
) -> None:
    statements.clear()
    with pytest.raises(error, match="after"):
        await store.audit_runs(after, 10)
    assert statements == []


async def test_after_pages_by_run_id_or_by_any_stored_text(store: SqlJournalStore) -> None:
    runs = sorted((RunId.generate() for _ in range(3)), key=str)
    for run in runs:
        await store.append(0, [Append(run, "Note")])
    mine = set(map(str, runs))
    assert [r for r in await store.audit_runs(None, 10) if r in mine] == [str(r) for r in runs]
    assert [r for r in await store.audit_runs(runs[0], 10) if r in mine] == [
        str(r) for r in runs[1:]
    ]
    assert [r for r in await store.audit_runs(str(runs[1]), 10) if r in mine] == [str(runs[2])]
    # A value as a page returns it (a stored id need not be canonical) pages on, too.
    assert [r for r in await store.audit_runs("", 10) if r in mine] == [str(r) for r in runs]
    assert [r for r in await store.audit_runs("run_~", 10) if r in mine] == []
