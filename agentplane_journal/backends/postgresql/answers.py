"""What the PostgreSQL writer queues and what it answers: a :class:`Request` (an append already
chained onto the known head), a conclusion's extra (:class:`Conclusion`), the answers
(:data:`Result`, :data:`Answer`, :data:`GENERAL` for "the general unit of work"), and
:func:`unknown`, a lost statement's :class:`CommitUnknownError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentplane_journal.core.ids import Digest, EffectKey, RunId
from agentplane_journal.core.record import Record
from agentplane_journal.db.driver_errors import describe
from agentplane_journal.errors import (
    CommitUnknownError,
)

__all__ = [
    "GENERAL",
    "Answer",
    "Conclusion",
    "GeneralAnswer",
    "Lost",
    "Request",
    "Result",
    "unknown",
]


class GeneralAnswer:
    """The answer that sends an append to the general unit of work (nothing was written)."""

    def __repr__(self) -> str:
        return "GENERAL"


GENERAL = GeneralAnswer()
#: What a statement answers an append: its records, or :data:`GENERAL`.
Result = list[Record] | GeneralAnswer
#: A result, or the exception the append's caller gets.
Answer = Result | BaseException


@dataclass
class Request:
    """One append waiting for a statement: already chained onto ``head`` (the known head)."""

    tenant: str
    run: RunId
    epoch: int
    now: int
    head: tuple[int, Digest]
    records: list[Record]
    rows: list[tuple[Any, ...]]
    keys: Sequence[EffectKey]
    future: asyncio.Future[Any] = field(repr=False)
    #: An effect's start: its own statement, which also checks for a stop request.
    unless_cancelled: bool = False
    #: A conclusion (:mod:`.conclude`): its own statement, never in a multi-run one (a
    #: turn's transaction may carry it with others: :mod:`.together`).
    conclude: Conclusion | None = None
    #: A fresh run's admission (:data:`.conclude.ADMIT`): the lease's owner and expiry and
    #: the admission key (or none); its own statement, as a conclusion's.
    admit: tuple[str, int, str | None] | None = None


@dataclass(frozen=True)
class Conclusion:
    """What a conclusion adds to its append: the tenant's log counter, the outcomes (the
    ``RunSealed`` record's and the log leaf's), the sealed head, the log's largest position."""

    counter: str
    conclusion: str
    outcome: str
    head: bytes
    max_index: int


class Lost(Exception):
    """Internal: the connection went away with a statement in flight."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def unknown(exc: BaseException) -> CommitUnknownError:
    error = CommitUnknownError(describe(exc))
    error.__cause__ = exc
    return error
