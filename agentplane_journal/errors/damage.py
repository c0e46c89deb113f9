"""What was read does not verify: a record, the log, a push registration; and a walk over
many runs that went on past the damaged ones."""

from __future__ import annotations

from agentplane_journal.core.error_groups import (
    CorruptionError,
    StoreError,
)
from agentplane_journal.core.ids import RunId
from agentplane_journal.core.wire_errors import CorruptRecordError
from agentplane_journal.errors.advice import Database, command


class CorruptLogError(CorruptionError):
    """The stored Merkle tree disagrees with the sealed runs it is derived from.

    ``position`` is the first leaf position (0-based) whose part of the tree is wrong;
    ``agentplane-journal verify --all`` finds it, ``agentplane-journal reindex-log`` rebuilds
    the stored tree from the seals.
    """

    def __init__(self, position: int, detail: str, database: Database | None = None) -> None:
        self.position = position
        self.detail = detail
        self.database = database
        super().__init__(
            f"corrupt log at position {position}: {detail}; run "
            f"{command('verify --all', database)} to see the damage and "
            f"{command('reindex-log', database)} to rebuild the tree"
        )

    def naming(self, database: Database) -> CorruptLogError:
        """This error, its advice naming ``database`` (the store that met it knows it)."""
        if self.database is not None:
            return self
        return CorruptLogError(self.position, self.detail, database)


#: The errors that mean "this run's stored data does not verify": a walk over many runs
#: reports such a run (named, with its error) and goes on with the rest, where an
#: operational error (the database unreachable, a statement refused) stops the walk.
DAMAGE: tuple[type[StoreError], ...] = (CorruptRecordError, CorruptLogError)


class DamagedRunsError(CorruptionError):
    """A call over many runs did its work on every run that verified; these did not.

    ``damaged`` pairs each run with the error its records gave (a ``CorruptRecordError`` or
    ``CorruptLogError``). Raised *after* the rest was done, so one damaged run never blocks
    the others; ``agentplane-journal verify RUN`` shows each one's damage.
    """

    def __init__(self, what: str, damaged: list[tuple[RunId, StoreError]]) -> None:
        self.damaged = tuple(damaged)
        named = "; ".join(f"{run}: {error}" for run, error in self.damaged[:5])
        more = f" (and {len(self.damaged) - 5} more)" if len(self.damaged) > 5 else ""
        super().__init__(
            f"{what} was done for every run that verified, but {len(self.damaged)} run(s) "
            f"did not and were left as they are: {named}{more}. Run `agentplane-journal "
            "verify RUN` (with the tenant's `--tenant`) on each to see the damage"
        )


class CorruptRegistrationError(CorruptionError):
    """A stored push registration is not one this store can act on (a bad id or type).

    Rows are read as they are stored, so this means someone wrote the row by hand (or
    tampered with it). The message names the row, never a secret.
    """

    def __init__(self, task_id: str, config_id: str, detail: str) -> None:
        self.task_id = task_id
        self.config_id = config_id
        self.detail = detail
        super().__init__(
            f"push registration {config_id!r} of task {task_id!r} is unreadable: {detail}"
        )
