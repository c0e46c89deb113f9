"""Secrets at rest: AES-256-GCM encrypting of push tokens and credentials, and the keyring.

An encrypted value is self-describing text, ``apj:v3:<key id>:<base64url(nonce || ciphertext)>``,
and keys rotate without downtime: reads open any key the keyring holds, writes use the
current one. The associated data binds the value to everything the store acts on with it:
the format version, the row's ``(tenant, task_id, config_id)``, the column, the row's
``url`` and ``auth_scheme``, and whether the row holds credentials. A ciphertext copied to
another row, column or tenant does not open, and neither does one whose row was pointed at
another host or scheme: a rewritten url cannot send the real token elsewhere.

Which secrets a row has is encrypted too, so that blanking one (setting its column to NULL) is
not a way to turn an authenticated registration into an unauthenticated one. Format v3's
plaintext is a tag byte and the value: ``\x01`` + the secret, or ``\x00`` alone, the
*absence marker* a column that must always hold an envelope (the token, see
:mod:`~agentplane_journal.push.secrets`) holds when there is no secret; and every v3 value
is bound to whether the row's credentials column is set. So a NULLed token column is
missing its marker, and a NULLed credentials column makes the token's binding fail.

Format v1 (``apj:v1:``) bound only tenant, task, config id and column; format v2 added
``url`` and ``auth_scheme`` but not which secrets the row holds. Both still open (so a v1/v2
row does not prove it was not blanked), and ``SqlPushStore.reencrypt()`` rewrites them as v3.
Anything without an ``apj:v<n>:`` prefix is plaintext, which a store holding a key refuses
unless told ``accept_plaintext=True`` (a plaintext value where an encrypted one belongs is a
downgrade).
Nothing here ever puts a secret, a key or a ciphertext into an error message or a ``repr``.
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

from agentplane_journal.errors import SecretUnavailableError

__all__ = [
    "FORMAT_VERSION",
    "KEY_BYTES",
    "Keyring",
    "is_current",
    "is_encrypted",
    "keyring_from",
    "open_secret",
    "encrypt_secret",
]

KEY_BYTES = 32
NONCE_BYTES = 12
_TAG_BYTES = 16
#: The envelope format new values are encrypted in.
FORMAT_VERSION = 3
# The version is in the domain, so an envelope relabelled to another version never opens.
_AAD_DOMAIN_V1 = b"agentplane_journal/push-secret/v1"
_AAD_DOMAIN_V2 = b"agentplane_journal/push-secret/v2"
_AAD_DOMAIN_V3 = b"agentplane_journal/push-secret/v3"
_AAD_DOMAINS = {"1": _AAD_DOMAIN_V1, "2": _AAD_DOMAIN_V2, "3": _AAD_DOMAIN_V3}
# v3 plaintext: a tag byte, then the value (present) or nothing (the absence marker).
_PRESENT = b"\x01"
_MISSING = b"\x00"
_ABSENT = b"\xff\xff\xff\xff"  # an absent (NULL) part: no string encodes to this length
_KEY_ID_DOMAIN = b"agentplane_journal/push-key-id\x00"
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,32}")
# Any `apj:v<n>:` value is an envelope (a later format version must not be read as a token).
_ENVELOPE = re.compile(r"apj:v([0-9]+):")
_CIPHERTEXT = re.compile(r"apj:v([123]):([A-Za-z0-9._-]{1,32}):([A-Za-z0-9_-]+)")


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
    """The keys push secrets are encrypted with: several ids for reading, one current for writing.

    ``Keyring({"k1": old, "k2": new}, current="k2")`` opens values encrypted under either key and
    encrypts new ones under ``k2``. Key ids are 1-32 characters of ``[A-Za-z0-9._-]``; they are
    stored in the clear in each encrypted value, the keys never are. ``Keyring.from_keys(new,
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
        lets a store tell "encrypted under another key" from "tampered with".
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
        """The id new values are encrypted under."""
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


def _aad(version: str, parts: tuple[str | None, ...]) -> bytes:
    # Length-prefixed, so no two different rows encode to the same bytes.
    out = bytearray(_AAD_DOMAINS[version])
    for part in parts:
        if part is None:
            out += _ABSENT
            continue
        data = part.encode("utf-8")
        out += len(data).to_bytes(4, "big") + data
    return bytes(out)


def _parts(
    version: str,
    tenant: str,
    task_id: str,
    config_id: str,
    column: str,
    url: str,
    auth_scheme: str | None,
    with_credentials: bool,
) -> tuple[str | None, ...]:
    if version == "1":
        return (tenant, task_id, config_id, column)
    if version == "2":
        return (tenant, task_id, config_id, column, url, auth_scheme)
    shape = "with credentials" if with_credentials else "without credentials"
    return (tenant, task_id, config_id, column, url, auth_scheme, shape)


def is_encrypted(stored: str) -> bool:
    return _ENVELOPE.match(stored) is not None


def is_current(keyring: Keyring, stored: str | None) -> bool:
    """Whether ``stored`` is absent or already in the current format under the current key.

    (Whether absent is allowed is the row's business: see :mod:`~agentplane_journal.push.secrets`.)
    """
    return stored is None or stored.startswith(f"apj:v{FORMAT_VERSION}:{keyring.current}:")


def encrypt_secret(
    keyring: Keyring | None,
    value: str | None,
    *,
    tenant: str,
    task_id: str,
    config_id: str,
    column: str,
    url: str,
    auth_scheme: str | None,
    with_credentials: bool,
    mark_absent: bool = False,
) -> str | None:
    """Encrypt ``value`` for one column of one row.

    ``None`` stays ``None``, unless ``mark_absent`` and there is a keyring: then it is encrypted
    as the absence marker, which opens as ``None`` and proves the row had no value there.
    Without a keyring the value is stored as it is (agentplane 0.4.0's plaintext), unless it
    would read back as an envelope.
    """
    if value is None and (keyring is None or not mark_absent):
        return None
    if keyring is None:
        assert value is not None
        if is_encrypted(value):
            raise ValueError(
                f"{column} begins with 'apj:v<n>:', which marks encrypted values; a store without "
                "a secret key cannot store it (configure secret_key= or keyring=)"
            )
        return value
    key_id = keyring.current
    version = str(FORMAT_VERSION)
    parts = _parts(version, tenant, task_id, config_id, column, url, auth_scheme, with_credentials)
    plain = _MISSING if value is None else _PRESENT + value.encode("utf-8")
    nonce = os.urandom(NONCE_BYTES)
    # The current key is always one of the keyring's (Keyring.__init__ checks it).
    encrypted = keyring._aeads[key_id].encrypt(nonce, plain, _aad(version, parts))
    body = base64.urlsafe_b64encode(nonce + encrypted).rstrip(b"=").decode("ascii")
    return f"apj:v{version}:{key_id}:{body}"


def open_secret(
    keyring: Keyring | None,
    stored: str | None,
    *,
    tenant: str,
    task_id: str,
    config_id: str,
    column: str,
    url: str,
    auth_scheme: str | None,
    with_credentials: bool,
    accept_plaintext: bool = False,
) -> str | None:
    """The secret in ``stored``, or :class:`SecretUnavailableError` saying why it is not.

    Plaintext reads back as it is only without a keyring (the store keeps agentplane 0.4.0's
    format) or with ``accept_plaintext``; a store that has a key refuses it otherwise.
    """
    if stored is None:
        return None
    where = f"registration {config_id!r} of task {task_id} in tenant {tenant!r}"
    marked = _ENVELOPE.match(stored)  # is_encrypted(stored)
    if marked is None:
        if keyring is None or accept_plaintext:
            return stored  # plaintext: written without a key, or by agentplane itself
        detail = (
            f"{where} holds plaintext where this store, which has a key, expects an encrypted "
            "value: someone replaced the encrypted value (a downgrade), or the row was written by "
            "agentplane or by a store without a key. To adopt such rows, open the store with "
            "accept_plaintext=True and run reencrypt()"
        )
        raise SecretUnavailableError(None, column, detail)
    envelope = _CIPHERTEXT.fullmatch(stored)
    if envelope is None:
        version = marked.group(1)
        detail = (
            f"{where} holds an encrypted value of format v{version}, which this version cannot read"
            if version not in _AAD_DOMAINS
            else f"{where} holds a malformed encrypted value"
        )
        raise SecretUnavailableError(None, column, detail)
    version, key_id, body = envelope.groups()
    if keyring is None:
        detail = (
            f"{where} is encrypted, but this store has no secret key; open it with secret_key= "
            "or keyring= holding that key"
        )
        raise SecretUnavailableError(key_id, column, detail)
    aead = keyring._aead(key_id)
    if aead is None:
        held = ", ".join(keyring.key_ids)
        detail = f"{where} is encrypted under a key this store does not hold (it holds {held})"
        raise SecretUnavailableError(key_id, column, detail + "; add that key to the keyring")
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        raise SecretUnavailableError(key_id, column, f"{where} is not valid base64") from None
    if len(raw) < NONCE_BYTES + _TAG_BYTES:
        raise SecretUnavailableError(key_id, column, f"{where} is truncated")
    parts = _parts(version, tenant, task_id, config_id, column, url, auth_scheme, with_credentials)
    try:
        plain = aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _aad(version, parts))
    except InvalidTag:
        bound = {
            "1": "",
            "2": ", its row's url or auth_scheme was rewritten",
            "3": ", its row's url or auth_scheme was rewritten, or its credentials were "
            "removed (blanked) or added",
        }[version]
        detail = (
            f"{where} does not authenticate: it was altered, copied from another row, column "
            f"or tenant{bound}, or encrypted under a different key with this id"
        )
        raise SecretUnavailableError(key_id, column, detail) from None
    if version == "3":
        if plain == _MISSING:
            return None  # the absence marker: the row was encrypted without a value here
        if plain[:1] != _PRESENT:  # authenticated, so only a key-holder's bug could cause it
            raise SecretUnavailableError(key_id, column, f"{where} has an unknown tag")
        plain = plain[1:]
    try:
        return plain.decode("utf-8")
    except UnicodeDecodeError:  # authenticated, so only a key-holder's bug could cause it
        raise SecretUnavailableError(key_id, column, f"{where} is not UTF-8") from None
