"""Record signatures: who wrote a record, on top of the chain's what-was-written.

The chain alone proves a journal was not edited *after* its head was trusted; anyone who
can write the table can still rebuild a consistent chain from scratch. A signature over
each record's hash closes that gap for whoever holds the public key. The scheme is
agentplane's, so either side verifies the other's records: Ed25519 (RFC 8032) over the
32 bytes ``SHA-256(domain || 0x00 || hash)``, where the domain label keeps a record
signature from being replayed as any other kind of agentplane signature.

Keys are the deployment's: a signer is built from a 32-byte seed it is handed, and this
module never generates one, logs one or lets one show up in a ``repr``.
"""

from __future__ import annotations

import hashlib
from typing import NoReturn, Protocol, runtime_checkable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from agentplane_journal.core.checks import check_key_id
from agentplane_journal.core.ids import Digest

__all__ = [
    "DOMAIN_RECORD",
    "Ed25519Signer",
    "Ed25519Verifier",
    "Signer",
    "Verifier",
    "signing_hash",
]

DOMAIN_RECORD = "io.github.hupe1980.agentplane/record/v1"
"""Domain label of record signatures; part of every signature ever made, never change it."""

_SEED_BYTES = 32
_PUBLIC_BYTES = 32
_SIGNATURE_BYTES = 64


def signing_hash(domain: str, digest: Digest) -> bytes:
    """``SHA-256(domain || 0x00 || digest)``: the 32 bytes that are actually signed."""
    if not isinstance(digest, Digest):
        raise TypeError(f"signing_hash takes a Digest, not {type(digest).__name__}")
    h = hashlib.sha256(domain.encode("utf-8"))
    h.update(b"\x00")
    h.update(bytes(digest))
    return h.digest()


@runtime_checkable
class Signer(Protocol):
    """Anything that signs record hashes under a stable name (a SPIFFE id, a KMS key...)."""

    key_id: str

    def sign(self, message: bytes) -> bytes:
        """Sign ``message`` (the 32-byte signing hash) and return the signature."""
        ...


@runtime_checkable
class Verifier(Protocol):
    """Decides whether ``key_id`` made ``signature``; must answer False, not raise."""

    def verify(self, key_id: str, message: bytes, signature: bytes) -> bool:
        """True only if a trusted key named ``key_id`` signed ``message``."""
        ...


class Ed25519Signer:
    """An Ed25519 signer from a deployment-supplied 32-byte seed.

    Only the key object is kept (no ``seed`` attribute), the ``repr`` shows the public
    key, and pickling is refused, so the secret cannot leak through logs, tracebacks or a
    cache that serialises objects.
    """

    __slots__ = ("_key", "key_id", "public_key")
    _key: Ed25519PrivateKey
    key_id: str
    public_key: bytes

    def __init__(self, key_id: str, seed: bytes) -> None:
        # It names the signer to verifiers and is stored in every signed row.
        key_id = check_key_id(key_id)
        if not isinstance(seed, bytes | bytearray | memoryview):
            raise TypeError(f"an Ed25519 seed is bytes, not {type(seed).__name__}")
        if len(seed) != _SEED_BYTES:
            # Never echo the seed itself, only its length.
            raise ValueError(f"an Ed25519 seed is exactly {_SEED_BYTES} bytes, got {len(seed)}")
        key = Ed25519PrivateKey.from_private_bytes(bytes(seed))
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "key_id", key_id)
        object.__setattr__(
            self,
            "public_key",
            key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw),
        )

    def sign(self, message: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``message``."""
        return self._key.sign(bytes(message))

    def __repr__(self) -> str:
        return f"Ed25519Signer(key_id={self.key_id!r}, public_key={self.public_key[:4].hex()}…)"

    __str__ = __repr__

    def __getstate__(self) -> NoReturn:
        raise TypeError("Ed25519Signer holds a private key and cannot be pickled or copied")

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError("Ed25519Signer holds a private key and cannot be pickled or copied")

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("Ed25519Signer is immutable")


class Ed25519Verifier:
    """A set of trusted public keys by key id.

    Uses OpenSSL's Ed25519 verification through ``cryptography``; agentplane uses
    ed25519-dalek's non-strict ``verify``. Both accept every signature an honest signer
    makes; they may differ only on deliberately malformed (non-canonical) signatures.
    """

    __slots__ = ("_keys",)

    def __init__(self) -> None:
        self._keys: dict[str, Ed25519PublicKey] = {}

    def trust(self, key_id: str, public_key: bytes) -> Ed25519Verifier:
        """Trust ``public_key`` (32 raw bytes) under ``key_id``; returns self to chain."""
        key_id = check_key_id(key_id)
        if not isinstance(public_key, bytes | bytearray | memoryview):
            raise TypeError(f"a public key is bytes, not {type(public_key).__name__}")
        if len(public_key) != _PUBLIC_BYTES:
            raise ValueError(
                f"an Ed25519 public key is exactly {_PUBLIC_BYTES} bytes, got {len(public_key)}"
            )
        self._keys[key_id] = Ed25519PublicKey.from_public_bytes(bytes(public_key))
        return self

    def verify(self, key_id: str, message: bytes, signature: bytes) -> bool:
        """False for an unknown key id, a signature that is not 64 bytes, or a bad one."""
        key = self._keys.get(key_id) if isinstance(key_id, str) else None
        if key is None:
            return False
        if not isinstance(signature, bytes | bytearray | memoryview):
            return False
        if len(signature) != _SIGNATURE_BYTES:
            return False
        if not isinstance(message, bytes | bytearray | memoryview):
            return False
        try:
            key.verify(bytes(signature), bytes(message))
        except InvalidSignature:
            return False
        return True

    def __repr__(self) -> str:
        return f"Ed25519Verifier(trusted={sorted(self._keys)!r})"
