"""Identifiers and digests: the values every record, column and proof is built from.

Each type here has exactly one wire form, and these classes are the only place it is
produced or parsed: a run id is ``run_<ULID>`` in columns and text but the bare ULID inside
a hashed body; a digest is 32 raw bytes in binary columns and 64 lower-case hex in JSON.
Getting either wrong does not fail loudly, it silently changes every hash, so the
conversions are explicit methods rather than ``str()`` guesses at the call site.

Values are immutable, compare by value and are hashable, so they can key dicts and sets.
Equality is type-strict: a :class:`Digest` never equals an :class:`EffectKey` with the same
bytes, and a :class:`RunId` never equals a :class:`CaseId`.
"""

from __future__ import annotations

import hashlib
import re
import struct
import unicodedata
from typing import Any, ClassVar, NoReturn, TypeVar

from ulid import ULID

__all__ = [
    "DEFAULT_TENANT",
    "PHASES",
    "CaseId",
    "Digest",
    "EffectKey",
    "RunId",
    "validate_step",
    "validate_tenant",
]

U32_MAX = 0xFFFF_FFFF
"""Largest step id, ordinal and attempt: agentplane stores them as ``u32``."""

PHASES: tuple[str, ...] = ("forward", "compensating")
"""The two phases a step runs in; their index is the phase byte in effect-key derivation."""

DEFAULT_TENANT = "default"
"""The tenant a store handle serves unless it was made with ``for_tenant``."""

_TENANT_MAX = 64
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
# Crockford base32, either case; the first character is 0-7 because 26 characters carry
# 130 bits and a ULID has 128. The class is spelt out (no IGNORECASE) so that Unicode case
# folding cannot sneak non-ASCII look-alikes such as U+017F (long s) past the check.
_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}")
# Rust's str::trim strips Unicode White_Space; Python's str.strip() also strips U+001C..U+001F,
# which are control characters we must refuse, not silently drop.
_WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def _immutable(self: object, name: str, value: object = None) -> NoReturn:
    raise AttributeError(f"{type(self).__name__} is immutable")


_B = TypeVar("_B", bound="_Bytes32")


class _Bytes32:
    """32 immutable bytes with a hex form: the shared body of Digest and EffectKey."""

    __slots__ = ("_bytes",)
    _bytes: bytes

    def __init__(self, value: bytes) -> None:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"{type(self).__name__} takes 32 bytes, not {type(value).__name__}")
        raw = bytes(value)
        if len(raw) != 32:
            raise ValueError(f"{type(self).__name__} takes exactly 32 bytes, got {len(raw)}")
        object.__setattr__(self, "_bytes", raw)

    @classmethod
    def _trusted(cls: type[_B], raw: bytes) -> _B:
        # The hot paths (hashing every appended and read record) already hold exactly 32
        # bytes from hashlib; skipping re-validation there is measurable.
        obj = object.__new__(cls)
        object.__setattr__(obj, "_bytes", raw)
        return obj

    @classmethod
    def from_hex(cls: type[_B], text: str) -> _B:
        """Parse exactly 64 hex digits (``bytes.fromhex`` alone would accept spaces)."""
        if not isinstance(text, str):
            raise TypeError(f"{cls.__name__}.from_hex takes a str, not {type(text).__name__}")
        if not _HEX64.fullmatch(text):
            raise ValueError(f"{cls.__name__} must be exactly 64 hex digits, got {text!r}")
        return cls._trusted(bytes.fromhex(text))

    def hex(self) -> str:
        """The 64 lower-case hex digits used in JSON bodies and ``effect_key`` columns."""
        return self._bytes.hex()

    def __bytes__(self) -> bytes:
        return self._bytes

    def __eq__(self, other: object) -> bool:
        if type(other) is type(self):
            return self._bytes == other._bytes
        return NotImplemented

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._bytes))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._bytes,))

    __setattr__ = _immutable
    __delattr__ = _immutable


