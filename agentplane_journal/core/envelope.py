"""The sealed envelope, agentplane 0.22's version 1, byte for byte. Pure: no I/O.

::

    [u8 version=1][u32 BE len][wrapped data key, canon v1 JSON][24-byte nonce][ciphertext ‖ tag]

The version byte names the whole construction (layout, wrapped-key encoding, XChaCha20-
Poly1305 over the caller's associated data), so a build that does not know a version says
*this is not an envelope this build reads* (:class:`UnknownEnvelopeFormatError`) instead of
reaching the AEAD and reporting a payload that *did not authenticate*: the sentence that
means tampering (:class:`EnvelopeRefusedError`). A payload whose scope's wrapping key was
destroyed is neither: it is :class:`ScopeErasedError`, a completed erasure reporting itself.

The wrapped key is agentplane's ``WrappedKey {scope, wrapped_by, sealed}`` written as canon v1
JSON (members sorted, ``sealed`` an array of byte values, as serde writes a ``Vec<u8>``), so an
envelope written here parses in agentplane and the other way round. One parser
(:func:`parse_envelope`) for every reader: two readers of one layout could disagree about
where the ciphertext starts, and the disagreement would read as tampering.

The AEAD is libsodium's, through PyNaCl (the ``sealed`` extra), imported on first use so
that ``import agentplane_journal`` works without it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentplane_journal.core.canon_v1 import canonical_bytes_v1
from agentplane_journal.core.error_groups import CorruptionError, RefusedError

__all__ = [
    "ENVELOPE_FORMAT_VERSION",
    "KEY_BYTES",
    "NONCE_BYTES",
    "EnvelopeRefusedError",
    "ParsedEnvelope",
    "ScopeErasedError",
    "UnknownEnvelopeFormatError",
    "WrappedKey",
    "aead_decrypt",
    "aead_encrypt",
    "build_envelope",
    "open_envelope",
    "parse_envelope",
    "random_bytes",
]

ENVELOPE_FORMAT_VERSION = 1
"""The envelope construction this build writes and the only one it reads (agentplane 0.22's
``keyring::ENVELOPE_FORMAT_VERSION``). ``0`` is never written."""

NONCE_BYTES = 24
"""XChaCha20-Poly1305's nonce."""

KEY_BYTES = 32
_HEADER = 1 + 4


class EnvelopeRefusedError(CorruptionError):
    """A sealed payload that is damaged, or was moved: it does not authenticate where it is.

    This is the tampering answer: a truncated header, a wrapped key that does not parse, a
    ciphertext or associated data (tenant, run, record kind, effect) that does not match.
    Never raised for an erased scope (:class:`ScopeErasedError`) or an envelope version
    this build does not read (:class:`UnknownEnvelopeFormatError`).
    """

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(
            f"a sealed payload was refused: {detail}. The bytes were altered or moved from "
            "another record, run or tenant; check the run with 'agentplane-journal verify' "
            "and restore it from a backup if its chain is damaged"
        )


class UnknownEnvelopeFormatError(RefusedError):
    """An envelope of a format version this build does not read: not damage, not erasure."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.supported = ENVELOPE_FORMAT_VERSION
        super().__init__(
            f"this sealed envelope is format version {version} and this build reads "
            f"{ENVELOPE_FORMAT_VERSION}: the bytes are intact and not erased; they open "
            f"under a build that reads version {version}"
        )


class ScopeErasedError(RefusedError):
    """The scope's wrapping key was destroyed: the payloads it sealed are gone by design."""

    def __init__(self, scope: str, at: float | None = None, reason: str | None = None) -> None:
        self.scope = scope
        self.at = at
        self.reason = reason
        when = "" if at is None else f" at {at:.0f} (unix seconds)"
        why = "" if not reason else f" ({reason})"
        super().__init__(
            f"the wrapping key of scope {scope!r} was destroyed{when}{why}: the payloads it "
            "sealed are unrecoverable by design, in every copy including backups; nothing "
            "is wrong with the journal, and a write under this scope is refused for good"
        )


