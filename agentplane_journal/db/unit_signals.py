"""How a unit of work's function ends other than by returning: :class:`Rollback` (end
without committing, with a value) and :class:`Passthrough` (a caller's own exception, to be
re-raised as it is rather than translated). Both are caught by
:meth:`agentplane_journal.db.unit.Repository.unit` and never reach a caller.
"""

from __future__ import annotations

__all__ = ["Passthrough", "Rollback"]


class Rollback(Exception):
    """Internal: end a unit of work without committing, returning ``value``."""

    def __init__(self, value: object) -> None:
        self.value = value


class Passthrough(Exception):
    """Internal: carries a caller's exception (``append_atomic``'s work) to re-raise as is."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