class Digest(_Bytes32):
    """A SHA-256 digest: record hashes, chain links, Merkle leaves and roots."""

    __slots__ = ()
    ZERO: ClassVar[Digest]
    """32 zero bytes: the ``prev_hash`` of a run's first record and an unwritten run's head."""

    @classmethod
    def of(cls, data: bytes) -> Digest:
        """SHA-256 of ``data``."""
        return cls._trusted(hashlib.sha256(data).digest())

    @classmethod
    def chain(cls, prev: Digest, raw: bytes) -> Digest:
        """``SHA-256(prev || raw)``: a record's hash, binding it to everything before it."""
        if type(prev) is not Digest:
            raise TypeError(f"prev must be a Digest, not {type(prev).__name__}")
        h = hashlib.sha256(prev._bytes)
        h.update(raw)
        return cls._trusted(h.digest())

    def __repr__(self) -> str:
        return f"Digest({self._bytes[:4].hex()}…)"


Digest.ZERO = Digest(bytes(32))


class EffectKey(_Bytes32):
    """The identity of one side effect, the unit exactly-once is enforced on."""

    __slots__ = ()

    @classmethod
    def derive(
        cls,
        step: int,
        phase: str,
        ordinal: int,
        attempt: int,
        kind: str,
        canonical_args: bytes,
    ) -> EffectKey:
        """agentplane's derivation, byte for byte, so both sides agree on what "the same
        effect" is: ``SHA-256(step u32 || phase u8 || ordinal u32 || attempt u32 ||
        len(kind) u64 || kind || canonical_args)``, integers big-endian."""
        step = _u32(step, "step")
        ordinal = _u32(ordinal, "ordinal")
        attempt = _u32(attempt, "attempt")
        if not isinstance(phase, str):
            raise TypeError(f"phase must be a str, not {type(phase).__name__}")
        try:
            phase_byte = PHASES.index(phase)
        except ValueError:
            raise ValueError(
                f"unknown phase {phase!r}; expected one of {', '.join(PHASES)}"
            ) from None
        if not isinstance(kind, str):
            raise TypeError(f"kind must be a str, not {type(kind).__name__}")
        try:
            kind_bytes = kind.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"kind {kind!r} is not valid Unicode (lone surrogate)") from None
        if not isinstance(canonical_args, bytes | bytearray | memoryview):
            raise TypeError(f"canonical_args must be bytes, not {type(canonical_args).__name__}")
        h = hashlib.sha256(
            struct.pack(">IBIIQ", step, phase_byte, ordinal, attempt, len(kind_bytes))
        )
        h.update(kind_bytes)
        h.update(canonical_args)
        return cls._trusted(h.digest())

    def __repr__(self) -> str:
        return f"EffectKey(ek:{self._bytes[:4].hex()}…)"


