"""The store's error vocabulary.

Every error derives from :class:`StoreError` and carries its fields as attributes, so a
caller branches on the type and reads ``err.current`` instead of parsing a message. The
messages are sentences a person can act on. Bad arguments are *not* here: they are
``ValueError``/``TypeError`` raised before anything touches the database.

Attributes hold the caller's own types — ``err.run`` is the :class:`RunId` the caller passed,
``err.effect_key`` an :class:`EffectKey` — so ``err.run == run`` means what it says (ids
compare equal only to their own type, never to their text).

The distinctions matter more than the wording: a ``FencedError`` tells a stale writer to
drop the run, a ``LeaseHeldError`` tells an early one to wait; ``CommitUnknownError`` means
"may have landed", ``BackendError`` means "refused and rolled back", and an
``AppendConflictError`` "refused: another writer took that place in the chain, read the head
and retry" (never a ``DuplicateEffectError``, which is exactly-once holding).

Every error is imported from here; the modules beside this one hold them by subject
(:mod:`.runs`, :mod:`.damage`, :mod:`.database`, :mod:`.encryption`, :mod:`.sessions`,
:mod:`.steps`; :mod:`.advice` the commands their messages name). The errors pure code raises
live beside it and are re-exported here: the record's in ``core/wire_errors.py``, the witness
protocol's in ``tlog/witness_protocol.py``. The groups come from
:mod:`agentplane_journal.core.error_groups`.
"""

from __future__ import annotations

from agentplane_journal.core.error_groups import (
    ConflictError,
    CorruptionError,
    OutcomeError,
    RefusedError,
    StoreError,
    UnavailableError,
)
from agentplane_journal.core.wire_errors import CorruptRecordError, FencedError, RecordTooLargeError
from agentplane_journal.errors.advice import (
    Database,
    command,
    database_of,
)
from agentplane_journal.errors.damage import (
    DAMAGE,
    CorruptLogError,
    CorruptRegistrationError,
    DamagedRunsError,
)
from agentplane_journal.errors.database import (
    BackendError,
    CommitUnknownError,
    PoolerError,
    SchemaConflictError,
    SchemaOutOfDateError,
    WireProfileError,
)
from agentplane_journal.errors.encryption import (
    PayloadsErasedError,
    SecretUnavailableError,
)
from agentplane_journal.errors.runs import (
    AppendConflictError,
    DuplicateAdmissionError,
    DuplicateEffectError,
    LeaseHeldError,
    LeaseNotHeldError,
    RunSealedError,
    TransactionEndedError,
)
from agentplane_journal.errors.sessions import (
    ConversationBusyError,
    ThreadBusyError,
    ThreadMovedError,
)
from agentplane_journal.errors.steps import (
    EffectFailedError,
    EffectInDoubtError,
    JournalUnavailableError,
    NotInDoubtError,
    RunCancelledError,
    RunLostError,
    StepError,
    StepUsageError,
    WorkflowDivergedError,
    WorkflowNotRegisteredError,
)
from agentplane_journal.tlog.witness_protocol import (
    WitnessError,
    WitnessForkedError,
    WitnessStaleError,
    WitnessUnavailableError,
)

__all__ = [
    "AppendConflictError",
    "BackendError",
    "CommitUnknownError",
    "ConflictError",
    "ConversationBusyError",
    "CorruptLogError",
    "CorruptRecordError",
    "CorruptRegistrationError",
    "CorruptionError",
    "DAMAGE",
    "DamagedRunsError",
    "Database",
    "DuplicateAdmissionError",
    "DuplicateEffectError",
    "EffectFailedError",
    "EffectInDoubtError",
    "FencedError",
    "JournalUnavailableError",
    "NotInDoubtError",
    "LeaseHeldError",
    "LeaseNotHeldError",
    "OutcomeError",
    "PayloadsErasedError",
    "PoolerError",
    "RecordTooLargeError",
    "RefusedError",
    "RunCancelledError",
    "RunLostError",
    "RunSealedError",
    "SchemaConflictError",
    "SchemaOutOfDateError",
    "SecretUnavailableError",
    "StepError",
    "StepUsageError",
    "StoreError",
    "ThreadBusyError",
    "ThreadMovedError",
    "TransactionEndedError",
    "UnavailableError",
    "WireProfileError",
    "WitnessError",
    "WitnessForkedError",
    "WitnessStaleError",
    "WitnessUnavailableError",
    "WorkflowDivergedError",
    "WorkflowNotRegisteredError",
    "command",
    "database_of",
]
