"""Records: what the store chains (and signs), and how a stored row is read back and checked.

The store turns an :class:`~agentplane_journal.core.append.Append`'s body into a record with
:meth:`Record.seal` (which chains, despite its name): canonical bytes, a chained hash and,
optionally, a signature. From then on ``raw`` is the truth: it is stored verbatim, re-hashed
on every read (:meth:`Record.from_stored`), and never re-serialised, so a record written by
agentplane verifies here and the other way round.

Checks happen in layers, each catching what the previous cannot:

* reading: the stored hash covers the stored bytes (an edited row), and the envelope
  members the store relies on are present and canonical (:func:`check_envelope`);
* the chain checks of :mod:`agentplane_journal.core.chain` (:func:`verify_chain`,
  :func:`verify_attested`, :func:`verify_run`): what per-row hashing cannot see.

``Append``, ``RECORD_VERSION``, ``RESERVED_MEMBERS`` (from ``append.py``) and the chain
checks (from ``verify.py``) are re-exported here, where callers have always imported them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agentplane_journal.core.admission import IDEMPOTENCY_KEY, RUN_ADMITTED
from agentplane_journal.core.canon import MAX_DEPTH, canonical_bytes
from agentplane_journal.core.checks import MAX_I64 as _I64_MAX
from agentplane_journal.core.checks import MAX_U16 as _U16_MAX
from agentplane_journal.core.checks import MAX_U32 as _U32_MAX
from agentplane_journal.core.checks import is_int as _is_int
from agentplane_journal.core.ids import PHASES, CaseId, Digest, EffectKey, RunId
from agentplane_journal.core.kinds import field_problem
from agentplane_journal.core.profile import WireProfile, profile_of_record
from agentplane_journal.core.signing import DOMAIN_RECORD, Signer, signing_hash
from agentplane_journal.core.wire_errors import CorruptRecordError, RecordTooLargeError

__all__ = [
    "MAX_RECORD_BYTES",
    "Attestation",
    "Record",
    "check_envelope",
]

MAX_RECORD_BYTES = 1_048_576
"""Largest accepted canonical body (1 MiB, inclusive), agentplane's limit."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# One decoder, built once: json.loads(..., parse_constant=...) would build a new one per
# call. Refusing NaN/Infinity keeps a stored body within what canonical JSON can express.
JSON_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


_I64_MIN = -(2**63)
_U64_MAX = 2**64 - 1


def _wire_int(token: str) -> int | float:
    """An integer token as its writer meant it: serde_json holds one beyond ``i64``/``u64``
    as an ``f64``, and canon v1 prints such a double as an integer (``{"x": 1e20}`` is stored
    ``100000000000000000000``, and so is every double in [2^64, 1e21)). Read back as that
    double it re-canonicalizes to the same bytes; as a Python ``int`` it would be refused as
    wider than 64 bits (restore, drill and the steps layer's replay re-chain what they read)."""
    value = int(token)
    return value if _I64_MIN <= value <= _U64_MAX else float(token)


WIRE_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_int=_wire_int)
""":data:`JSON_DECODER` with integers beyond 64 bits read as the doubles they were."""

#: u64::MAX has 20 digits and i64::MIN 19, so a body holding an integer beyond both has,
#: after ``:``, ``[`` or ``,`` and any JSON whitespace, a number of at least 20 digits or a
#: ``-`` and at least 19 (the cheap test that sends the rare such body through
#: :data:`WIRE_DECODER`; a string or an in-range number that happens to match only costs the
#: slower parse). Canonical bytes have no whitespace, but a hash-valid row need not be
#: canonical: ``{"a": 18446744073709551616}`` is a double to serde_json too.
LONG_DIGITS = re.compile(r"[:\[,][ \t\n\r]*(?:-\d{19}|\d{20})")


#: :func:`may_hold_long_digits`'s table (digits to ``0``, ``:`` and ``[`` to ``,``; it also
#: drops :data:`LONG_DIGITS_DROP`, JSON's whitespace) and what it looks for:
#: :data:`LONG_DIGITS`'s matches become ``,0...0`` (20 zeros) or ``,-0...0`` (19). Dropping
#: bytes can only make more matches, never hide one.
LONG_DIGITS_TABLE = bytes.maketrans(b"123456789:[", b"000000000,,")
LONG_DIGITS_DROP = b" \t\n\r"
LONG_DIGITS_MARK = b"," + b"0" * 20
LONG_NEGATIVE_MARK = b",-" + b"0" * 19


