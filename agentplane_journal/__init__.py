"""agentplane_journal: a durable, tamper-evident, exactly-once execution journal.

agentplane's journal store contract (fencing, exactly-once effects, hash chaining, leases,
sealing into a per-tenant RFC 6962 Merkle log, outcome index, cancellation, atomic appends
with the host's own writes) and its push-delivery store, over SQLAlchemy's async engine on
PostgreSQL (asyncpg) or SQLite (aiosqlite), in agentplane's wire format byte for byte.
"""

from __future__ import annotations

from .canon import canonical_bytes
from .checkpoint import Checkpoint, Inclusion
from .dialect import configure_engine
from .errors import (
    BackendError,
    CommitUnknownError,
    CorruptRecordError,
    DuplicateEffectError,
    FencedError,
    LeaseHeldError,
    RecordTooLargeError,
    RunSealedError,
    SchemaOutOfDateError,
    SecretUnavailableError,
    StoreError,
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
from .push import (
    PushAuthentication,
    PushConfig,
    PushRegistration,
    PushStore,
    SqlPushStore,
)
from .record import (
    MAX_RECORD_BYTES,
    Append,
    Attestation,
    Record,
    verify_attested,
    verify_chain,
)
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
    "CorruptRecordError",
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
    "PushAuthentication",
    "PushConfig",
    "PushRegistration",
    "PushStore",
    "Record",
    "RecordTooLargeError",
    "RunId",
    "RunSealedError",
    "SchemaOutOfDateError",
    "SecretUnavailableError",
    "Signer",
    "SqlJournalStore",
    "SqlPushStore",
    "StoreError",
    "Verifier",
    "__version__",
    "canonical_bytes",
    "configure_engine",
    "consistency_proof",
    "current_revision",
    "inclusion_proof",
    "leaf_hash",
    "root",
    "signing_hash",
    "upgrade",
    "validate_tenant",
    "verify_attested",
    "verify_chain",
    "verify_consistency",
    "verify_inclusion",
]
