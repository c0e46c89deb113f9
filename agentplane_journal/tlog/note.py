"""C2SP signed notes with Ed25519: how a published checkpoint proves who published it.

An unsigned checkpoint note says what a log's state is; anyone who can write the database
(or the web page it is published on) can write one too. A signed note binds the text to a
key the log's operator holds, in the format every transparency-log tool reads
(c2sp.org/signed-note, Go's ``golang.org/x/mod/sumdb/note``):

* the note is a text ending in a newline, a blank line, then one or more signature lines
  ``— <key name> <base64(key ID (4 bytes, big-endian) || Ed25519 signature)>\\n``
  (an em dash U+2014 and a space first); the text is everything up to and including the
  newline before the *last* blank line, and it is exactly what is signed;
* the whole note is valid UTF-8 with no control character other than newline;
* a key name is non-empty, with no Unicode space and no ``+``;
* key ID = the first 4 bytes, big-endian, of SHA-256(key name || 0x0A || 0x01 || 32-byte
  public key), 0x01 being the Ed25519 signature type;
* a verifier key (what an operator publishes and a witness configures) is
  ``<name>+<key ID as 8 hex digits>+<base64(0x01 || public key)>``.

Opening a note follows the spec's trust rules: a signature line whose (name, key ID) no
trusted key has is ignored (that is how witnesses add cosignatures and keys rotate), a
signature by a trusted key that does not verify rejects the whole note, and a note with no
verified signature from a trusted key is rejected. Every line must still be well formed:
a malformed line, even an unknown key's, makes the note malformed.

Pure: no I/O. The signing seed is the caller's; this module never generates, stores, logs or
pickles one.
"""

from __future__ import annotations

import base64
import hashlib
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NoReturn, cast

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from agentplane_journal.core.b64 import b64decode_canonical
from agentplane_journal.core.error_groups import CorruptionError

__all__ = [
    "ED25519_TYPE",
    "MAX_SIGNATURES",
    "NoteSigner",
    "NoteVerificationError",
    "NoteVerifier",
    "OpenedNote",
    "key_hash",
    "open_note",
    "sign_note",
]

ED25519_TYPE = 0x01
"""The signature type byte c2sp.org/signed-note assigns to Ed25519."""

MAX_SIGNATURES = 100
"""Most signature lines a note may carry (the spec asks verifiers to accept at least 16)."""

_DASH = "\u2014 "
_SEED_BYTES = 32
_PUBLIC_BYTES = 32
_SIGNATURE_BYTES = 64
_HEX8 = re.compile(r"[0-9a-fA-F]{8}")


class NoteVerificationError(ValueError, CorruptionError):
    """A signed note failed its signature check (not merely malformed text).

    Raised when a trusted key's signature does not verify, or when no signature from a
    trusted key is present at all. ``names`` lists the key names the note was signed with.
    """

    def __init__(self, message: str, names: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.names = names


def _name_problem(name: object) -> str | None:
    if not isinstance(name, str):
        return f"a key name is a str, not {type(name).__name__}"
    if not name:
        return "the key name is empty"
    for ch in name:
        if ch == "+":
            return f"key name {name!r} contains '+', which the verifier key format reserves"
        if ch.isspace() or unicodedata.category(ch) in ("Zs", "Zl", "Zp", "Cc"):
            return f"key name {name!r} contains a space or control character (U+{ord(ch):04X})"
        if "\ud800" <= ch <= "\udfff":
            return f"key name {name!r} is not valid Unicode (lone surrogate)"
    return None


def _check_name(name: object) -> str:
    problem = _name_problem(name)
    if problem:
        raise ValueError(problem)
    return cast(str, name)  # _name_problem refuses anything but a str


def key_hash(name: str, public_key: bytes) -> int:
    """The spec's Ed25519 key ID (Go: the key hash), as a big-endian uint32:
    the first 4 bytes of SHA-256(name || 0x0A || 0x01 || public key)."""
    _check_name(name)
    if not isinstance(public_key, bytes | bytearray | memoryview) or len(public_key) != 32:
        raise ValueError("an Ed25519 public key is exactly 32 bytes")
    digest = hashlib.sha256(
        name.encode("utf-8") + b"\n" + bytes([ED25519_TYPE]) + bytes(public_key)
    ).digest()
    return int.from_bytes(digest[:4], "big")


def _verifier_key(name: str, hash_: int, public_key: bytes) -> str:
    encoded = base64.b64encode(bytes([ED25519_TYPE]) + public_key).decode("ascii")
    return f"{name}+{hash_:08x}+{encoded}"


class NoteSigner:
    """Signs notes as ``name`` with an Ed25519 key from a caller-supplied 32-byte seed.

    Only the key object is kept (no ``seed`` attribute), the ``repr`` shows the verifier key,
    and pickling is refused. ``verifier_key`` is what the operator publishes; witnesses and
    auditors configure it to check notes.
    """

    __slots__ = ("_key", "key_hash", "name", "public_key")
    _key: Ed25519PrivateKey
    name: str
    public_key: bytes
    key_hash: int

    def __init__(self, name: str, seed: bytes) -> None:
        _check_name(name)
        if not isinstance(seed, bytes | bytearray | memoryview):
            raise TypeError(f"the seed is {_SEED_BYTES} bytes, not {type(seed).__name__}")
        if len(seed) != _SEED_BYTES:
            # Never echo the seed itself, only its length.
            raise ValueError(f"an Ed25519 seed is exactly {_SEED_BYTES} bytes, got {len(seed)}")
        key = Ed25519PrivateKey.from_private_bytes(bytes(seed))
        public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "public_key", public)
        object.__setattr__(self, "key_hash", key_hash(name, public))

    @property
    def verifier_key(self) -> str:
        """``name+hash+base64(0x01 || public key)``: safe to publish."""
        return _verifier_key(self.name, self.key_hash, self.public_key)

    @property
    def verifier(self) -> NoteVerifier:
        return NoteVerifier(self.name, self.public_key)

    def signature_line(self, text: str) -> str:
        """The ``— name base64(key ID || signature)`` line (with its newline) for ``text``."""
        raw = _check_text(text).encode("utf-8")
        blob = self.key_hash.to_bytes(4, "big") + self._key.sign(raw)
        return f"{_DASH}{self.name} {base64.b64encode(blob).decode('ascii')}\n"

    def __repr__(self) -> str:
        return f"NoteSigner({self.verifier_key!r})"

    __str__ = __repr__

    def __getstate__(self) -> NoReturn:
        raise TypeError("NoteSigner holds a private key and cannot be pickled or copied")

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError("NoteSigner holds a private key and cannot be pickled or copied")

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("NoteSigner is immutable")


