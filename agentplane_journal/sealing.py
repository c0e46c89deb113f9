"""Secrets at rest: AES-256-GCM sealing of push tokens and credentials, and the keyring.

A sealed value is self-describing text, ``apj:v1:<key id>:<base64url(nonce || ciphertext)>``,
so rows written without a key (or by agentplane itself) still read as plaintext, and keys
rotate without downtime: reads open any key the keyring holds, writes use the current one.
The row's ``(tenant, task_id, config_id, column)`` is the associated data, so a ciphertext
copied to another row, column or tenant does not open. Nothing here ever puts a secret, a
key or a ciphertext into an error message or a ``repr``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Mapping

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import SecretUnavailableError

__all__ = ["KEY_BYTES", "Keyring", "is_sealed", "keyring_from", "open_secret", "seal_secret"]

KEY_BYTES = 32
NONCE_BYTES = 12
_TAG_BYTES = 16
_AAD_DOMAIN = b"agentplane_journal/push-secret/v1"
_KEY_ID_DOMAIN = b"agentplane_journal/push-key-id\x00"
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,32}")
# Any `apj:v<n>:` value is an envelope (a later format version must not be read as a token).
_ENVELOPE = re.compile(r"apj:v([0-9]+):")
_ENVELOPE_V1 = re.compile(r"apj:v1:([A-Za-z0-9._-]{1,32}):([A-Za-z0-9_-]+)")


# -- keys -------------------------------------------------------------------


def _check_key(key: object, name: str) -> bytes:
    if isinstance(key, str):
        raise TypeError(f"{name} must be {KEY_BYTES} raw bytes, not a str (decode it first)")
    if not isinstance(key, bytes | bytearray | memoryview):
        raise TypeError(f"{name} must be {KEY_BYTES} raw bytes, not {type(key).__name__}")
    key = bytes(key)
    if len(key) != KEY_BYTES:
        # Never echo the key, not even a prefix of it.
        raise ValueError(f"{name} must be exactly {KEY_BYTES} bytes, got {len(key)}")
    return key


class Keyring:
    """The keys push secrets are sealed with: several ids for reading, one current for writing.

    ``Keyring({"k1": old, "k2": new}, current="k2")`` opens values sealed under either key and
    seals new ones under ``k2``. Key ids are 1-32 characters of ``[A-Za-z0-9._-]``; they are
    stored in the clear in each sealed value, the keys never are. ``Keyring.from_keys(new,
    old)`` names keys by :meth:`key_id_for`, which is also the id ``secret_key=`` uses.
    """

    __slots__ = ("_aeads", "_current")

    def __init__(self, keys: Mapping[str, bytes], current: str | None = None) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise ValueError("a Keyring needs a mapping of at least one {key_id: key}")
        aeads: dict[str, AESGCM] = {}
        for key_id, key in keys.items():
            if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
                raise ValueError(
                    f"key id {key_id!r} must be 1-32 characters of letters, digits, '.', '_', '-'"
                )
            aeads[key_id] = AESGCM(_check_key(key, f"key {key_id!r}"))
        if current is None:
            if len(aeads) != 1:
                raise ValueError("a Keyring with several keys must name the current one")
            current = next(iter(aeads))
        elif current not in aeads:
            raise ValueError(f"the current key id {current!r} is not in the keyring")
        self._aeads = aeads
        self._current = current

    @staticmethod
    def key_id_for(key: bytes) -> str:
        """The id a bare key is stored under: ``k`` and 8 hex digits of a SHA-256 of it.

        A 32-bit fingerprint of a 256-bit random key tells an attacker nothing useful, and it
        lets a store tell "sealed under another key" from "tampered with".
        """
        digest = hashlib.sha256(_KEY_ID_DOMAIN + _check_key(key, "secret_key")).hexdigest()
        return "k" + digest[:8]

    @classmethod
    def from_keys(cls, current: bytes, *older: bytes) -> Keyring:
        """A keyring writing under ``current`` and still reading ``older`` keys."""
        keys: dict[str, bytes] = {}
        for key in (current, *older):
            keys.setdefault(cls.key_id_for(key), key)
        return cls(keys, current=cls.key_id_for(current))

    @property
    def current(self) -> str:
        """The id new values are sealed under."""
        return self._current

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every id this keyring can open."""
        return tuple(self._aeads)

    def __repr__(self) -> str:
        return f"Keyring(key_ids={self.key_ids!r}, current={self._current!r})"

    def _aead(self, key_id: str) -> AESGCM | None:
        return self._aeads.get(key_id)


