"""The errors the pure record code raises: a fenced writer, a record too large, a record
that does not verify.

They live here, under :class:`~.error_groups.StoreError`'s groups and beside the code that
raises them (``batch.py``, ``record.py``, ``chain.py``), so that ``core`` raises them without
importing upwards; ``agentplane_journal.errors`` re-exports them with the rest of the
vocabulary, and callers catch them from there (or from ``agentplane_journal``).
"""

from __future__ import annotations

from agentplane_journal.core.error_groups import ConflictError, CorruptionError, RefusedError
from agentplane_journal.core.ids import RunId

__all__ = ["CorruptRecordError", "FencedError", "RecordTooLargeError"]


class FencedError(ConflictError):
    """A writer's epoch is not the run's current lease epoch: it was displaced."""

    def __init__(self, run: RunId, held: int, current: int) -> None:
        self.run = RunId.parse(run)
        self.held = held
        self.current = current
        super().__init__(
            f"fenced at run {self.run}: held epoch {held}, store is at {current}; "
            "this writer was displaced and must stop working on the run"
        )


class RecordTooLargeError(RefusedError):
    """A record body's canonical bytes exceed the limit; nothing of its batch was written."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            f"record body is {size} bytes, over the {limit}-byte limit; store large "
            "payloads elsewhere and journal a reference to them"
        )


class CorruptRecordError(CorruptionError):
    """A stored record does not verify: edited bytes, a gap, a broken link or a bad signature."""

    def __init__(self, seq: int, detail: str) -> None:
        self.seq = seq
        self.detail = detail
        super().__init__(f"corrupt record at seq {seq}: {detail}")
