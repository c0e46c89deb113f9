"""Witness cosignatures (c2sp.org/tlog-cosignature, Ed25519 ``cosignature/v1``): pure.

A log's own signature on a checkpoint says what the operator claims; it cannot stop the
operator from claiming two different logs to two different readers (a split view). A
witness's cosignature says "as of this time, this is the largest tree of this origin I have
seen, and it is consistent with everything I saw before": a reader who requires cosignatures
from witnesses it trusts can no longer be shown a branch those witnesses refused.

The format, as the spec fixes it:

* a cosignature is a signed-note signature line ``— <name> base64(key ID || timestamp ||
  Ed25519 signature)``, 4 + 8 + 64 bytes, the timestamp a big-endian u64 (at most 2^63 - 1,
  never 0 from add-checkpoint);
* the key ID is SHA-256(name || 0x0A || 0x04 || public key)[:4] (0x04: the cosignature
  type, so a cosigner key is never mistaken for a log's note key, type 0x01);
* the signed message is ``cosignature/v1\\ntime <timestamp>\\n`` followed by the
  checkpoint's note body (the text before the signature lines);
* a cosigner key is published as a vkey ``name+<key ID hex>+base64(0x04 || key)``.

Nothing here does I/O or keeps a seed beyond the key object (:class:`Cosigner`, used by
tests and by anyone running a witness of their own, refuses pickling like ``NoteSigner``).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import NoReturn

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from agentplane_journal.core.b64 import b64decode_canonical
from agentplane_journal.tlog.note import _check_name, _name_problem

__all__ = [
    "COSIGNATURE_TYPE",
    "MAX_TIMESTAMP",
    "Cosignature",
    "Cosigner",
    "CosignerKey",
    "cosigned_message",
]

COSIGNATURE_TYPE = 0x04
"""The signature type byte of an Ed25519 ``cosignature/v1`` key (c2sp.org/tlog-cosignature)."""

MAX_TIMESTAMP = 2**63 - 1
"""The largest timestamp a cosignature may carry."""

_DASH = "\u2014 "
_BLOB = 4 + 8 + 64


def _key_hash(name: str, public_key: bytes) -> int:
    digest = hashlib.sha256(
        name.encode("utf-8") + b"\n" + bytes([COSIGNATURE_TYPE]) + public_key
    ).digest()
    return int.from_bytes(digest[:4], "big")


def cosigned_message(body: str, timestamp: int) -> bytes:
    """What an Ed25519 cosignature signs: the header, the time line, the checkpoint body."""
    if not isinstance(body, str) or not body.endswith("\n"):
        raise ValueError("a checkpoint body is a str ending in a newline")
    _check_timestamp(timestamp)
    return f"cosignature/v1\ntime {timestamp}\n{body}".encode()


def _check_timestamp(timestamp: object) -> int:
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise TypeError(f"a cosignature timestamp is an int, not {type(timestamp).__name__}")
    if not 0 <= timestamp <= MAX_TIMESTAMP:
        raise ValueError(f"a cosignature timestamp is within 0..2^63-1, not {timestamp}")
    return timestamp


@dataclass(frozen=True, slots=True)
class CosignerKey:
    """A witness's Ed25519 cosigning key as a verifier trusts it: its name and public key."""

    name: str
    public_key: bytes

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not isinstance(self.public_key, bytes) or len(self.public_key) != 32:
            raise ValueError("an Ed25519 cosigner public key is exactly 32 bytes")

    @classmethod
    def from_vkey(cls, vkey: str) -> CosignerKey:
        """Parse ``name+hash+base64(0x04 || key)``; a wrong type or hash is refused."""
        if not isinstance(vkey, str):
            raise TypeError(f"a cosigner vkey is a str, not {type(vkey).__name__}")
        name, plus1, rest = vkey.partition("+")
        hash_text, plus2, key_text = rest.partition("+")
        shape = "expected NAME+HASH+KEY (8 hex digits, then base64 of 0x04 and the key)"
        if not (plus1 and plus2) or len(hash_text) != 8:
            raise ValueError(f"{vkey!r} is not a cosigner vkey: {shape}")
        problem = _name_problem(name)
        if problem:
            raise ValueError(f"{vkey!r} is not a cosigner vkey: {problem}")
        try:
            wanted = int(hash_text, 16)
            key = b64decode_canonical(key_text)
        except ValueError:
            raise ValueError(f"{vkey!r} is not a cosigner vkey: {shape}") from None
        if len(key) != 33 or key[0] != COSIGNATURE_TYPE:
            kind = f"type 0x{key[0]:02x}" if key else "empty"
            raise ValueError(
                f"{vkey!r} is not an Ed25519 cosignature/v1 vkey ({kind}; a witness key has "
                "type 0x04 and 32 key bytes; a type 0x01 key is a log's note key)"
            )
        found = cls(name, key[1:])
        if found.key_hash != wanted:
            raise ValueError(
                f"cosigner vkey {vkey!r}: its hash {hash_text} does not match its name and key "
                f"(expected {found.key_hash:08x}); it was mistyped or altered"
            )
        return found

    @property
    def key_hash(self) -> int:
        return _key_hash(self.name, self.public_key)

    @property
    def vkey(self) -> str:
        blob = base64.b64encode(bytes([COSIGNATURE_TYPE]) + self.public_key).decode("ascii")
        return f"{self.name}+{self.key_hash:08x}+{blob}"

    def verify(self, body: str, cosignature: Cosignature) -> bool:
        """Is ``cosignature`` this key's, over checkpoint ``body``? Never raises for a bad one."""
        if cosignature.name != self.name or cosignature.key_hash != self.key_hash:
            return False
        try:
            message = cosigned_message(body, cosignature.timestamp)
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(
                cosignature.signature, message
            )
        except (InvalidSignature, ValueError, TypeError):
            return False
        return True


