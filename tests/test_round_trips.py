"""An append costs a fixed number of statements, whatever the batch size.

Counted with SQLAlchemy's engine events (statements sent through a cursor, plus the
transaction's BEGIN and COMMIT), not timed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from agentplane_journal import RunId, SqlJournalStore

from helpers import concluded, note


@contextmanager
def counting(store: SqlJournalStore) -> Iterator[list[str]]:
    seen: list[str] = []
    engine = store.engine.sync_engine

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement.split(None, 1)[0].upper())

    def on_begin(conn: Any) -> None:
        if store.engine.dialect.name == "postgresql":
            seen.append("BEGIN")  # asyncpg begins without a cursor; SQLite's is a statement

    def on_commit(conn: Any) -> None:
        seen.append("COMMIT")

    event.listen(engine, "before_cursor_execute", on_execute)
    event.listen(engine, "begin", on_begin)
    event.listen(engine, "commit", on_commit)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)
        event.remove(engine, "begin", on_begin)
        event.remove(engine, "commit", on_commit)


async def test_an_append_costs_five_statements_whatever_its_size(store: SqlJournalStore) -> None:
    run = RunId.generate()
    await store.append(1, [note(run)])  # the schema check and pool warm-up happen once
    sizes = {}
    for n in (1, 10, 1000):
        with counting(store) as seen:
            await store.append(1, [note(run, str(i)) for i in range(n)])
        sizes[n] = list(seen)
    assert sizes[1] == sizes[10] == sizes[1000]
    assert len(sizes[1]) == 5, sizes[1]  # BEGIN, run mutex, fence+seal+head, INSERT, COMMIT


async def test_a_concluding_append_costs_one_more(store: SqlJournalStore) -> None:
    run = RunId.generate()
    await store.append(1, [note(run)])
    with counting(store) as seen:
        await store.append(1, [note(run), concluded(run, "succeeded")])
    # the outcome upsert; SQLite also advances its ordinal counter (no sequences there)
    expected = 6 if store.engine.dialect.name == "postgresql" else 7
    assert len(seen) == expected, seen
