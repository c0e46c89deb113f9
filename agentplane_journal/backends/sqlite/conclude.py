"""A run's conclusion on SQLite's writer thread: the outcome, the seal into the log, the release.

Part of the repository. :meth:`SqlJournalStore.conclude
<agentplane_journal.journal.store.SqlJournalStore.conclude>` appends the closing records,
enters the run into the tenant's Merkle log and releases its lease in one transaction. As a
general unit of work that is a dozen statements, each several hops between the event loop
and aiosqlite's thread (about 45 of a 3-step workflow's 48). Here it is what the writer's
transaction function does after the records (:func:`finish`), on the connection's own thread,
so the whole conclusion is one hop and shares the group commit with whatever else is queued.

The statements are the general unit's own SQLAlchemy statements (the outcome index's, and
the log's through :meth:`TenantLog.append_with
<agentplane_journal.journal.log.TenantLog.append_with>`), compiled once for SQLite and run
on the ``sqlite3`` connection (:func:`execute`): the rows, the log positions and the stored
tree are the ones the general unit writes, byte for byte.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite

from agentplane_journal.core.batch import RELEASED_OWNER
from agentplane_journal.db.dialect import SqliteDialect, counter_next
from agentplane_journal.db.hotpath import LogSeal
from agentplane_journal.db.models import RunOutcome

__all__ = ["execute", "finish"]

_SQLITE = SQLiteDialect_pysqlite()
_DIALECT = SqliteDialect()
_compiled: dict[tuple[int, tuple[str, ...]], tuple[Any, str, tuple[str, ...], dict[str, Any]]] = {}
_lock = threading.Lock()


def _compile(statement: Any, keys: tuple[str, ...]) -> tuple[str, tuple[str, ...], dict[str, Any]]:
    """``statement`` as SQLite text, its parameters' names in order and their defaults;
    compiled once per statement object (kept alive in the cache, so its id stays its own)."""
    key = (id(statement), keys)
    found = _compiled.get(key)
    if found is None:
        compiled = statement.compile(dialect=_SQLITE, column_keys=list(keys) or None)
        names = tuple(compiled.positiontup or ())
        found = (statement, str(compiled), names, dict(compiled.params))
        with _lock:
            _compiled[key] = found
    return found[1], found[2], found[3]


def execute(
    conn: sqlite3.Connection, statement: Any, parameters: Mapping[str, Any] | Sequence[Any]
) -> list[Any]:
    """Run a SQLAlchemy statement on ``conn`` (a dict of parameters, or a list of dicts for an
    insert of several rows); its rows, if it returns any."""
    if isinstance(parameters, Mapping):
        sql, names, defaults = _compile(statement, ())
        values = tuple(parameters[n] if n in parameters else defaults[n] for n in names)
        return conn.execute(sql, values).fetchall()
    rows = list(parameters)
    if not rows:
        return []
    sql, names, defaults = _compile(statement, tuple(rows[0]))
    conn.executemany(
        sql, [tuple(row[n] if n in row else defaults[n] for n in names) for row in rows]
    )
    return []


#: The general unit's outcome index (``RunWrites.after_rows``): the next conclusion ordinal
#: under the write lock, then the run's outcome row.
_ORDINAL = counter_next(
    _DIALECT,
    "run_conclusion_ordinal",
    select(func.coalesce(func.max(RunOutcome.ordinal), 0) + 1).scalar_subquery(),
)
_OUTCOME_INSERT = _DIALECT.insert(RunOutcome)
_OUTCOME = _OUTCOME_INSERT.on_conflict_do_update(
    index_elements=[RunOutcome.tenant, RunOutcome.run_id],
    set_={"outcome": _OUTCOME_INSERT.excluded.outcome, "ordinal": _OUTCOME_INSERT.excluded.ordinal},
)
#: ``SqlJournalStore.conclude``'s release: the lease at the conclusion's epoch, released.
_RELEASE = (
    "UPDATE run_lease SET owner = ?, expires_at = 0 WHERE tenant = ? AND run_id = ? AND epoch = ?"
)


def finish(
    conn: sqlite3.Connection,
    tenant: str,
    run_id: str,
    epoch: int,
    now: int,
    head: bytes,
    conclusion: str | None,
    outcome: str,
    seal: LogSeal,
) -> None:
    """What a conclusion writes after its records, in their transaction: the outcome index
    (``conclusion``, the ``RunSealed`` record's outcome), the run's leaf in the tenant's log
    (``seal``: the log's own statements, ``outcome`` its leaf's), and the lease released at
    ``epoch``. Any error rolls the whole conclusion back with the records."""
    if conclusion is not None:
        (ordinal,) = execute(conn, _ORDINAL, {})[0]
        execute(
            conn,
            _OUTCOME,
            [{"tenant": tenant, "run_id": run_id, "outcome": conclusion, "ordinal": ordinal}],
        )

    def run(statement: Any, parameters: Any) -> Sequence[Sequence[Any]]:
        return execute(conn, statement, parameters)

    seal(run, [(run_id, head, now, outcome)])
    conn.execute(_RELEASE, (RELEASED_OWNER, tenant, run_id, epoch))