@dataclass(frozen=True, slots=True)
class Cosignature:
    """One parsed cosignature line: who (name, key ID), when, and the signature."""

    name: str
    key_hash: int
    timestamp: int
    signature: bytes

    @property
    def line(self) -> str:
        """The signature line, with its newline: what a cosigned note carries."""
        blob = self.key_hash.to_bytes(4, "big") + self.timestamp.to_bytes(8, "big")
        return f"{_DASH}{self.name} {base64.b64encode(blob + self.signature).decode('ascii')}\n"

    @classmethod
    def parse(cls, line: str) -> Cosignature:
        """Parse ``— name base64(...)`` (trailing newline optional); ``ValueError`` if it is
        not a well-formed Ed25519 cosignature line (a line of another length is another
        signature type, or not a cosignature)."""
        if not isinstance(line, str):
            raise ValueError(f"a cosignature line is text, not {type(line).__name__}")
        text = line[:-1] if line.endswith("\n") else line
        if not text.startswith(_DASH) or "\n" in text:
            raise ValueError("a cosignature line is one line starting with '— '")
        name, space, b64 = text[len(_DASH) :].partition(" ")
        problem = _name_problem(name)
        if problem or not space:
            raise ValueError(f"not '— <name> <base64>': {problem or 'no signature'}")
        try:
            blob = b64decode_canonical(b64)
        except ValueError as exc:
            raise ValueError(f"the cosignature is not canonical base64: {exc}") from None
        if len(blob) != _BLOB:
            raise ValueError(
                f"the signature holds {len(blob)} bytes, not {_BLOB} (key ID, timestamp and an "
                "Ed25519 signature): not an Ed25519 cosignature/v1"
            )
        timestamp = int.from_bytes(blob[4:12], "big")
        if timestamp > MAX_TIMESTAMP:
            raise ValueError(f"the cosignature's timestamp {timestamp} exceeds 2^63 - 1")
        return cls(name, int.from_bytes(blob[:4], "big"), timestamp, blob[12:])


class Cosigner:
    """Makes Ed25519 cosignatures as witness ``name`` from a caller's 32-byte seed."""

    __slots__ = ("_key", "key")
    _key: Ed25519PrivateKey
    key: CosignerKey

    def __init__(self, name: str, seed: bytes) -> None:
        _check_name(name)
        if not isinstance(seed, bytes) or len(seed) != 32:
            raise ValueError("an Ed25519 seed is exactly 32 bytes")
        private = Ed25519PrivateKey.from_private_bytes(seed)
        public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        object.__setattr__(self, "_key", private)
        object.__setattr__(self, "key", CosignerKey(name, public))

    def cosign(self, body: str, timestamp: int) -> Cosignature:
        """The cosignature of checkpoint ``body`` at ``timestamp``."""
        signature = self._key.sign(cosigned_message(body, timestamp))
        return Cosignature(self.key.name, self.key.key_hash, timestamp, signature)

    def __repr__(self) -> str:
        return f"Cosigner({self.key.vkey!r})"

    def __getstate__(self) -> NoReturn:
        raise TypeError("Cosigner holds a private key and cannot be pickled or copied")

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError("Cosigner holds a private key and cannot be pickled or copied")

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("Cosigner is immutable")
