"""The roots of the error vocabulary: :class:`StoreError` and the groups under it.

A caller who does not care which refusal it was catches a group: a :class:`ConflictError`
means another writer (or an earlier write) got there first, so read again or stop; a
:class:`CorruptionError` means what was read does not verify; an :class:`UnavailableError`
means something could not be reached or did not answer (retry, and for the in-doubt ones
check what landed); a :class:`RefusedError` means the call, its input or the set-up is not
acceptable as it stands (change it; nothing was written); an :class:`OutcomeError` is a
run's recorded outcome raised into the workflow. Every public error is in exactly one group
(``tests/test_errors.py`` walks them), and keeps its other bases, so ``except ValueError``
around a restore still catches :class:`RestoreRefused`.

They live here, at the bottom, so that the pure wire format (``core``) can raise inside
:class:`StoreError` without importing upwards; ``agentplane_journal.errors`` re-exports them.
"""

from __future__ import annotations

__all__ = [
    "ConflictError",
    "CorruptionError",
    "OutcomeError",
    "RefusedError",
    "StoreError",
    "UnavailableError",
]


class StoreError(Exception):
    """Base of every error the journal and push stores raise on purpose."""


class ConflictError(StoreError):
    """Another writer, or an earlier write, got there first: read the state again, or stop.

    A lease held or lost, an epoch fenced, a chain position taken, an effect or admission
    key already used, a sealed run, a busy or moved thread: each says what it found.
    """


class CorruptionError(StoreError):
    """What was read does not verify: stored bytes, a row, a log, a note or a checkpoint.

    Never retried: it names what is wrong, and the audit commands say where.
    """


class UnavailableError(StoreError):
    """The database, a witness or a key failed, could not be reached or did not answer.

    Nothing was decided for the caller; where a write may have landed regardless
    (:class:`~agentplane_journal.errors.CommitUnknownError`, an effect in doubt, a restore
    stopped part-way) the error says so and what to check before retrying.
    """


class RefusedError(StoreError):
    """The call, its input or the set-up is not acceptable as it stands: change it.

    Nothing was written: a record too large, a schema at another revision or not ours,
    another wire profile, an export that does not restore, a workflow not registered.
    """


class OutcomeError(StoreError):
    """Not a fault: a run's recorded outcome (an effect failed for good, a cancellation),
    raised into the workflow so that it stops there."""