def may_hold_long_digits(raw: bytes) -> bool:
    """Whether :data:`LONG_DIGITS` might match ``raw`` (as text): ``False`` only when no
    ``:``, ``[`` or ``,`` is followed (whitespace aside) by 20 ASCII digits or by a ``-`` and
    19.

    Several times cheaper than the regex, and every read asks it of every row (the read
    path's fused check, ``db/statements.py``, inlines it): the rare body it says yes to (one
    with an integer of 20 digits or more, or a string holding such a text) goes to
    :meth:`Record.from_stored`, whose regex decides whether :data:`WIRE_DECODER` reads it. (The
    regex's ``\\d`` also matches other scripts' digits, which JSON only has inside
    strings, where either decoder reads them alike.)"""
    marked = raw.translate(LONG_DIGITS_TABLE, LONG_DIGITS_DROP)
    return LONG_DIGITS_MARK in marked or LONG_NEGATIVE_MARK in marked


def decode_wire(text: str) -> Any:
    """Wire bytes (as text) parsed as their writer meant them (:data:`WIRE_DECODER`)."""
    return WIRE_DECODER.decode(text)


_new = object.__new__


@dataclass(frozen=True, slots=True)
class Attestation:
    """Who vouches for a record: the signer's ``key_id`` and its signature over the hash.

    Not part of the body or the hash; a record's bytes are the same signed or not.
    """

    key_id: str
    signature: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.key_id, str):
            raise TypeError(f"key_id must be a str, not {type(self.key_id).__name__}")
        if not isinstance(self.signature, bytes | bytearray | memoryview):
            raise TypeError(f"signature must be bytes, not {type(self.signature).__name__}")
        object.__setattr__(self, "signature", bytes(self.signature))

    def __repr__(self) -> str:
        return (
            f"Attestation(key_id={self.key_id!r}, "
            f"signature={self.signature[:4].hex()}…({len(self.signature)} bytes))"
        )


