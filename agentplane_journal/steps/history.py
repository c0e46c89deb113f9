"""A run's journal read back as the durable-steps layer acts on it: pure, no I/O.

:class:`RunHistory` indexes a run's records by effect key. :meth:`RunHistory.verdict` is the
one place that says what the journal knows about one effect attempt, agentplane's replay
rules (``runtime/ctx.rs``) in their order, decided by the *last* record of the key:

* nothing: the attempt has not started (**new**: announce it, then call);
* ``EffectDone``, or ``EffectReconciled`` with ``landed``: **done**, its output is the
  result and the effect is never called again;
* ``EffectFailed`` with ``permanent``: **failed** for good;
* ``EffectFailed`` with ``did_not_happen``: **retry** under the next attempt's key;
* ``EffectReconciled`` with ``did_not_happen``: **perform** under the same key, without a
  second ``EffectStarted`` (the one in the journal covers this call);
* ``EffectStarted`` alone, ``EffectFailed`` ``in_doubt`` (not permanent), or a
  reconciliation that could not tell: **in doubt**, decided only by asking.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentplane_journal.core.admission import RUN_ADMITTED
from agentplane_journal.core.append import EFFECT_STARTED, RUN_SEALED
from agentplane_journal.core.ids import Digest, EffectKey
from agentplane_journal.core.record import Record
from agentplane_journal.steps.records import read_output_note
from agentplane_journal.steps.values import DID_NOT_HAPPEN, LANDED

__all__ = ["EFFECT_DONE", "EFFECT_FAILED", "EFFECT_RECONCILED", "RUN_CANCELLED", "RunHistory"]

EFFECT_DONE = "EffectDone"
EFFECT_FAILED = "EffectFailed"
EFFECT_RECONCILED = "EffectReconciled"
RUN_CANCELLED = "RunCancelled"
NOTE = "Note"


class Verdict(enum.Enum):
    NEW = "new"
    DONE = "done"
    FAILED = "failed"
    RETRY = "retry"
    PERFORM = "perform"
    IN_DOUBT = "in_doubt"


@dataclass(frozen=True, slots=True)
class Known:
    """What the journal says about one attempt: the verdict and the record that decided it."""

    verdict: Verdict
    record: Record | None = None

    @property
    def output(self) -> Any:
        return None if self.record is None else self.record.body.get("output")


@dataclass(slots=True)
class RunHistory:
    """One run's records, indexed for replay; :meth:`add` keeps it current while running."""

    admitted: Record | None = None
    conclusion: Record | None = None
    cancelled: Record | None = None
    head_seq: int = 0
    head_hash: Digest = Digest.ZERO
    effects: dict[EffectKey, list[Record]] = field(default_factory=dict)
    #: The first ``EffectStarted`` at each position: what the run called there.
    positions: dict[int, Record] = field(default_factory=dict)
    #: Calls started so far (first attempts): the next position when records carry none.
    calls: int = 0
    #: The run's result from a 0.22 output note, as a 1-tuple (``None``: no such note).
    output: tuple[Any] | None = None

    def result(self) -> Any:
        """The concluded run's result: its ``RunSealed.output`` (0.4, and 0.22 before issue
        36), else the output note written before it."""
        body = self.conclusion.body if self.conclusion is not None else {}
        if "output" in body or self.output is None:
            return body.get("output")
        return self.output[0]

    @classmethod
    def of(cls, records: Sequence[Record]) -> RunHistory:
        history = cls()
        history.add(records)
        return history

    def add(self, records: Sequence[Record]) -> None:
        for record in records:
            kind = record.kind
            if kind == RUN_ADMITTED and self.admitted is None:
                self.admitted = record
            elif kind == RUN_SEALED:
                self.conclusion = record  # the last conclusion is the run's answer
            elif kind == RUN_CANCELLED:
                self.cancelled = record
            key = record.effect_key
            if kind == EFFECT_STARTED:
                # The call's position: the ``ordinal`` records before issue 36 carry, else
                # (0.22, as agentplane) counted: each call's first attempt starts once.
                body = record.body
                first = body.get("attempt") == 1 and (key is None or key not in self.effects)
                ordinal = body.get("ordinal")
                if not isinstance(ordinal, int) and first:
                    ordinal = self.calls
                if first:
                    self.calls += 1
                if isinstance(ordinal, int):
                    self.positions.setdefault(ordinal, record)
            elif kind == NOTE:
                found, output = read_output_note(record.body)
                if found:
                    self.output = (output,)
            if key is not None:
                self.effects.setdefault(key, []).append(record)
            self.head_seq, self.head_hash = record.seq, record.hash

    def started(self, key: EffectKey) -> bool:
        return any(r.kind == EFFECT_STARTED for r in self.effects.get(key, ()))

    def in_doubt(self) -> list[EffectKey]:
        """The keys whose attempt is in doubt now (what an operator is shown)."""
        return [k for k in self.effects if self.verdict(k).verdict is Verdict.IN_DOUBT]

    def verdict(self, key: EffectKey) -> Known:
        records = self.effects.get(key)
        if not records:
            return Known(Verdict.NEW)
        last = records[-1]
        kind, body = last.kind, last.body
        if kind == EFFECT_DONE:
            return Known(Verdict.DONE, last)
        if kind == EFFECT_RECONCILED:
            disposition = body.get("disposition")
            if disposition == LANDED:
                return Known(Verdict.DONE, last)
            if disposition == DID_NOT_HAPPEN:
                return Known(Verdict.PERFORM, last)
            return Known(Verdict.IN_DOUBT, last)
        if kind == EFFECT_FAILED:
            if body.get("permanent"):
                return Known(Verdict.FAILED, last)
            if body.get("disposition") == DID_NOT_HAPPEN:
                return Known(Verdict.RETRY, last)
            return Known(Verdict.IN_DOUBT, last)
        return Known(Verdict.IN_DOUBT, last)  # EffectStarted with nothing after it
