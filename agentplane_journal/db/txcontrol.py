"""``append_atomic``'s work writes inside the store's transaction; it may not end or control it.

The whole value of ``append_atomic`` is shared fate: the host's rows and the records that say
they were written commit together or not at all, under the run mutex and the fence the
append was checked with. A ``COMMIT`` sent as SQL text from inside ``work`` commits half of
that (``work``'s rows, without the records) and lets the records be written after the mutex
and the fence are gone; a ``ROLLBACK`` dissolves the transaction while the store goes on
to "commit" what is left; a ``SAVEPOINT``/``RELEASE`` of its own carves out a region whose
fate differs from the records'. SQLAlchemy does not see any of these (its transaction object
still looks open), so the check after ``work`` that catches ``session.commit()`` cannot.

So while ``work`` runs, every statement on the transaction's connection is looked at before
it is sent (a ``before_cursor_execute`` listener on that connection), and one whose leading
keyword ends or controls a transaction is refused there: it never reaches the database, and
:class:`~agentplane_journal.errors.TransactionEndedError` names it (agentplane 0.22.0's
``refuse_transaction_control``, the same verbs). A refusal ``work`` catches is remembered and
still refuses the batch. SQLAlchemy's own savepoints (``session.begin_nested()``) pass: the
session tracks them, so their fate is the transaction's.

What this does not cover, so nobody mistakes it for a sandbox: a statement sent on the
driver's raw connection, a function or ``DO`` block with side effects on the transaction,
dynamic SQL. It is a guard against the honest mistake (code ported from a place that managed
its own transactions), not against hostile code the host itself registered.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import (
    ReleaseSavepointClause,
    RollbackToSavepointClause,
    SavepointClause,
)

from agentplane_journal.core.ids import RunId
from agentplane_journal.errors import TransactionEndedError

__all__ = ["refusing_transaction_control", "transaction_verb"]

#: Leading keywords that end or control a transaction, on either database (``END`` is
#: ``COMMIT``, ``ABORT`` is ``ROLLBACK``; ``START TRANSACTION`` is ``BEGIN``).
_VERBS = frozenset({"COMMIT", "END", "ROLLBACK", "ABORT", "BEGIN", "START", "SAVEPOINT", "RELEASE"})
#: Keywords that do so only before ``TRANSACTION``: ``PREPARE TRANSACTION`` (a bare
#: ``PREPARE`` prepares a statement) and ``SET TRANSACTION`` (other ``SET``s are settings).
_BEFORE_TRANSACTION = frozenset({"PREPARE", "SET"})
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SQLALCHEMY_SAVEPOINTS = (SavepointClause, RollbackToSavepointClause, ReleaseSavepointClause)


def _lead(sql: str) -> str:
    """``sql`` from its first token: whitespace, ``;``, ``-- ...`` and (nested) ``/* ... */``
    comments skipped, as both databases skip them."""
    i, n = 0, len(sql)
    while i < n:
        if sql[i].isspace() or sql[i] == ";":
            i += 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if sql.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif sql.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        else:
            break
    return sql[i:]


def transaction_verb(sql: str) -> str | None:
    """The keyword (upper case) if ``sql`` would end or control a transaction, else ``None``."""
    words = _WORD.findall(_lead(sql)[:200])
    first = words[0].upper() if words else ""
    if first in _VERBS:
        return first
    if first in _BEFORE_TRANSACTION and len(words) > 1 and words[1].upper() == "TRANSACTION":
        return f"{first} TRANSACTION"
    return None


@contextmanager
def refusing_transaction_control(connection: Connection, run: RunId) -> Iterator[list[str]]:
    """While the block runs, refuse transaction control on ``connection`` (the session's, in
    the append's transaction). Yields the refused verbs, so a refusal the block caught is
    still known after it."""
    refused: list[str] = []

    def before(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        compiled = getattr(context, "compiled", None)
        if isinstance(getattr(compiled, "statement", None), _SQLALCHEMY_SAVEPOINTS):
            return  # session.begin_nested(): tracked by the session, its fate is ours
        verb = transaction_verb(statement)
        if verb is not None:
            refused.append(verb)
            raise TransactionEndedError(run, verb)

    event.listen(connection, "before_cursor_execute", before)
    try:
        yield refused
    finally:
        event.remove(connection, "before_cursor_execute", before)
