"""Export format 1, agentplane 0.22's: the lines an export is made of, written and read.

One JSON object per line (JSON Lines, UTF-8), serialised the way ``serde_json::to_string``
writes agentplane's structs: compact, members in declaration order, non-ASCII unescaped.
So a file written here is the file agentplane 0.22's ``export`` writes for the same
history, and its ``verify --checkpoint`` and ``restore`` read ours as their own:

* the header ``{"kind":"agentplane.export","version":1,"checkpoint":{"origin",
  "size","root"},"canon":N}``;
* per run, a block ``{"kind":"agentplane.export.run","run":"<ULID>","index":I,"seal":"<hex>"}``
  (``index``/``seal`` absent for a run not in the header's checkpoint) followed by its
  records ``{"seq","body","prev_hash","hash","attestation","raw"}`` (the only lines with no
  ``kind``);
* the trailer ``{"kind":"agentplane.export.end","runs_requested","runs_exported",
  "records","cases","unreadable":[{"run","reason"}]}``; its *absence* says the file was cut.

``raw`` is the record's exact hashed bytes as a JSON string; ``body`` is what agentplane
writes there, ``serde_json::to_string`` of its ``RecordBody`` parsed from those bytes: the
members in its structs' declaration order, numbers as serde_json renders them
(:mod:`.body`, derived from the wire bytes alone, so body-equals-wire holds by
construction and a sealed payload is never opened). ``attestation`` is agentplane's
``Attestation { key_id, signature }`` with the signature as a lowercase hex string (its
``#[serde(with = "hex_bytes")]``, ``src/core/attest.rs``); readers also accept the array of
byte values this package wrote before (see docs/operations/backup.md).

Pure code, no I/O: the writer (:mod:`agentplane_journal.journal.export`) and the verifier
(:mod:`agentplane_journal.exportfmt.verify`) share these spellings.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _string  # the C writer of one JSON string
from typing import Any

from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.record import Attestation, Record
from agentplane_journal.exportfmt.body import body_text
from agentplane_journal.tlog.checkpoint import Checkpoint

__all__ = [
    "CANON_BY_PROFILE",
    "FORMAT_VERSION",
    "HEADER",
    "IMPLEMENTED_CANONS",
    "PROFILE_BY_CANON",
    "parse_checkpoint",
    "RUN_BLOCK",
    "TRAILER",
    "CASE_BLOCK",
    "Trailer",
    "Unreadable",
    "attestation_json",
    "canon_for_profile",
    "header_line",
    "record_line",
    "run_block_json",
    "run_line",
    "stored_line",
    "trailer_line",
]

FORMAT_VERSION = 1
"""The export format's own version (agentplane's ``export::FORMAT_VERSION``)."""

HEADER = "agentplane.export"
RUN_BLOCK = "agentplane.export.run"
CASE_BLOCK = "agentplane.export.case"
TRAILER = "agentplane.export.end"

CANON_BY_PROFILE: dict[str, int] = {"agentplane-0.4": 0, "agentplane-0.22": 1}
"""The header's ``canon`` for a journal's wire profile.

``1`` is agentplane 0.22's ``canon::VERSION``: full RFC 8785 (UTF-16 key order, ECMAScript
numbers, exact large integers). An ``agentplane-0.4`` journal was not written under that
rule: its keys sort by UTF-16 code unit but its doubles keep 0.4.0's layout (``1e16`` stays
``1e16``), a rule 0.22 numbers nowhere since its version cut collapsed every earlier rule
into "not ours". So such an export says ``0``, a value 0.22 never writes. 0.22's own readers
then do what its source says for a foreign rule: ``verify`` still checks the chain, leaves,
root and signatures (they hash the bytes as written) and lists *derived digests* as not
checked; ``restore`` names the digests as not carried. Saying ``1`` would be a lie a
replaying 0.22 build would act on (it would re-derive effect keys under the wrong rule).
"""


IMPLEMENTED_CANONS = frozenset(CANON_BY_PROFILE.values())
"""The rules this build writes (and could re-derive digests under): agentplane 0.4.0's
(``0``) and RFC 8785's (``1``, the ``agentplane-0.22`` wire profile)."""

PROFILE_BY_CANON: dict[int, str] = {canon: name for name, canon in CANON_BY_PROFILE.items()}
"""The wire profile a restore records for the target tenant, by the export's ``canon``."""


def canon_for_profile(profile: str | None) -> int:
    """The header's ``canon`` for a store opened with wire ``profile`` (``None``: a store
    from before wire profiles, which writes ``agentplane-0.4`` bytes).

    The one place the export learns it; wire it to ``store.profile`` when stores carry one.
    """
    name = "agentplane-0.4" if profile is None else profile
    try:
        return CANON_BY_PROFILE[name]
    except KeyError:
        raise ValueError(
            f"unknown wire profile {name!r}; expected one of {', '.join(CANON_BY_PROFILE)}"
        ) from None


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
# Built once: json.dumps with arguments builds an encoder per call (per record, measurable).


def _dumps(value: object) -> str:
    # serde_json::to_string: no spaces, UTF-8 unescaped, control characters escaped.
    return _ENCODER.encode(value)


def checkpoint_json(cp: Checkpoint) -> dict[str, Any]:
    """agentplane's ``Checkpoint`` as JSON: origin, size, root as lowercase hex."""
    return {"origin": cp.origin, "size": cp.size, "root": cp.root.hex()}


