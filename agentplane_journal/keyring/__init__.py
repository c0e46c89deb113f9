"""Encrypted payloads and verifiable erasure (agentplane 0.22's keyring, for this journal).

Payload fields are encrypted under an erasure scope's wrapping key, routing stays clear, the
chain commits to the ciphertext; destroying a scope's wrapping key is the erasure, and it is
journaled. See ``docs/concepts/erasure.md``. Needs the ``sealed`` extra (PyNaCl), imported
when a payload is first encrypted or decrypted (the ``sealed`` name is agentplane's wire
marker's, kept for the extra and the public classes; the glossary says so).
"""

from __future__ import annotations

from agentplane_journal.core.envelope import (
    ENVELOPE_FORMAT_VERSION,
    EnvelopeRefusedError,
    ScopeErasedError,
    UnknownEnvelopeFormatError,
    WrappedKey,
)
from agentplane_journal.core.sealed import Erased
from agentplane_journal.keyring.journal import Erasure, SealedJournal
from agentplane_journal.keyring.ring import Keyring, OpenedRecord
from agentplane_journal.keyring.sources import (
    CallbackKeySource,
    EnvKeySource,
    FileKeySource,
    KeyCustodyError,
    KeySource,
    Tombstone,
)

__all__ = [
    "ENVELOPE_FORMAT_VERSION",
    "CallbackKeySource",
    "EnvKeySource",
    "EnvelopeRefusedError",
    "Erased",
    "Erasure",
    "FileKeySource",
    "KeyCustodyError",
    "KeySource",
    "Keyring",
    "OpenedRecord",
    "ScopeErasedError",
    "SealedJournal",
    "Tombstone",
    "UnknownEnvelopeFormatError",
    "WrappedKey",
]