@dataclass(frozen=True, slots=True)
class NoteVerifier:
    """A trusted Ed25519 note key: its name, key ID and public key."""

    name: str
    public_key: bytes

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not isinstance(self.public_key, bytes) or len(self.public_key) != _PUBLIC_BYTES:
            raise ValueError(f"an Ed25519 public key is exactly {_PUBLIC_BYTES} bytes")

    @classmethod
    def from_key(cls, vkey: NoteVerifier | str) -> NoteVerifier:
        """Parse a verifier key ``name+hash+base64(0x01 || key)``, checking its hash.

        A key whose hash does not match its name and public key is refused, not trusted
        under either reading: it was mistyped or altered.
        """
        if isinstance(vkey, NoteVerifier):
            return vkey
        if not isinstance(vkey, str):
            raise TypeError(f"a verifier key is a str, not {type(vkey).__name__}")
        name, plus1, rest = vkey.partition("+")
        hash_text, plus2, key_text = rest.partition("+")
        shape = "expected NAME+HASH+KEY (8 hex digits, then base64 of 0x01 and the public key)"
        if not (plus1 and plus2):
            raise ValueError(f"{vkey!r} is not a verifier key: {shape}")
        problem = _name_problem(name)
        if problem:
            raise ValueError(f"{vkey!r} is not a verifier key: {problem}")
        if not _HEX8.fullmatch(hash_text):
            raise ValueError(f"{vkey!r} is not a verifier key: {shape}")
        try:
            key = b64decode_canonical(key_text)
        except ValueError as exc:
            raise ValueError(
                f"{vkey!r} is not a verifier key: its key is not canonical base64 ({exc}); {shape}"
            ) from None
        if len(key) != 1 + _PUBLIC_BYTES or key[0] != ED25519_TYPE:
            raise ValueError(
                f"{vkey!r} is not an Ed25519 verifier key (type byte 0x01 and 32 key bytes)"
            )
        verifier = cls(name, key[1:])
        if verifier.key_hash != int(hash_text, 16):
            raise ValueError(
                f"verifier key {vkey!r}: its hash {hash_text} does not match its name and "
                f"key (expected {verifier.key_hash:08x}); it was mistyped or altered"
            )
        return verifier

    @property
    def key_hash(self) -> int:
        return key_hash(self.name, self.public_key)

    @property
    def verifier_key(self) -> str:
        return _verifier_key(self.name, self.key_hash, self.public_key)

    def verify(self, text: bytes, signature: bytes) -> bool:
        if len(signature) != _SIGNATURE_BYTES:
            return False
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, text)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True, slots=True)
class OpenedNote:
    """A note whose signatures were checked: its text and who signed it.

    ``verified`` are the trusted keys whose signatures verified; ``unverified`` the
    (name, key ID) of signature lines from keys not trusted here, which were not checked.
    """

    text: str
    verified: tuple[NoteVerifier, ...]
    unverified: tuple[tuple[str, int], ...]


def _check_text(text: object) -> str:
    """Note text: UTF-8, ends in a newline, no control character but newline."""
    if not isinstance(text, str):
        raise TypeError(f"note text is a str, not {type(text).__name__}")
    if not text.endswith("\n"):
        raise ValueError("note text must end with a newline")
    _check_characters(text, "note text")
    return text