def parse_checkpoint(value: object) -> Checkpoint | None:
    """The ``Checkpoint`` a header's ``checkpoint`` member names (``checkpoint_json``'s
    inverse), or ``None`` for anything else: the verifier and restore read it alike."""
    if not isinstance(value, dict):
        return None
    origin, size, root = value.get("origin"), value.get("size"), parse_digest(value.get("root"))
    if not isinstance(origin, str) or type(size) is not int or root is None:
        return None
    try:
        return Checkpoint(origin, size, root)
    except ValueError:
        return None


def header_line(cp: Checkpoint, canon: int) -> str:
    return _dumps(
        {
            "kind": HEADER,
            "version": FORMAT_VERSION,
            "checkpoint": checkpoint_json(cp),
            "canon": canon,
        }
    )


def run_line(run: RunId, index: int | None, seal: Digest | None) -> str:
    """A run's block; ``index``/``seal`` only for a run in the header's checkpoint.

    Spelled out (a line per run: an encoder call cost more than the rest of the block):
    :func:`run_block_json`'s members in its order, as ``serde_json::to_string`` writes them."""
    if index is None or seal is None:
        return f'{{"kind":"{RUN_BLOCK}","run":{_string(run.ulid)}}}'
    if type(index) is not int:  # a position is an int; anything else the encoder writes
        return _dumps(run_block_json(run, index, seal))
    return (
        f'{{"kind":"{RUN_BLOCK}","run":{_string(run.ulid)},"index":{index},"seal":"{seal.hex()}"}}'
    )


def run_block_json(run: RunId, index: int | None, seal: Digest | None) -> dict[str, Any]:
    """A run's block as JSON: what :func:`run_line` writes."""
    block: dict[str, Any] = {"kind": RUN_BLOCK, "run": run.ulid}
    if index is not None and seal is not None:
        block["index"] = index
        block["seal"] = seal.hex()
    return block


def attestation_json(att: Attestation | None) -> dict[str, Any] | None:
    """``Attestation`` as agentplane serialises it: ``key_id`` and the signature as lowercase
    hex (``hex_bytes``: agentplane's reader refuses anything else, and then counts the record
    unsigned); ``None`` stays ``null`` (never omitted)."""
    if att is None:
        return None
    return {"key_id": att.key_id, "signature": att.signature.hex()}


_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_TWENTY_DIGITS = b"0" * 20
"""A run of 20 digits anywhere (whitespace or not around it): an integer ``json`` and serde_json
may hold differently, so ``record_line`` parses such bytes the exact way."""


def record_line(record: Record, *, read: bool = False) -> str:
    """One record: ``body`` as agentplane 0.22 writes it (:func:`.body.body_text`,
    from the wire bytes), ``raw`` the wire bytes themselves as a string.

    ``read``: the record is one the store read (``record_from_row``), so its ``body`` is
    ``json``'s parse of its bytes, which ``body_text`` may use rather than parse them again.
    A record built any other way (``Record.seal`` keeps the caller's body, ``1.0`` where the
    bytes say ``1``) is never taken at its body's word.

    ``ValueError`` when the bytes are not a UTF-8 JSON object serde_json can hold (the run is
    then unreadable: there is no other body to fall back on that the hash covers).
    """
    raw = bytes(record.raw)
    text = raw.decode("utf-8")  # UnicodeDecodeError is a ValueError
    parsed = record.body if read and _TWENTY_DIGITS not in raw.translate(_DIGITS) else None
    return stored_line(record.seq, record.prev_hash, record.hash, text, parsed, record.attestation)


def stored_line(
    seq: int,
    prev_hash: bytes | Digest,
    hash_: bytes | Digest,
    text: str,
    parsed: dict[str, Any] | None,
    attestation: Attestation | None,
) -> str:
    """:func:`record_line` of a record the store read, from its checked parts (a row
    ``db.row_bodies.plain_body`` accepted: ``parsed`` is ``json``'s parse of ``text``, given
    only where ``text`` holds no 20 digits in a row), without building the record: the
    same line. (``record_line`` writes its line through this too: one writer of a line.)"""
    try:
        body = body_text(text, parsed)
    except ValueError as exc:
        raise ValueError(f"record {seq}: {exc}") from None
    att = "null" if attestation is None else _dumps(attestation_json(attestation))
    return (
        f'{{"seq":{seq},"body":{body},"prev_hash":"{prev_hash.hex()}",'
        f'"hash":"{hash_.hex()}","attestation":{att},"raw":{_string(text)}}}'
    )


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A run the export could not read, and why (named in the trailer, never dropped)."""

    run: RunId
    reason: str


@dataclass(slots=True)
class Trailer:
    """The last line's counts: what the file holds and what it does not."""

    runs_requested: int = 0
    runs_exported: int = 0
    records: int = 0
    cases: int = 0
    unreadable: list[Unreadable] = field(default_factory=list)


def trailer_line(t: Trailer) -> str:
    return _dumps(
        {
            "kind": TRAILER,
            "runs_requested": t.runs_requested,
            "runs_exported": t.runs_exported,
            "records": t.records,
            "cases": t.cases,
            "unreadable": [{"run": u.run.ulid, "reason": u.reason} for u in t.unreadable],
        }
    )


def parse_ulid_run(value: object) -> RunId | None:
    """A block's ``run`` (bare ULID, or ``run_<ULID>``), or ``None`` when it is not one."""
    if not isinstance(value, str):
        return None
    try:
        return RunId.parse(value)
    except ValueError:
        return None


def digests(values: Sequence[object]) -> list[Digest] | None:
    out = []
    for v in values:
        d = parse_digest(v)
        if d is None:
            return None
        out.append(d)
    return out


def parse_digest(value: object) -> Digest | None:
    if not isinstance(value, str) or len(value) != 64:
        return None
    try:
        return Digest.from_hex(value)
    except ValueError:
        return None
