"""Records: what a caller appends, what the store seals, and how a chain is checked.

An :class:`Append` is a caller's intent (run, kind, the kind's fields); the store assigns
``seq`` and ``epoch`` and :meth:`Record.seal` turns the resulting body into canonical
bytes, a chained hash and, optionally, a signature. From then on ``raw`` is the truth:
it is stored verbatim, re-hashed on every read (:meth:`Record.from_stored`), and never
re-serialised, so a record written by agentplane verifies here and the other way round.

Checks happen in layers, each catching what the previous cannot:

* reading: the stored hash covers the stored bytes (an edited row);
* :func:`verify_chain`: seqs are contiguous and each record links to its predecessor
  (a deleted, duplicated or reordered row, which per-row hashing cannot see);
* :func:`verify_attested`: each hash was signed by a trusted key (a chain rebuilt from
  scratch by someone who can write the table but does not hold the key).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from .canon import MAX_DEPTH, canonical_bytes
from .errors import CorruptRecordError, RecordTooLargeError
from .ids import PHASES, CaseId, Digest, EffectKey, RunId, validate_step
from .limits import check_label
from .signing import DOMAIN_RECORD, Signer, Verifier, signing_hash

__all__ = [
    "MAX_RECORD_BYTES",
    "PHASES",
    "RECORD_VERSION",
    "RESERVED_MEMBERS",
    "Append",
    "Attestation",
    "Record",
    "RunCheck",
    "check_envelope",
    "check_exactly_once",
    "verify_attested",
    "verify_chain",
    "verify_run",
]

MAX_RECORD_BYTES = 1_048_576
"""Largest accepted canonical body (1 MiB, inclusive), agentplane's limit."""

RECORD_VERSION = 4
"""Schema version (``v``) of every agentplane 0.4.0 record kind."""

RESERVED_MEMBERS = frozenset(
    {"seq", "run", "case", "step", "phase", "epoch", "v", "effect_key", "kind"}
)
"""Body members the record owns; a kind's fields are flattened beside them, so a field
with one of these names would silently overwrite (or be overwritten by) the envelope."""

_U16_MAX = 0xFFFF
_U32_MAX = 0xFFFF_FFFF
_I64_MAX = 2**63 - 1


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# One decoder, built once: json.loads(..., parse_constant=...) would build a new one per
# call. Refusing NaN/Infinity keeps a stored body within what canonical JSON can express.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)

_new = object.__new__


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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


@dataclass(frozen=True, slots=True, init=False)
class Append:
    """One record a caller asks the store to write: run, kind and the kind's fields.

    Everything is checked here, at construction, so a bad append fails in the caller's
    code with a ``ValueError``/``TypeError`` naming the field, before any transaction
    starts. ``run`` and ``case`` also accept their text forms, ``effect_key`` its 64 hex
    digits. ``seq`` and ``epoch`` are not the caller's: the store assigns them.
    """

    run: RunId
    kind: str
    payload: dict[str, Any] = field(default=None, hash=False)  # type: ignore[assignment]
    _: KW_ONLY
    case: CaseId | None = None
    step: int | None = None
    phase: str = "forward"
    effect_key: EffectKey | None = None
    v: int = RECORD_VERSION

    # Written out rather than generated: the generated __init__ of a frozen dataclass sets
    # every field through object.__setattr__ and a __post_init__ then sets half of them
    # again; this checks each argument and sets its field once, through the slot (an
    # append is built per record, on the hot path). Same signature, defaults and checks.
    def __init__(
        self,
        run: RunId | str,
        kind: str,
        payload: dict[str, Any] | None = None,
        *,
        case: CaseId | str | None = None,
        step: int | None = None,
        phase: str = "forward",
        effect_key: EffectKey | str | None = None,
        v: int = RECORD_VERSION,
    ) -> None:
        _append_run(self, run if type(run) is RunId else RunId.parse(run))
        # The record's discriminator, also stored in the indexed ``kind`` column.
        _append_kind(self, check_label(kind, "kind"))

        if payload is None:
            payload = {}
        elif not isinstance(payload, dict):
            raise TypeError(
                f"payload must be a dict of the kind's fields, not {type(payload).__name__}"
            )
        else:
            payload = dict(payload)  # the caller's later edits must not reach the record
        if not RESERVED_MEMBERS.isdisjoint(payload):
            key = next(key for key in payload if key in RESERVED_MEMBERS)
            raise ValueError(
                f"payload field {key!r} collides with the record body's own member "
                f"{key!r}; rename the field (reserved: {', '.join(sorted(RESERVED_MEMBERS))})"
            )
        canonical_bytes(payload, path="payload")
        _append_payload(self, payload)

        _append_case(self, None if case is None else CaseId.parse(case))
        _append_step(self, None if step is None else validate_step(step))
        if not isinstance(phase, str) or phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; expected one of {', '.join(PHASES)}")
        _append_phase(self, phase)
        if isinstance(effect_key, str):
            effect_key = EffectKey.from_hex(effect_key)
        elif effect_key is not None and not isinstance(effect_key, EffectKey):
            raise TypeError(
                f"effect_key must be an EffectKey or 64 hex digits, not {type(effect_key).__name__}"
            )
        _append_effect_key(self, effect_key)
        if type(v) is not int and not _is_int(v):
            raise TypeError(f"v must be an int, not {type(v).__name__}")
        if not 0 <= v <= _U16_MAX:
            raise ValueError(f"v {v} is outside 0..{_U16_MAX} (an unsigned 16-bit integer)")
        _append_v(self, v)

    def body(self, seq: int, epoch: int) -> dict[str, Any]:
        """The record body at ``seq`` written under ``epoch``: the envelope members plus
        the payload's fields flattened beside them. Optional members are *omitted* when
        unset (not null), exactly as agentplane does, since presence changes the hash."""
        if type(seq) is not int and not _is_int(seq):
            raise TypeError(f"seq must be an int, not {type(seq).__name__}")
        if not 1 <= seq <= _I64_MAX:
            raise ValueError(f"seq {seq} is outside 1..{_I64_MAX}")
        if type(epoch) is not int and not _is_int(epoch):
            raise TypeError(f"epoch must be an int, not {type(epoch).__name__}")
        if not 0 <= epoch <= _I64_MAX:
            raise ValueError(f"epoch {epoch} is outside 0..{_I64_MAX}")
        body = dict(self.payload)
        body["seq"] = seq
        body["run"] = self.run.ulid
        if self.case is not None:
            body["case"] = self.case.ulid
        if self.step is not None:
            body["step"] = self.step
        if self.phase != "forward":
            body["phase"] = self.phase
        body["epoch"] = epoch
        body["v"] = self.v
        if self.effect_key is not None:
            body["effect_key"] = self.effect_key.hex()
        body["kind"] = self.kind
        return body


