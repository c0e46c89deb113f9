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
    from .append import Append
    from .canon import canonical_bytes
    from .checkpoint import Checkpoint, Inclusion
    from .dialect import WRITE_TRANSACTION, begin_write, configure_engine
    from .engine import pgbouncer_connect_args
    from .errors import (
        BackendError,
        CommitUnknownError,
        CorruptLogError,
        CorruptRecordError,
        CorruptRegistrationError,
        DuplicateEffectError,
        FencedError,
        LeaseHeldError,
        RecordTooLargeError,
        RunSealedError,
        SchemaConflictError,
        SchemaOutOfDateError,
        SecretUnavailableError,
        StoreError,
        TransactionEndedError,
    )
    from .ids import DEFAULT_TENANT, CaseId, Digest, EffectKey, RunId, validate_tenant
    from .merkle import (
        consistency_proof,
        inclusion_proof,
        leaf_hash,
        root,
        verify_consistency,
        verify_inclusion,
    )
    from .migrate import HEAD_REVISION, current_revision, upgrade
    from .note import (
        NoteSigner,
        NoteVerificationError,
        NoteVerifier,
        OpenedNote,
        open_note,
        sign_note,
    )
    from .push import (
        PushAuthentication,
        PushConfig,
        PushListing,
        PushRegistration,
        PushStore,
        ResealReport,
        SqlPushStore,
        UnreadableRegistration,
    )
    from .record import MAX_RECORD_BYTES, Attestation, Record
    from .sealing import Keyring
    from .signing import (
        DOMAIN_RECORD,
        Ed25519Signer,
        Ed25519Verifier,
        Signer,
        Verifier,
        signing_hash,
    )
    from .store import JournalStore, SqlJournalStore
    from .values import Cancellation, Head, Lease
    from .verify import verify_attested, verify_chain

# Every public name, and the module that defines it. Imported on first use (PEP 562), so
# `import agentplane_journal.cli` for `agentplane-journal --help` does not pay for
# SQLAlchemy, Alembic and cryptography: a command imports only what it runs.
_EXPORTS = {
    "Append": "append",
    "canonical_bytes": "canon",
    "Checkpoint": "checkpoint",
    "Inclusion": "checkpoint",
    "WRITE_TRANSACTION": "dialect",
    "begin_write": "dialect",
    "configure_engine": "dialect",
    "pgbouncer_connect_args": "engine",
    "BackendError": "errors",
    "CommitUnknownError": "errors",
    "CorruptLogError": "errors",
    "CorruptRecordError": "errors",
    "CorruptRegistrationError": "errors",
    "DuplicateEffectError": "errors",
    "FencedError": "errors",
    "LeaseHeldError": "errors",
    "RecordTooLargeError": "errors",
    "RunSealedError": "errors",
    "SchemaConflictError": "errors",
    "SchemaOutOfDateError": "errors",
    "SecretUnavailableError": "errors",
    "StoreError": "errors",
    "TransactionEndedError": "errors",
    "DEFAULT_TENANT": "ids",
    "CaseId": "ids",
    "Digest": "ids",
    "EffectKey": "ids",
    "RunId": "ids",
    "validate_tenant": "ids",
    "consistency_proof": "merkle",
    "inclusion_proof": "merkle",
    "leaf_hash": "merkle",
    "root": "merkle",
    "verify_consistency": "merkle",
    "verify_inclusion": "merkle",
    "HEAD_REVISION": "migrate",
    "current_revision": "migrate",
    "upgrade": "migrate",
    "NoteSigner": "note",
    "NoteVerificationError": "note",
    "NoteVerifier": "note",
    "OpenedNote": "note",
    "open_note": "note",
    "sign_note": "note",
    "PushAuthentication": "push",
    "PushConfig": "push",
    "PushListing": "push",
    "PushRegistration": "push",
    "PushStore": "contracts",
    "ResealReport": "push",
    "SqlPushStore": "push",
    "UnreadableRegistration": "push",
    "MAX_RECORD_BYTES": "record",
    "Attestation": "record",
    "Record": "record",
    "Keyring": "sealing",
    "DOMAIN_RECORD": "signing",
    "Ed25519Signer": "signing",
    "Ed25519Verifier": "signing",
    "Signer": "signing",
    "Verifier": "signing",
    "signing_hash": "signing",
    "JournalStore": "contracts",
    "SqlJournalStore": "store",
    "Cancellation": "values",
    "Head": "values",
    "Lease": "values",
    "verify_attested": "verify",
    "verify_chain": "verify",
}

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_TENANT",
    "DOMAIN_RECORD",
    "HEAD_REVISION",
    "MAX_RECORD_BYTES",
    "Append",
    "Attestation",
    "BackendError",
    "Cancellation",
    "CaseId",
    "Checkpoint",
    "CommitUnknownError",
    "CorruptLogError",
    "CorruptRecordError",
    "CorruptRegistrationError",
    "Digest",
    "DuplicateEffectError",
    "Ed25519Signer",
    "Ed25519Verifier",
    "EffectKey",
    "FencedError",
    "Head",
    "Inclusion",
    "JournalStore",
    "Keyring",
    "Lease",
    "LeaseHeldError",
    "NoteSigner",
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
    "ResealReport",
    "RunId",
    "RunSealedError",
    "SchemaConflictError",
    "SchemaOutOfDateError",
    "SecretUnavailableError",
    "Signer",
    "SqlJournalStore",
    "SqlPushStore",
    "StoreError",
    "TransactionEndedError",
    "UnreadableRegistration",
    "Verifier",
    "WRITE_TRANSACTION",
    "__version__",
    "begin_write",
    "canonical_bytes",
    "configure_engine",
    "pgbouncer_connect_args",
    "consistency_proof",
    "current_revision",
    "inclusion_proof",
    "leaf_hash",
    "open_note",
    "root",
    "sign_note",
    "signing_hash",
    "upgrade",
    "validate_tenant",
    "verify_attested",
    "verify_chain",
    "verify_consistency",
    "verify_inclusion",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        # A submodule reached as an attribute (``agentplane_journal.store``), as before.
        try:
            return import_module(f".{name}", __name__)
        except ModuleNotFoundError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # the next lookup is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