@dataclass(frozen=True, slots=True)
class Record:
    """A chained record: its body, the exact bytes hashed, its link and its hash.

    Build one with :meth:`seal` (writing) or :meth:`from_stored` (reading). ``body`` is a
    decoded view of ``raw`` and takes no part in equality: two records are equal when
    their bytes, links, hashes and attestations are, so a record read back equals the
    one that was written even if the payload held tuples that came back as lists.
    """

    body: dict[str, Any] = field(compare=False)
    raw: bytes
    prev_hash: Digest
    hash: Digest
    attestation: Attestation | None = None

    @classmethod
    def seal(
        cls,
        body: dict[str, Any],
        prev_hash: Digest,
        signer: Signer | None = None,
        *,
        canon: Callable[..., bytes] = canonical_bytes,
    ) -> Record:
        """Canonicalise ``body``, chain it to ``prev_hash`` and sign it if asked.

        ``canon`` is the wire profile's canonical-JSON rule (``profile.canonicalize``): the
        agentplane 0.4.0 one unless the journal's profile says otherwise.
        Raises ``RecordTooLargeError`` (with the real size) above ``MAX_RECORD_BYTES``.
        """
        if not isinstance(body, dict):
            raise TypeError(f"a record body is a dict, not {type(body).__name__}")
        if not isinstance(prev_hash, Digest):
            raise TypeError(f"prev_hash must be a Digest, not {type(prev_hash).__name__}")
        seq = body.get("seq")
        if (type(seq) is not int and not _is_int(seq)) or seq < 1:
            raise ValueError(f"body.seq must be a positive int, got {seq!r}")
        if type(body.get("run")) is not str or type(body.get("kind")) is not str:
            for member in ("run", "kind"):
                if not isinstance(body.get(member), str):
                    raise ValueError(f"body.{member} must be a str, got {body.get(member)!r}")
        raw = canon(body, path="body")
        if len(raw) > MAX_RECORD_BYTES:
            raise RecordTooLargeError(len(raw), MAX_RECORD_BYTES)
        if type(prev_hash) is Digest:  # Digest.chain inlined: this is once per append
            h = hashlib.sha256(prev_hash._bytes)
            h.update(raw)
            hash_ = Digest._trusted(h.digest())
        else:
            hash_ = Digest.chain(prev_hash, raw)  # refuses a subclass, as it always has
        attestation = None
        if signer is not None:
            signature = signer.sign(signing_hash(DOMAIN_RECORD, hash_))
            attestation = Attestation(signer.key_id, signature)
        if cls is not Record:
            return cls(body, raw, prev_hash, hash_, attestation)
        # Built as the read path builds its records: the frozen __init__ costs a guarded
        # setattr per field, a measurable share of chaining a small record.
        return stored_record(body, raw, prev_hash, hash_, attestation)

    @classmethod
    def from_stored(
        cls,
        raw: bytes,
        prev_hash: Digest,
        hash: Digest,
        attestation: Attestation | None = None,
        *,
        seq: int | None = None,
    ) -> Record:
        """Rebuild a stored row, refusing it unless its hash covers its bytes.

        ``seq`` is the row's seq column, if the caller has it: a corrupt row is then named
        by where it sits rather than by whatever its (possibly edited) bytes claim; without
        it, the error names the ``seq`` parsed from ``raw``, or 0, as agentplane does.
        """
        if type(raw) is not bytes:
            if not isinstance(raw, bytes | bytearray | memoryview):
                raise TypeError(f"raw must be bytes, not {type(raw).__name__}")
            raw = bytes(raw)
        if type(prev_hash) is not Digest or type(hash) is not Digest:
            raise TypeError("prev_hash and hash must be Digests (see Digest(...) for raw bytes)")
        h = hashlib.sha256(prev_hash._bytes)
        h.update(raw)
        computed = h.digest()
        if computed != hash._bytes:
            raise CorruptRecordError(
                seq if seq is not None else _seq_of(raw),
                f"hash mismatch: stored {hash.hex()[:8]}…, recomputed {computed.hex()[:8]}… "
                "— record was altered after it was written",
            )
        try:
            text = raw.decode("utf-8")
            # raw_decode skips decode()'s whitespace scans (canonical bytes have none); any
            # other input goes through decode() for the same verdict and message as before.
            try:
                body, end = JSON_DECODER.raw_decode(text)
            except ValueError:
                end = -1
            if end != len(text):
                body = JSON_DECODER.decode(text)
            if LONG_DIGITS.search(text) is not None:
                body = WIRE_DECODER.decode(text)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError included
            raise CorruptRecordError(
                seq if seq is not None else 0,
                f"stored bytes are not a JSON record body ({exc})",
            ) from None
        except RecursionError:
            # A hash-valid body nested thousands deep (written by someone who can write the
            # table): refused like any other body no honest writer produces.
            raise CorruptRecordError(
                seq if seq is not None else 0,
                f"stored bytes nest deeper than the decoder's limit (canonical records stop "
                f"at {MAX_DEPTH} levels)",
            ) from None
        if type(body) is not dict:
            raise CorruptRecordError(
                seq if seq is not None else 0,
                f"stored bytes hold a JSON {type(body).__name__}, not a record body object",
            )
        problem = check_envelope(body)
        if problem is not None:
            body_seq = body.get("seq")
            where = seq if seq is not None else body_seq if _is_int(body_seq) else 0
            raise CorruptRecordError(where, problem)
        case = body.get("case")
        if case is not None and case.encode() not in raw:
            # The member was written with escapes: never by a canonical writer, and it would
            # hide the record from case_history's scan of the bytes for the case's ULID.
            raise CorruptRecordError(
                seq if seq is not None else body["seq"],
                "record body's 'case' member is escaped, not written out as a canonical ULID",
            )
        if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _depth(body) > MAX_DEPTH + 1:
            raise CorruptRecordError(
                seq if seq is not None else body["seq"],
                f"record body is nested more than {MAX_DEPTH} levels deep, which no writer "
                "of canonical records produces",
            )
        return stored_record(body, raw, prev_hash, hash, attestation)

    @property
    def seq(self) -> int:
        """Position in the run's chain, 1-based."""
        seq: int = self.body["seq"]  # checked when the record was made
        return seq

    @property
    def epoch(self) -> int:
        """The fencing epoch the record was written under."""
        epoch: int = self.body["epoch"]  # checked when the record was made
        return epoch

    @property
    def run(self) -> RunId:
        """The run, parsed from the body's bare ULID."""
        return RunId.parse(self.body["run"])

    @property
    def kind(self) -> str:
        """The discriminator, e.g. ``EffectStarted``."""
        kind: str = self.body["kind"]  # checked when the record was made
        return kind

    @property
    def case(self) -> CaseId | None:
        """The case the record names, if any."""
        case = self.body.get("case")
        return None if case is None else CaseId.parse(case)

    @property
    def effect_key(self) -> EffectKey | None:
        """The effect key the record names, if any."""
        key = self.body.get("effect_key")
        return None if key is None else EffectKey.from_hex(key)

    @property
    def step(self) -> int | None:
        """The step id, if the record names one."""
        return self.body.get("step")

    @property
    def phase(self) -> str:
        """``forward`` unless the body says ``compensating`` (forward is omitted)."""
        phase: str = self.body.get("phase", "forward")  # checked when the record was made
        return phase

    @property
    def idempotency_key(self) -> str | None:
        """The admission key a ``RunAdmitted`` record claimed, or ``None``: every other kind,
        and an admission without one (no member, or ``null``, which agentplane reads as none).

        Checked here rather than on every read: only the admission index acts on it. A
        member of any other type is written by no writer (agentplane cannot read it either),
        so it is :class:`CorruptRecordError`, never a ``TypeError`` in the caller.
        """
        if self.body.get("kind") != RUN_ADMITTED:
            return None
        key = self.body.get(IDEMPOTENCY_KEY)
        if key is None or type(key) is str:
            return key
        raise CorruptRecordError(
            self.seq,
            f"the RunAdmitted record's {IDEMPOTENCY_KEY} member is a JSON "
            f"{_json_type(key)}, not a string: no writer produces it",
        )

    def _member(self, kind: str, member: str) -> Any:
        """``member`` of a ``kind`` record, checked for its JSON type (core/kinds.py), or
        ``None`` (another kind, or absent). A wrong type is :class:`CorruptRecordError`."""
        if self.body.get("kind") != kind or member not in self.body:
            return None
        problem = field_problem(kind, {member: self.body[member]})
        if problem is not None:
            raise CorruptRecordError(self.seq, f"{problem}: no writer produces it")
        return self.body[member]

    @property
    def profile(self) -> WireProfile | None:
        """The wire profile the record was written in, by its ``v`` (1: ``agentplane-0.22``,
        4: ``agentplane-0.4``), or ``None`` for a version neither writes. Its bytes verify as
        written either way; this says which rule made them."""
        return profile_of_record(self.body)

    @property
    def canon(self) -> int | None:
        """The canonicalization version a ``RunAdmitted`` journaled (agentplane 0.22's
        ``canon``: 1 for RFC 8785), or ``None`` (another kind, or a 0.4.0 admission)."""
        canon: int | None = self._member(RUN_ADMITTED, "canon")
        return canon

    @property
    def reason(self) -> str | None:
        """Why a ``RunSealed`` conclusion ended the run (``RunSealed.reason``), or ``None``."""
        reason: str | None = self._member("RunSealed", "reason")
        return reason

    @property
    def permanent(self) -> bool:
        """Whether an ``EffectFailed`` refusal is an answer no retry changes
        (``EffectFailed.permanent``; absent is ``False``, as agentplane omits it)."""
        return bool(self._member("EffectFailed", "permanent"))

    @property
    def declared(self) -> dict[str, Any] | None:
        """The ``{trust, sensitivity}`` an ``EffectDone`` or ``EffectReconciled`` declared
        for its output, or ``None`` (another kind, or absent)."""
        kind = self.body.get("kind")
        if kind not in ("EffectDone", "EffectReconciled"):
            return None
        declared: dict[str, Any] | None = self._member(kind, "declared")
        return declared

    @property
    def correlation(self) -> list[Any]:
        """A ``CaseBound`` record's business keys as they stood at binding
        (``CaseBound.correlation``; absent is ``[]``, as agentplane omits an empty one)."""
        correlation: list[Any] | None = self._member("CaseBound", "correlation")
        return [] if correlation is None else list(correlation)

    def __repr__(self) -> str:
        signed = "" if self.attestation is None else f", signed by {self.attestation.key_id!r}"
        return (
            f"Record(seq={self.body.get('seq')}, run={self.body.get('run')}, "
            f"kind={self.body.get('kind')!r}, hash={self.hash!r}{signed})"
        )