# The slots' own setters, for Append.__init__ (past the frozen guard without its lookup).
_append_run = Append.__dict__["run"].__set__
_append_kind = Append.__dict__["kind"].__set__
_append_payload = Append.__dict__["payload"].__set__
_append_case = Append.__dict__["case"].__set__
_append_step = Append.__dict__["step"].__set__
_append_phase = Append.__dict__["phase"].__set__
_append_effect_key = Append.__dict__["effect_key"].__set__
_append_v = Append.__dict__["v"].__set__


@dataclass(frozen=True, slots=True)
class Record:
    """A sealed record: its body, the exact bytes hashed, its link and its hash.

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
    def seal(cls, body: dict[str, Any], prev_hash: Digest, signer: Signer | None = None) -> Record:
        """Canonicalise ``body``, chain it to ``prev_hash`` and sign it if asked.

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
        raw = canonical_bytes(body, path="body")
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
        # setattr per field, a measurable share of sealing a small record.
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
                body, end = _DECODER.raw_decode(text)
            except ValueError:
                end = -1
            if end != len(text):
                body = _DECODER.decode(text)
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
        return self.body["seq"]  # type: ignore[no-any-return]

    @property
    def epoch(self) -> int:
        """The fencing epoch the record was written under."""
        return self.body["epoch"]  # type: ignore[no-any-return]

    @property
    def run(self) -> RunId:
        """The run, parsed from the body's bare ULID."""
        return RunId.parse(self.body["run"])

    @property
    def kind(self) -> str:
        """The discriminator, e.g. ``EffectStarted``."""
        return self.body["kind"]  # type: ignore[no-any-return]

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
        return self.body.get("phase", "forward")  # type: ignore[no-any-return]

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


_CANONICAL_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
_LOWER_HEX64 = re.compile(r"[0-9a-f]{64}")


def _is_canonical_ulid(text: str) -> bool:
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
    if not _is_canonical_ulid(run):
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
        if type(case) is not str or not _is_canonical_ulid(case):
            return "record body's 'case' member is not a bare upper-case ULID"
    if "effect_key" in body:
        key = body["effect_key"]
        if type(key) is not str or not _LOWER_HEX64.fullmatch(key):
            return "record body's 'effect_key' member is not 64 lower-case hex digits"
    if "step" in body:
        step = body["step"]
        if not _is_int(step) or not 0 <= step <= _U32_MAX:
            return "record body's 'step' member is not an unsigned 32-bit integer"
    if "phase" in body and body["phase"] not in PHASES:
        return "record body's 'phase' member is not a known phase"
    return None


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
            return seq  # type: ignore[no-any-return]
    return 0


