"""What a pass of verify-export concluded, and what it could not look at: its report.

:class:`VerifyReport` is agentplane's ``VerifyReport``, and the only place a verdict is
made: :attr:`VerifyReport.is_sound` holds when no check found anything and the file was read
whole (an incomplete file is never sound, whatever its lines said). The checks that fill it
are :mod:`agentplane_journal.exportfmt.verify`'s; kept apart so that the verdict can be read
in one sitting, and so that what the CLI prints (``to_json``) sits beside what it means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentplane_journal.core.ids import RunId
from agentplane_journal.tlog.checkpoint import Checkpoint

__all__ = ["SOUND_LISTED", "VerifyReport"]

SOUND_LISTED = 1000
"""Sound runs named in :attr:`VerifyReport.sound` by default; the rest are counted
(:attr:`VerifyReport.runs_sound`). ``ExportVerifier(sound_listed=None)`` names every one."""


@dataclass(slots=True)
class VerifyReport:
    """What a pass concluded and what it could not look at (agentplane's ``VerifyReport``).

    ``sound`` names the runs that recomputed exactly, in file order, up to the verifier's
    ``sound_listed`` (:data:`SOUND_LISTED` by default, so a report's memory does not grow
    with the file); ``sound_unlisted`` counts the sound runs beyond it, and
    :attr:`runs_sound` is every sound run. Findings are never capped.
    """

    checkpoint: Checkpoint | None = None
    sound: list[RunId] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    records: int = 0
    cases: int = 0
    complete: bool = False
    sound_unlisted: int = 0

    @property
    def runs_sound(self) -> int:
        """Every run that recomputed exactly, named in ``sound`` or not."""
        return len(self.sound) + self.sound_unlisted

    @property
    def is_sound(self) -> bool:
        """Every check that ran passed, and the file is whole (see ``not_checked``)."""
        return not self.findings and self.complete

    def to_json(self) -> dict[str, Any]:
        cp = self.checkpoint
        return {
            "sound": self.is_sound,
            "checkpoint": None
            if cp is None
            else {"origin": cp.origin, "size": cp.size, "root": cp.root.hex()},
            "runs_sound": self.runs_sound,
            "records": self.records,
            "cases": self.cases,
            "complete": self.complete,
            "findings": list(self.findings),
            "not_checked": list(self.not_checked),
        }