@dataclass(frozen=True, slots=True)
class WrappedKey:
    """A data key sealed under a scope's wrapping key: safe to store beside the payload.

    ``wrapped_by`` names the wrapping key (and version) that sealed it; ``sealed`` is what
    the key source returned. Its ``repr`` shows lengths, never bytes.
    """

    scope: str
    wrapped_by: str
    sealed: bytes

    def to_bytes(self) -> bytes:
        """Canon v1 JSON, as agentplane writes it (``sealed`` as an array of byte values)."""
        value = {"scope": self.scope, "wrapped_by": self.wrapped_by, "sealed": list(self.sealed)}
        return canonical_bytes_v1(value, path="wrapped key")

    @classmethod
    def from_bytes(cls, raw: bytes) -> WrappedKey:
        """Parse a wrapped key, or :class:`EnvelopeRefusedError` saying why not."""
        try:
            value: Any = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise EnvelopeRefusedError("the wrapped key would not parse") from None
        if not isinstance(value, dict):
            raise EnvelopeRefusedError("the wrapped key is not an object")
        scope, by, sealed = value.get("scope"), value.get("wrapped_by"), value.get("sealed")
        ok = (
            isinstance(scope, str)
            and isinstance(by, str)
            and isinstance(sealed, list)
            and all(type(b) is int and 0 <= b <= 255 for b in sealed)
        )
        if not ok:
            raise EnvelopeRefusedError("the wrapped key lacks scope, wrapped_by or sealed bytes")
        return cls(str(scope), str(by), bytes(sealed or ()))

    def __repr__(self) -> str:
        return (
            f"WrappedKey(scope={self.scope!r}, wrapped_by={self.wrapped_by!r}, "
            f"sealed=<{len(self.sealed)} bytes>)"
        )


@dataclass(frozen=True, slots=True)
class ParsedEnvelope:
    """An envelope split into its parts (:func:`parse_envelope`)."""

    wrapped: WrappedKey
    nonce: bytes
    sealed: bytes


def _nacl() -> Any:
    try:
        from nacl import bindings
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "sealed payloads need PyNaCl (libsodium's XChaCha20-Poly1305): install the "
            "'sealed' extra, pip install 'agentplane_journal[sealed]'"
        ) from None
    return bindings


def random_bytes(n: int) -> bytes:
    """``n`` bytes from libsodium's CSPRNG."""
    out: bytes = _nacl().randombytes(n)
    return out


def aead_encrypt(key: bytes, nonce: bytes, plaintext: bytes, aad: bytes) -> bytes:
    """XChaCha20-Poly1305 (IETF): ciphertext ‖ 16-byte tag."""
    out: bytes = _nacl().crypto_aead_xchacha20poly1305_ietf_encrypt(plaintext, aad, nonce, key)
    return out


def aead_decrypt(key: bytes, nonce: bytes, sealed: bytes, aad: bytes) -> bytes | None:
    """The plaintext, or ``None`` when ``sealed`` does not authenticate under ``aad``."""
    bindings = _nacl()
    from nacl.exceptions import CryptoError

    try:
        out: bytes = bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(sealed, aad, nonce, key)
    except CryptoError:
        return None
    return out


def build_envelope(wrapped: WrappedKey, data_key: bytes, aad: bytes, plaintext: bytes) -> bytes:
    """Seal ``plaintext`` under ``data_key`` (bound to ``aad``) into a version 1 envelope."""
    if len(data_key) != KEY_BYTES:
        raise ValueError(f"a data key is {KEY_BYTES} bytes")
    nonce = random_bytes(NONCE_BYTES)
    sealed = aead_encrypt(data_key, nonce, plaintext, aad)
    head = wrapped.to_bytes()
    return bytes([ENVELOPE_FORMAT_VERSION]) + len(head).to_bytes(4, "big") + head + nonce + sealed


def parse_envelope(envelope: bytes) -> ParsedEnvelope:
    """Split an envelope, or say why it is not one: :class:`UnknownEnvelopeFormatError` for
    another version, :class:`EnvelopeRefusedError` for damage (checked before any slice)."""
    if not envelope:
        raise EnvelopeRefusedError("the envelope is empty")
    version = envelope[0]
    if version != ENVELOPE_FORMAT_VERSION:
        raise UnknownEnvelopeFormatError(version)
    if len(envelope) < _HEADER:
        raise EnvelopeRefusedError("the envelope has no header")
    length = int.from_bytes(envelope[1:_HEADER], "big")
    if len(envelope) - _HEADER < length + NONCE_BYTES:
        raise EnvelopeRefusedError("the envelope is shorter than its own header claims")
    wrapped = WrappedKey.from_bytes(envelope[_HEADER : _HEADER + length])
    rest = envelope[_HEADER + length :]
    return ParsedEnvelope(wrapped, rest[:NONCE_BYTES], rest[NONCE_BYTES:])


def open_envelope(parsed: ParsedEnvelope, data_key: bytes, aad: bytes) -> bytes:
    """The plaintext of a parsed envelope under its opened data key, or
    :class:`EnvelopeRefusedError` when it does not authenticate under ``aad``."""
    plain = aead_decrypt(data_key, parsed.nonce, parsed.sealed, aad)
    if plain is None:
        raise EnvelopeRefusedError("the sealed payload did not authenticate")
    return plain