def _check_characters(text: str, what: str) -> None:
    for ch in text:
        if (ch < " " and ch != "\n") or "\ud800" <= ch <= "\udfff":
            raise ValueError(
                f"{what} contains U+{ord(ch):04X}; a signed note is UTF-8 with no control "
                "character other than newline"
            )


def sign_note(text: str, signer: NoteSigner, *others: NoteSigner) -> str:
    """``text``, a blank line, and one signature line per signer, in the order given."""
    _check_text(text)
    signers = (signer, *others)
    seen = set()
    for s in signers:
        if not isinstance(s, NoteSigner):
            raise TypeError(f"signers are NoteSigners, not {type(s).__name__}")
        if (s.name, s.key_hash) in seen:
            raise ValueError(f"two signers share the key name {s.name!r} and key ID")
        seen.add((s.name, s.key_hash))
    return text + "\n" + "".join(s.signature_line(text) for s in signers)


def _verifiers(keys: Iterable[NoteVerifier | str]) -> dict[tuple[str, int], NoteVerifier]:
    if isinstance(keys, str | NoteVerifier):
        keys = [keys]
    known: dict[tuple[str, int], NoteVerifier] = {}
    for key in keys:
        verifier = NoteVerifier.from_key(key)
        slot = (verifier.name, verifier.key_hash)
        if slot in known and known[slot] != verifier:
            raise ValueError(
                f"two trusted keys share the name {verifier.name!r} and key ID "
                f"{verifier.key_hash:08x}; a signature could not say which one it is from"
            )
        known[slot] = verifier
    return known


def open_note(note: str | bytes, verifier_keys: Iterable[NoteVerifier | str]) -> OpenedNote:
    """Check a signed note against the trusted ``verifier_keys`` and return its text.

    ``ValueError`` for a malformed note; :class:`NoteVerificationError` when a trusted key's
    signature fails or no trusted key signed it. Signatures by keys not in
    ``verifier_keys`` are listed in ``unverified`` and otherwise ignored, as the spec says.
    """
    known = _verifiers(verifier_keys)
    if isinstance(note, bytes | bytearray | memoryview):
        try:
            note = bytes(note).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("a signed note must be valid UTF-8") from None
    if not isinstance(note, str):
        raise TypeError(f"a signed note is a str, not {type(note).__name__}")
    _check_characters(note, "the note")
    split = note.rfind("\n\n")
    if split < 0:
        raise ValueError("not a signed note: no blank line between the text and its signatures")
    text, block = note[: split + 1], note[split + 2 :]
    if not block:
        raise ValueError(
            "not a signed note: nothing follows its last blank line (a note ends with its "
            "signature lines, and has no blank line after them)"
        )
    if not block.endswith("\n"):
        raise ValueError("not a signed note: the signature lines must end with a newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise ValueError(
            f"the note has {len(lines)} signature lines; the limit is {MAX_SIGNATURES}"
        )
    raw = text.encode("utf-8")
    verified: list[NoteVerifier] = []
    unverified: list[tuple[str, int]] = []
    names: list[str] = []
    for number, line in enumerate(lines, start=1):
        name, blob = _parse_signature_line(line, number)
        hash_ = int.from_bytes(blob[:4], "big")
        names.append(name)
        verifier = known.get((name, hash_))
        if verifier is None:
            unverified.append((name, hash_))
            continue
        if not verifier.verify(raw, blob[4:]):
            raise NoteVerificationError(
                f"the signature by trusted key {name!r} ({hash_:08x}) does not verify: the note "
                "was altered, or it was not signed by that key",
                tuple(names),
            )
        if verifier not in verified:
            verified.append(verifier)
    if not verified:
        signed_by = ", ".join(f"{n!r} ({h:08x})" for n, h in unverified)
        raise NoteVerificationError(
            f"no trusted key signed this note (it is signed by {signed_by}); trust the log's "
            "verifier key to check it",
            tuple(names),
        )
    return OpenedNote(text, tuple(verified), tuple(unverified))


def _parse_signature_line(line: str, number: int) -> tuple[str, bytes]:
    where = f"signature line {number}"
    if not line.startswith(_DASH):
        raise ValueError(f"{where} does not start with an em dash and a space ('— ')")
    name, space, b64 = line[len(_DASH) :].partition(" ")
    problem = _name_problem(name)
    if problem or not space or not b64:
        raise ValueError(f"{where} is not '— <key name> <base64 signature>'")
    try:
        blob = b64decode_canonical(b64)
    except ValueError as exc:
        # Every line, a trusted key's or not: a note is malformed or it is not.
        raise ValueError(
            f"{where}: the signature is not standard base64 in its one canonical spelling: {exc}"
        ) from None
    if len(blob) < 5:
        raise ValueError(f"{where}: the signature is too short to hold a key ID and a signature")
    return name, blob
