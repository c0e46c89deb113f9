"""agentplane_journal: a durable, tamper-evident, exactly-once execution journal.

agentplane's journal store contract (fencing, exactly-once effects, hash chaining, leases,
sealing into a per-tenant RFC 6962 Merkle log, outcome index, cancellation, atomic appends
with the host's own writes) and its push-delivery store, over SQLAlchemy's async engine on
PostgreSQL (asyncpg) or SQLite (aiosqlite), in agentplane's wire format byte for byte.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentplane_journal.contracts import JournalStore, PushStore
    from agentplane_journal.core.append import Append
    from agentplane_journal.core.canon import canonical_bytes
    from agentplane_journal.core.canon_v1 import canonical_bytes_rfc8785, canonical_bytes_v1
    from agentplane_journal.core.chain import verify_attested, verify_chain
    from agentplane_journal.core.checkpoint import (
        Checkpoint,
        Inclusion,
        IncoherentCheckpointError,
    )
    from agentplane_journal.core.cosignature import Cosignature, Cosigner, CosignerKey
    from agentplane_journal.core.export_verify import ExportVerifier, VerifyReport
    from agentplane_journal.core.ids import (
        DEFAULT_TENANT,
        CaseId,
        Digest,
        EffectKey,
        RunId,
        validate_tenant,
    )
    from agentplane_journal.core.merkle import (
        consistency_proof,
        inclusion_proof,
        leaf_hash,
        root,
        verify_consistency,
        verify_inclusion,
    )
    from agentplane_journal.core.note import (
        NoteSigner,
        NoteVerificationError,
        NoteVerifier,
        OpenedNote,
        open_note,
        sign_note,
    )
    from agentplane_journal.core.policy import Policy, parse_policy
    from agentplane_journal.core.profile import AGENTPLANE_0_4, AGENTPLANE_0_22, WireProfile
    from agentplane_journal.core.receipt import (
        Receipt,
        ReceiptReport,
        parse_receipt,
        verify_receipt,
    )
    from agentplane_journal.core.record import MAX_RECORD_BYTES, Attestation, Record
    from agentplane_journal.core.signing import (
        DOMAIN_RECORD,
        Ed25519Signer,
        Ed25519Verifier,
        Signer,
        Verifier,
        signing_hash,
    )
    from agentplane_journal.core.values import Cancellation, Head, Lease
    from agentplane_journal.db.dialect import WRITE_TRANSACTION, begin_write, configure_engine
    from agentplane_journal.db.engine import pgbouncer_connect_args
    from agentplane_journal.db.revision import HEAD_REVISION
    from agentplane_journal.errors import (
        AppendConflictError,
        BackendError,
        CommitUnknownError,
        CorruptLogError,
        CorruptRecordError,
        CorruptRegistrationError,
        DamagedRunsError,
        DuplicateAdmissionError,
        DuplicateEffectError,
        EffectFailedError,
        EffectInDoubtError,
        FencedError,
        JournalUnavailableError,
        LeaseHeldError,
        LeaseNotHeldError,
        PayloadsErasedError,
        PoolerError,
        RecordTooLargeError,
        RunCancelledError,
        RunLostError,
        RunSealedError,
        SchemaConflictError,
        SchemaOutOfDateError,
        SecretUnavailableError,
        StepError,
        StoreError,
        ThreadBusyError,
        ThreadMovedError,
        TransactionEndedError,
        WireProfileError,
        WitnessError,
        WitnessForkedError,
        WitnessStaleError,
        WitnessUnavailableError,
        WorkflowDivergedError,
        WorkflowNotRegisteredError,
    )
    from agentplane_journal.journal.cosignatures import CosignatureRead
    from agentplane_journal.journal.export import write_export
    from agentplane_journal.journal.restore import (
        RestoreIncomplete,
        RestoreRefused,
        RestoreReport,
        restore_export,
    )
    from agentplane_journal.journal.store import SqlJournalStore
    from agentplane_journal.migrations.commands import current_revision, upgrade
    from agentplane_journal.push.rows import PushListing, ReencryptReport, UnreadableRegistration
    from agentplane_journal.push.secretbox import Keyring
    from agentplane_journal.push.store import SqlPushStore
    from agentplane_journal.push.values import PushAuthentication, PushConfig, PushRegistration
    from agentplane_journal.steps.api import Steps
    from agentplane_journal.steps.effect import Effect
    from agentplane_journal.steps.sweeper import Resumed, Sweeper, SweepReport
    from agentplane_journal.steps.values import (
        DidNotHappen,
        Finished,
        Fresh,
        InFlight,
        Landed,
        Outcome,
        SafeToRetry,
        Unknown,
    )
    from agentplane_journal.steps.workflow import Workflow

# Every public name, and the module that defines it. Imported on first use (PEP 562), so
# `import agentplane_journal.cli.main` for `agentplane-journal --help` does not pay for
# SQLAlchemy, Alembic and cryptography: a command imports only what it runs.
_EXPORTS = {
    "Append": "core.append",
    "canonical_bytes": "core.canon",
    "Checkpoint": "core.checkpoint",
    "Inclusion": "core.checkpoint",
    "IncoherentCheckpointError": "core.checkpoint",
    "WRITE_TRANSACTION": "db.dialect",
    "begin_write": "db.dialect",
    "configure_engine": "db.dialect",
    "pgbouncer_connect_args": "db.engine",
    "AppendConflictError": "errors",
    "BackendError": "errors",
    "CommitUnknownError": "errors",
    "CorruptLogError": "errors",
    "CorruptRecordError": "errors",
    "CorruptRegistrationError": "errors",
    "DamagedRunsError": "errors",
    "DuplicateAdmissionError": "errors",
    "DuplicateEffectError": "errors",
    "FencedError": "errors",
    "LeaseHeldError": "errors",
    "LeaseNotHeldError": "errors",
    "RecordTooLargeError": "errors",
    "RunSealedError": "errors",
    "SchemaConflictError": "errors",
    "SchemaOutOfDateError": "errors",
    "SecretUnavailableError": "errors",
    "StoreError": "errors",
    "TransactionEndedError": "errors",
    "ConversationBusyError": "errors",
    "DEFAULT_TENANT": "core.ids",
    "CaseId": "core.ids",
    "Digest": "core.ids",
    "EffectKey": "core.ids",
    "RunId": "core.ids",
    "validate_tenant": "core.ids",
    "consistency_proof": "core.merkle",
    "inclusion_proof": "core.merkle",
    "leaf_hash": "core.merkle",
    "root": "core.merkle",
    "verify_consistency": "core.merkle",
    "verify_inclusion": "core.merkle",
    "HEAD_REVISION": "db.revision",
    "current_revision": "migrations.commands",
    "upgrade": "migrations.commands",
    "NoteSigner": "core.note",
    "NoteVerificationError": "core.note",
    "NoteVerifier": "core.note",
    "OpenedNote": "core.note",
    "open_note": "core.note",
    "sign_note": "core.note",
    "PushAuthentication": "push.values",
    "PushConfig": "push.values",
    "PushListing": "push.rows",
    "PushRegistration": "push.values",
    "PushStore": "contracts",
    "ReencryptReport": "push.rows",
    "SqlPushStore": "push.store",
    "UnreadableRegistration": "push.rows",
    "MAX_RECORD_BYTES": "core.record",
    "Attestation": "core.record",
    "Record": "core.record",
    "Keyring": "push.secretbox",
    "DOMAIN_RECORD": "core.signing",
    "Ed25519Signer": "core.signing",
    "Ed25519Verifier": "core.signing",
    "Signer": "core.signing",
    "Verifier": "core.signing",
    "signing_hash": "core.signing",
    "JournalStore": "contracts",
    "SqlJournalStore": "journal.store",
    "Cancellation": "core.values",
    "Head": "core.values",
    "Lease": "core.values",
    "verify_attested": "core.chain",
    "verify_chain": "core.chain",
    "ThreadBusyError": "errors",
    "ThreadMovedError": "errors",
    "PayloadsErasedError": "errors",
    "AGENTPLANE_0_4": "core.profile",
    "AGENTPLANE_0_22": "core.profile",
    "WireProfile": "core.profile",
    "canonical_bytes_v1": "core.canon_v1",
    "canonical_bytes_rfc8785": "core.canon_v1",
    "WireProfileError": "errors",
    "PoolerError": "errors",
    "Steps": "steps.api",
    "Effect": "steps.effect",
    "Workflow": "steps.workflow",
    "Sweeper": "steps.sweeper",
    "SweepReport": "steps.sweeper",
    "Resumed": "steps.sweeper",
    "Fresh": "steps.values",
    "Finished": "steps.values",
    "InFlight": "steps.values",
    "Outcome": "steps.values",
    "Landed": "steps.values",
    "DidNotHappen": "steps.values",
    "Unknown": "steps.values",
    "SafeToRetry": "steps.values",
    "StepError": "errors",
    "EffectInDoubtError": "errors",
    "EffectFailedError": "errors",
    "JournalUnavailableError": "errors",
    "RunLostError": "errors",
    "RunCancelledError": "errors",
    "WorkflowNotRegisteredError": "errors",
    "WorkflowDivergedError": "errors",
    "Cosignature": "core.cosignature",
    "Cosigner": "core.cosignature",
    "CosignerKey": "core.cosignature",
    "Policy": "core.policy",
    "parse_policy": "core.policy",
    "Receipt": "core.receipt",
    "ReceiptReport": "core.receipt",
    "parse_receipt": "core.receipt",
    "verify_receipt": "core.receipt",
    "CosignatureRead": "journal.cosignatures",
    "WitnessError": "errors",
    "WitnessForkedError": "errors",
    "WitnessStaleError": "errors",
    "WitnessUnavailableError": "errors",
    "ExportVerifier": "core.export_verify",
    "VerifyReport": "core.export_verify",
    "write_export": "journal.export",
    "RestoreRefused": "journal.restore",
    "RestoreReport": "journal.restore",
    "restore_export": "journal.restore",
    "RestoreIncomplete": "journal.restore",
}

__version__ = "0.1.0"

__all__ = [
    "AGENTPLANE_0_22",
    "AGENTPLANE_0_4",
    "DEFAULT_TENANT",
    "DOMAIN_RECORD",
    "HEAD_REVISION",
    "MAX_RECORD_BYTES",
    "Append",
    "AppendConflictError",
    "Attestation",
    "BackendError",
    "Cancellation",
    "CaseId",
    "Checkpoint",
    "CommitUnknownError",
    "ConversationBusyError",
    "CorruptLogError",
    "CorruptRecordError",
    "CorruptRegistrationError",
    "DamagedRunsError",
    "Digest",
    "DuplicateAdmissionError",
    "DuplicateEffectError",
    "Ed25519Signer",
    "Ed25519Verifier",
    "EffectKey",
    "ExportVerifier",
    "FencedError",
    "Head",
    "Inclusion",
    "IncoherentCheckpointError",
    "JournalStore",
    "Keyring",
    "Lease",
    "LeaseHeldError",
    "LeaseNotHeldError",
    "NoteSigner",
    "PoolerError",
    "NoteVerificationError",
    "NoteVerifier",
    "OpenedNote",
    "PushAuthentication",
    "PushConfig",
    "PushListing",
    "PushRegistration",
    "PushStore",
    "Record",
    "RecordTooLargeError",
    "ReencryptReport",
    "RestoreIncomplete",
    "RestoreRefused",
    "RestoreReport",
    "RunId",
    "RunSealedError",
    "SchemaConflictError",
    "SchemaOutOfDateError",
    "SecretUnavailableError",
    "Signer",
    "SqlJournalStore",
    "SqlPushStore",
    "StoreError",
    "ThreadBusyError",
    "ThreadMovedError",
    "PayloadsErasedError",
    "TransactionEndedError",
    "UnreadableRegistration",
    "Verifier",
    "VerifyReport",
    "WRITE_TRANSACTION",
    "WireProfile",
    "WireProfileError",
    "__version__",
    "begin_write",
    "canonical_bytes",
    "canonical_bytes_v1",
    "canonical_bytes_rfc8785",
    "configure_engine",
    "pgbouncer_connect_args",
    "consistency_proof",
    "current_revision",
    "inclusion_proof",
    "leaf_hash",
    "open_note",
    "restore_export",
    "root",
    "sign_note",
    "signing_hash",
    "upgrade",
    "validate_tenant",
    "verify_attested",
    "verify_chain",
    "verify_consistency",
    "verify_inclusion",
    "Steps",
    "Effect",
    "Workflow",
    "Sweeper",
    "SweepReport",
    "Resumed",
    "Fresh",
    "Finished",
    "InFlight",
    "Outcome",
    "Landed",
    "DidNotHappen",
    "Unknown",
    "SafeToRetry",
    "StepError",
    "EffectInDoubtError",
    "EffectFailedError",
    "JournalUnavailableError",
    "RunLostError",
    "RunCancelledError",
    "WorkflowNotRegisteredError",
    "WorkflowDivergedError",
    "Cosignature",
    "Cosigner",
    "CosignerKey",
    "Policy",
    "parse_policy",
    "Receipt",
    "ReceiptReport",
    "parse_receipt",
    "verify_receipt",
    "CosignatureRead",
    "WitnessError",
    "WitnessForkedError",
    "WitnessStaleError",
    "WitnessUnavailableError",
    "write_export",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        # A submodule reached as an attribute (``agentplane_journal.journal.store``), as before.
        try:
            return import_module(f".{name}", __name__)
        except ModuleNotFoundError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # the next lookup is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