# The read path builds one Record per stored row: the frozen dataclass's __init__ (a
# setattr per field through its frozen guard) is a measurable share of reading a run; the
# slots' own descriptors set the fields without the attribute lookup object.__setattr__ does.
_set_body = Record.__dict__["body"].__set__
_set_raw = Record.__dict__["raw"].__set__
_set_prev = Record.__dict__["prev_hash"].__set__
_set_hash = Record.__dict__["hash"].__set__
_set_attestation = Record.__dict__["attestation"].__set__


def stored_record(
    body: dict[str, Any],
    raw: bytes,
    prev_hash: Digest,
    hash: Digest,
    attestation: Attestation | None,
) -> Record:
    """A :class:`Record` of parts every read check has accepted (no check of its own)."""
    record = _new(Record)
    _set_body(record, body)
    _set_raw(record, raw)
    _set_prev(record, prev_hash)
    _set_hash(record, hash)
    _set_attestation(record, attestation)
    return record


_set_key_id = Attestation.__dict__["key_id"].__set__
_set_signature = Attestation.__dict__["signature"].__set__


def stored_attestation(key_id: str, signature: bytes) -> Attestation:
    """An :class:`Attestation` of a ``str`` and ``bytes`` the caller has type-checked (what
    ``__post_init__`` checks), built as :func:`stored_record` builds records: a signed
    run's read builds one per row."""
    attestation = _new(Attestation)
    _set_key_id(attestation, key_id)
    _set_signature(attestation, signature)
    return attestation