def keyring_from(secret_key: bytes | None, keyring: Keyring | None) -> Keyring | None:
    if secret_key is not None and keyring is not None:
        raise ValueError("pass secret_key= or keyring=, not both")
    if keyring is not None:
        if not isinstance(keyring, Keyring):
            raise TypeError(f"keyring must be a Keyring, not {type(keyring).__name__}")
        return keyring
    return None if secret_key is None else Keyring.from_keys(secret_key)


def _aad(tenant: str, task_id: str, config_id: str, column: str) -> bytes:
    # Length-prefixed, so no two different rows encode to the same bytes.
    out = bytearray(_AAD_DOMAIN)
    for part in (tenant, task_id, config_id, column):
        data = part.encode("utf-8")
        out += len(data).to_bytes(4, "big") + data
    return bytes(out)


def is_sealed(stored: str) -> bool:
    return _ENVELOPE.match(stored) is not None


def seal_secret(
    keyring: Keyring | None,
    value: str | None,
    *,
    tenant: str,
    task_id: str,
    config_id: str,
    column: str,
) -> str | None:
    if value is None:
        return None
    if keyring is None:
        if is_sealed(value):
            raise ValueError(
                f"{column} begins with 'apj:v<n>:', which marks sealed values; a store without "
                "a secret key cannot store it (configure secret_key= or keyring=)"
            )
        return value
    key_id = keyring.current
    nonce = os.urandom(NONCE_BYTES)
    sealed = keyring._aead(key_id).encrypt(  # type: ignore[union-attr]
        nonce, value.encode("utf-8"), _aad(tenant, task_id, config_id, column)
    )
    body = base64.urlsafe_b64encode(nonce + sealed).rstrip(b"=").decode("ascii")
    return f"apj:v1:{key_id}:{body}"


def open_secret(
    keyring: Keyring | None,
    stored: str | None,
    *,
    tenant: str,
    task_id: str,
    config_id: str,
    column: str,
) -> str | None:
    if stored is None or not is_sealed(stored):
        return stored  # plaintext: written without a key, or by agentplane itself
    where = f"registration {config_id!r} of task {task_id} in tenant {tenant!r}"
    envelope = _ENVELOPE_V1.fullmatch(stored)
    if envelope is None:
        version = _ENVELOPE.match(stored).group(1)  # type: ignore[union-attr]
        detail = (
            f"{where} holds a sealed value of format v{version}, which this version cannot read"
            if version != "1"
            else f"{where} holds a malformed sealed value"
        )
        raise SecretUnavailableError(None, column, detail)
    key_id, body = envelope.groups()
    if keyring is None:
        detail = (
            f"{where} is sealed, but this store has no secret key; open it with secret_key= "
            "or keyring= holding that key"
        )
        raise SecretUnavailableError(key_id, column, detail)
    aead = keyring._aead(key_id)
    if aead is None:
        held = ", ".join(keyring.key_ids)
        detail = f"{where} is sealed under a key this store does not hold (it holds {held})"
        raise SecretUnavailableError(key_id, column, detail + "; add that key to the keyring")
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        raise SecretUnavailableError(key_id, column, f"{where} is not valid base64") from None
    if len(raw) < NONCE_BYTES + _TAG_BYTES:
        raise SecretUnavailableError(key_id, column, f"{where} is truncated")
    aad = _aad(tenant, task_id, config_id, column)
    try:
        plain = aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], aad)
    except InvalidTag:
        detail = (
            f"{where} does not authenticate: it was altered, copied from another row, column "
            "or tenant, or sealed under a different key with this id"
        )
        raise SecretUnavailableError(key_id, column, detail) from None
    return plain.decode("utf-8")