def _u32(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not 0 <= value <= U32_MAX:
        raise ValueError(f"{what} {value} is outside 0..{U32_MAX} (an unsigned 32-bit integer)")
    return int(value)


def validate_step(step: object) -> int:
    """A step id is a ``u32``; anything else would not round-trip through agentplane."""
    return _u32(step, "step")


_I = TypeVar("_I", bound="_UlidId")


class _UlidId:
    """A ULID with a kind prefix: ``run_<ULID>`` in text and columns, bare in bodies.

    Parsing accepts both forms, in either case, and normalises to upper-case Crockford;
    a prefix of the other kind is refused rather than stripped, so a case id can never be
    mistaken for a run id.
    """

    __slots__ = ("_ulid",)
    PREFIX: ClassVar[str]
    _ulid: str

    def __init__(self, value: str | _UlidId | ULID) -> None:
        object.__setattr__(self, "_ulid", self._parse_ulid(value))

    @classmethod
    def _parse_ulid(cls, value: object) -> str:
        if isinstance(value, cls):
            return value._ulid
        if isinstance(value, ULID):
            return str(value)
        if isinstance(value, _UlidId):
            raise ValueError(f"{value} is a {type(value).__name__}, not a {cls.__name__}")
        if not isinstance(value, str):
            raise TypeError(
                f"{cls.__name__} takes a str like '{cls.PREFIX}<ULID>', not {type(value).__name__}"
            )
        text = value
        if text[: len(cls.PREFIX)].lower() == cls.PREFIX:
            text = text[len(cls.PREFIX) :]
        if not _ULID.fullmatch(text):
            raise ValueError(
                f"{value!r} is not a {cls.__name__}: expected '{cls.PREFIX}' followed by a "
                "26-character ULID, or the bare ULID"
            )
        return text.upper()

    @classmethod
    def _trusted(cls: type[_I], ulid: str) -> _I:
        obj = object.__new__(cls)
        object.__setattr__(obj, "_ulid", ulid)
        return obj

    @classmethod
    def generate(cls: type[_I]) -> _I:
        """A fresh id; its time prefix makes ids sort roughly by creation."""
        return cls._trusted(str(ULID()))

    @classmethod
    def parse(cls: type[_I], text: str | _UlidId | ULID) -> _I:
        """``<prefix>_<ULID>`` or a bare ULID; an existing id is returned as it is."""
        if type(text) is cls:
            return text
        return cls(text)

    @property
    def ulid(self) -> str:
        """The bare 26-character ULID: the form inside a hashed record body."""
        return self._ulid

    def __str__(self) -> str:
        return self.PREFIX + self._ulid

    def __repr__(self) -> str:
        return f"{type(self).__name__}('{self.PREFIX}{self._ulid}')"

    def __eq__(self, other: object) -> bool:
        if type(other) is type(self):
            return self._ulid == other._ulid
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.PREFIX, self._ulid))

    # Ordering is the byte order of str(id), the order of the text columns. The prefix is
    # shared within a type and the ULID alphabet is ASCII, so comparing the ULIDs suffices.
    def __lt__(self, other: object) -> bool:
        if type(other) is type(self):
            return self._ulid < other._ulid
        return NotImplemented

    def __le__(self, other: object) -> bool:
        if type(other) is type(self):
            return self._ulid <= other._ulid
        return NotImplemented

    def __gt__(self, other: object) -> bool:
        if type(other) is type(self):
            return self._ulid > other._ulid
        return NotImplemented

    def __ge__(self, other: object) -> bool:
        if type(other) is type(self):
            return self._ulid >= other._ulid
        return NotImplemented

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._ulid,))

    __setattr__ = _immutable
    __delattr__ = _immutable


class RunId(_UlidId):
    """One run's journal: ``run_<ULID>``."""

    __slots__ = ()
    PREFIX = "run_"


class CaseId(_UlidId):
    """A case several runs may work on: ``case_<ULID>``."""

    __slots__ = ()
    PREFIX = "case_"


def validate_tenant(name: str) -> str:
    """Trim and check a tenant name; return the trimmed name the store must use.

    Tenant names go into every row and into the checkpoint origin ``{origin}/{tenant}``,
    so ``/`` and ``:`` (which would make origins ambiguous) and control characters (which
    would break the line-based checkpoint note) are refused rather than escaped.
    """
    if not isinstance(name, str):
        raise TypeError(f"a tenant name is a str, not {type(name).__name__}")
    trimmed = name.strip(_WHITE_SPACE)
    if not trimmed:
        raise ValueError(f"tenant name {name!r} is empty after trimming whitespace")
    if len(trimmed) > _TENANT_MAX:
        raise ValueError(
            f"tenant name {trimmed!r} is {len(trimmed)} characters; the limit is {_TENANT_MAX}"
        )
    for ch in trimmed:
        if ch in "/:":
            raise ValueError(f"tenant name {trimmed!r} contains {ch!r}, which is not allowed")
        if unicodedata.category(ch) == "Cc":
            raise ValueError(
                f"tenant name {trimmed!r} contains the control character U+{ord(ch):04X}"
            )
    try:
        size = len(trimmed.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"tenant name {trimmed!r} is not valid Unicode") from None
    if size > _TENANT_MAX:
        raise ValueError(
            f"tenant name {trimmed!r} is {size} bytes in UTF-8; the limit is {_TENANT_MAX}"
        )
    return trimmed