_CANONICAL_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
LOWER_HEX64 = re.compile(r"[0-9a-f]{64}")


def is_canonical_ulid(text: str) -> bool:
    # Only 26-character strings reach the cache, so a hostile body cannot fill it with
    # megabyte-long keys.
    return len(text) == 26 and _ulid_verdict(text)


@functools.lru_cache(maxsize=4096)
def _ulid_verdict(text: str) -> bool:
    # Every record of a run repeats its run id: remembering the verdict keeps the regex off
    # the read path (a run of 20,000 records matches it once).
    return _CANONICAL_ULID.fullmatch(text) is not None


def check_envelope(body: dict[str, Any]) -> str | None:
    """What is wrong with a decoded body's envelope members, or ``None`` if nothing is.

    A stored body is hash-checked, but whoever can write the table can also compute a
    hash: the members the store and :class:`Record`'s properties rely on are checked for
    presence, type and canonical form here, so a hostile body is a ``CorruptRecordError``
    and never a ``KeyError``/``TypeError``/``ValueError`` in a reader. Ids must be in the
    exact form a writer produces (bare upper-case ULIDs, lower-case hex), so a column
    can be compared with its body byte for byte.
    """
    seq = body.get("seq")
    if type(seq) is not int or not 1 <= seq <= _I64_MAX:
        return "record body has no integer 'seq' member in 1..2^63-1"
    run = body.get("run")
    if type(run) is not str:
        return "record body has no string 'run' member"
    if not is_canonical_ulid(run):
        return f"record body's 'run' member {run[:40]!r} is not a bare upper-case ULID"
    kind = body.get("kind")
    if type(kind) is not str or not kind:
        return "record body has no string 'kind' member"
    epoch = body.get("epoch")
    if type(epoch) is not int or not 0 <= epoch <= _I64_MAX:
        return "record body has no integer 'epoch' member in 0..2^63-1"
    v = body.get("v")
    if type(v) is not int or not 0 <= v <= _U16_MAX:
        return "record body has no integer 'v' member in 0..65535"
    if "case" in body:
        case = body["case"]
        if type(case) is not str or not is_canonical_ulid(case):
            return "record body's 'case' member is not a bare upper-case ULID"
    if "effect_key" in body:
        key = body["effect_key"]
        if type(key) is not str or not LOWER_HEX64.fullmatch(key):
            return "record body's 'effect_key' member is not 64 lower-case hex digits"
    if "step" in body:
        step = body["step"]
        if not _is_int(step) or not 0 <= step <= _U32_MAX:
            return "record body's 'step' member is not an unsigned 32-bit integer"
    if "phase" in body and body["phase"] not in PHASES:
        return "record body's 'phase' member is not a known phase"
    return None


def _json_type(value: object) -> str:
    """The JSON type of a decoded value, for messages."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, dict):
        return "object"
    return "array" if isinstance(value, list) else type(value).__name__


def _depth(value: object) -> int:
    """Deepest container nesting of a decoded body, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _seq_of(raw: bytes) -> int:
    """Best-effort seq of a corrupt row, for the error message only (0 if unreadable)."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return 0
    if isinstance(body, dict):
        seq = body.get("seq")
        if _is_int(seq) and seq >= 0:
            return seq
    return 0
