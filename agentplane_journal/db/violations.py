"""What a unique violation on the journal means: decided by the constraint it names.

Two very different facts reach a writer as the same driver error. The partial unique index
``journal_effect_started`` refusing a row is exactly-once holding: the effect has already
started, and no retry can ever get past it (:class:`DuplicateEffectError`). The primary key
``(tenant, run_id, seq)`` refusing a row is a race: another writer put a record at that
chain position after this transaction read the head (:class:`AppendConflictError`,
retryable: the next append reads the new head). Reporting the race as a duplicate effect
sends an operator hunting for an effect that never ran twice; agentplane 0.22.0 fixed
exactly that, and so does this: every append path (the general unit of work in
``journal/store.py`` and both hot paths in ``backends/``) asks :func:`journal_collision`, which
asks the dialect object which constraint the error names (PostgreSQL: asyncpg's
``constraint_name``; SQLite: the extended result code, and the columns it reports). A unique
violation on any other name is not interpreted here: it stays the database's error.
"""

from __future__ import annotations

import enum

from agentplane_journal.core.ids import RunId
from agentplane_journal.db.dialect import Dialect
from agentplane_journal.db.models import EFFECT_STARTED_INDEX, Journal
from agentplane_journal.errors import AppendConflictError

__all__ = ["Collision", "append_raced", "journal_collision"]


class Collision(enum.Enum):
    """Which of the journal's unique constraints refused a row."""

    #: ``journal_effect_started``: a second start of one effect key in one run.
    EFFECT_STARTED = "effect started"
    #: The primary key: a record already holds that ``(tenant, run_id, seq)``.
    CHAIN_POSITION = "chain position"


def journal_collision(dialect: Dialect, exc: BaseException) -> tuple[Collision, str] | None:
    """Which journal constraint ``exc`` (SQLAlchemy's or the driver's own error) names, and
    that name; ``None`` for anything else (not a unique violation, or another index's)."""
    table = Journal.__table__
    name = dialect.constraint(exc, table)
    if name is None:
        return None
    if name == EFFECT_STARTED_INDEX:
        return Collision.EFFECT_STARTED, name
    if name == table.primary_key.name:
        return Collision.CHAIN_POSITION, name
    return None


def append_raced(
    run: RunId, seq: int, constraint: str, cause: BaseException
) -> AppendConflictError:
    """The caller's error for a batch whose chain position ``seq`` (its first) was taken."""
    error = AppendConflictError(run, seq, str(constraint))
    error.__cause__ = cause
    return error