def verify_chain(
    records: Iterable[Record], start: Digest = Digest.ZERO, *, rehash: bool = True
) -> Digest:
    """Check seq contiguity, links and hashes; return the last hash (``start`` if none).

    Contiguity is counted from the first record's own seq, so a slice read from the
    middle of a run verifies when ``start`` is its predecessor's hash.

    ``rehash=False`` skips recomputing each hash, for records that :meth:`Record.from_stored`
    built (it refuses a row whose hash does not cover its bytes), so a store's ``verify``
    hashes every row once, not twice. Links and contiguity are always checked.
    """
    prev = start
    expected: int | None = None
    for record in records:
        seq = record.body["seq"]
        if expected is not None and seq != expected:
            raise CorruptRecordError(seq, f"sequence gap: expected {expected}, found {seq}")
        link = record.prev_hash
        # A page read by records_from_rows links each record to its predecessor's own
        # Digest object: identity settles it without Digest.__eq__'s Python call.
        if link is not prev and link != prev:
            raise CorruptRecordError(seq, "broken link: prev_hash does not match predecessor")
        if rehash and Digest.chain(record.prev_hash, record.raw) != record.hash:
            raise CorruptRecordError(seq, "hash does not cover the stored bytes")
        prev = record.hash
        expected = seq + 1
    return prev


def verify_attested(
    records: Iterable[Record],
    verifier: Verifier,
    require_signature: bool = False,
    *,
    start: Digest = Digest.ZERO,
    rehash: bool = True,
) -> Digest:
    """:func:`verify_chain`, then every signature; return the head.

    An unsigned record fails only when ``require_signature``; a signature by an unknown
    key fails like a forged one, since either way nobody trusted vouches for the record.
    """
    records = list(records)
    head = verify_chain(records, start, rehash=rehash)
    for record in records:
        attestation = record.attestation
        if attestation is None:
            if require_signature:
                raise CorruptRecordError(
                    record.seq,
                    f"record {record.seq} carries no signature, and this verification required one",
                )
            continue
        message = signing_hash(DOMAIN_RECORD, record.hash)
        if not verifier.verify(attestation.key_id, message, attestation.signature):
            raise CorruptRecordError(
                record.seq,
                f"record {record.seq} has a signature that '{attestation.key_id}' did not "
                "make — the record was rewritten after signing, or that key is not trusted "
                "by this verifier",
            )
    return head


def check_exactly_once(records: Iterable[Record], started: dict[str, int] | None = None) -> None:
    """No two ``EffectStarted`` records of one run name the same effect key.

    The database's unique index enforces this on the ``kind``/``effect_key`` *columns*;
    this checks the hashed bodies, so a column edited to slip a second start past the index
    is caught even where the edit itself is not (for instance, edited back afterwards).
    ``started`` (key -> first seq) carries what earlier pages of the same run started.
    """
    if started is None:
        started = {}
    for record in records:
        body = record.body
        key = body.get("effect_key")
        if key is None or body.get("kind") != "EffectStarted":
            continue
        first = started.setdefault(key, record.seq)
        if first != record.seq:
            raise CorruptRecordError(
                record.seq,
                f"a second EffectStarted for effect ek:{key[:16]}… (the first is seq {first}): "
                "exactly-once was bypassed, the run's rows were edited",
            )


class RunCheck:
    """:func:`verify_run`, fed page by page: memory is one page (plus one entry per effect).

    ``feed(records)`` with each page in seq order, then ``finish(sealed_head)`` for the
    head. The same checks and the same first bad seq as :func:`verify_run` on the whole run.
    """

    def __init__(self, verifier: Verifier | None = None, require_signature: bool = False) -> None:
        if require_signature and verifier is None:
            raise ValueError("require_signature needs a verifier that trusts the signers' keys")
        self._verifier = verifier
        self._require = require_signature
        self._started: dict[str, int] = {}
        self.head = Digest.ZERO
        self.last = 0

    def feed(self, records: list[Record]) -> None:
        if not records:
            return
        expected = self.last + 1
        if records[0].seq != expected:
            raise CorruptRecordError(
                records[0].seq, f"sequence gap: expected {expected}, found {records[0].seq}"
            )
        if self._verifier is not None:
            head = verify_attested(
                records,
                self._verifier,
                require_signature=self._require,
                start=self.head,
                rehash=False,
            )
        else:
            head = verify_chain(records, self.head, rehash=False)
        check_exactly_once(records, self._started)
        self.head, self.last = head, records[-1].seq

    def finish(self, sealed_head: Digest | None = None) -> Digest:
        if sealed_head is not None and sealed_head != self.head:
            raise CorruptRecordError(
                self.last,
                f"the run is sealed at head {sealed_head.hex()[:12]}, but its records end at "
                f"{self.head.hex()[:12]} (seq {self.last}): records were deleted, added or "
                "rewritten after sealing",
            )
        return self.head


def verify_run(
    records: list[Record],
    sealed_head: Digest | None = None,
    verifier: Verifier | None = None,
    require_signature: bool = False,
) -> Digest:
    """Everything a whole run's records must satisfy; return its head.

    Seqs from 1 and contiguous, links, signatures (with a verifier), exactly-once over
    the bodies, and, for a sealed run, that the records end exactly at ``sealed_head``:
    a run whose records were deleted, truncated or extended under its seal fails. The
    records must come from :meth:`Record.from_stored`, which has re-hashed each one.
    """
    check = RunCheck(verifier, require_signature)
    check.feed(records)
    return check.finish(sealed_head)
