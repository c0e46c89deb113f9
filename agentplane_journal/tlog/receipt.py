"""Receipts: a sealed run's offline proof of logging, as a c2sp.org/tlog-proof@v1 file. Pure.

A receipt is what a run's owner hands a third party who has no database access::

    c2sp.org/tlog-proof@v1
    extra <base64 of {"head": "<sealed chain head, hex>", "run": "run_<ULID>"}>
    index <the run's leaf index>
    <inclusion proof, one base64 hash per line>

    <the checkpoint as a signed note: the log's signature, then witness cosignatures>

What it proves and what it does not:

* The leaf is ``SHA-256(0x00 || head)`` (RFC 6962's leaf hash of the 32-byte sealed chain
  head). The inclusion proof binds that head to the checkpoint's root, the log's signature
  binds the root to the log's key, and the cosignatures bind it to the witnesses, who each
  saw that log only grow: so the head is authenticated, the ``extra`` line itself is not
  (the spec says never to trust it), only the head it names once the proof verifies.
* The run id is *not* in the leaf. It is bound to the head by the run's records: their
  hash chain ends at the head (``agentplane-journal export RUN`` gives them, ``verify``
  checks the chain). A receipt alone says "this head is logged", and the records say whose.

:func:`verify_receipt` never raises on a hostile file: every problem is a failed check in
the report (a malformed file is one failed check, naming the rule).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from agentplane_journal.core import jsonload
from agentplane_journal.core.b64 import b64decode_canonical
from agentplane_journal.core.ids import Digest
from agentplane_journal.tlog.checkpoint import Checkpoint
from agentplane_journal.tlog.cosignature import Cosignature
from agentplane_journal.tlog.merkle import leaf_hash, verify_inclusion
from agentplane_journal.tlog.note import NoteVerificationError, open_note
from agentplane_journal.tlog.policy import Policy

__all__ = ["HEADER", "Receipt", "ReceiptReport", "parse_receipt", "verify_receipt"]

HEADER = "c2sp.org/tlog-proof@v1"


@dataclass(frozen=True, slots=True)
class Receipt:
    """A parsed receipt: the run and head from ``extra``, the leaf index, proof and note."""

    run: str
    head: Digest
    index: int
    proof: tuple[Digest, ...]
    note: str  # the signed checkpoint note, verbatim

    def to_text(self) -> str:
        extra = json.dumps(
            {"head": self.head.hex(), "run": self.run}, sort_keys=True, separators=(",", ":")
        )
        lines = [
            HEADER,
            "extra " + base64.b64encode(extra.encode("utf-8")).decode("ascii"),
            f"index {self.index}",
            *(base64.b64encode(bytes(h)).decode("ascii") for h in self.proof),
        ]
        return "\n".join(lines) + "\n\n" + self.note


def _decimal(text: str, what: str) -> int:
    if not (text.isascii() and text.isdigit()) or (len(text) > 1 and text[0] == "0"):
        raise ValueError(f"{what} {text!r} is not a decimal without leading zeros")
    return int(text)


def parse_receipt(text: str | bytes) -> Receipt:
    """Parse a receipt strictly; ``ValueError`` naming what is wrong."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("the receipt is not UTF-8") from None
    head_part, sep, note = text.partition("\n\n")
    if not sep:
        raise ValueError("no blank line between the proof and the checkpoint")
    lines = head_part.split("\n")
    if lines[0] != HEADER:
        raise ValueError(f"the first line is not {HEADER!r}")
    if len(lines) < 3 or not lines[1].startswith("extra "):
        raise ValueError("no 'extra' line: this receipt format carries the run and its head")
    try:
        extra = jsonload.loads(b64decode_canonical(lines[1][6:]).decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"the extra line is not base64 of JSON: {exc}") from None
    if not isinstance(extra, dict) or set(extra) != {"head", "run"}:
        raise ValueError("the extra data is not {'head': ..., 'run': ...}")
    run, head_hex = extra["run"], extra["head"]
    if not isinstance(run, str) or not isinstance(head_hex, str):
        raise ValueError("the extra data's run and head are not text")
    try:
        head = Digest.from_hex(head_hex)
    except ValueError as exc:
        raise ValueError(f"the extra data's head is not a 32-byte hex digest: {exc}") from None
    if not lines[2].startswith("index "):
        raise ValueError("the line after 'extra' is not 'index <n>'")
    index = _decimal(lines[2][6:], "index")
    proof = []
    for number, line in enumerate(lines[3:], start=4):
        try:
            raw = b64decode_canonical(line)
        except ValueError as exc:
            raise ValueError(f"proof line {number} is not canonical base64: {exc}") from None
        if len(raw) != 32:
            raise ValueError(f"proof line {number} is {len(raw)} bytes, not a 32-byte hash")
        proof.append(Digest(raw))
    if len(proof) > 63:
        raise ValueError("an inclusion proof has at most 63 hashes")
    return Receipt(run, head, index, tuple(proof), note)


_RUN_CLAIM = (
    "the receipt names run {run}, unproven: the run id is in its unauthenticated extra "
    "line, not in the log's leaf; the run's records prove it (`agentplane-journal verify "
    "{run}`, or its export, whose chain must end at the sealed head above)"
)


@dataclass(frozen=True, slots=True)
class ReceiptReport:
    """Each check's verdict; ``ok`` only if all passed. ``cosigned_by``: policy names."""

    checks: tuple[tuple[bool, str], ...]
    receipt: Receipt | None
    checkpoint: Checkpoint | None
    cosigned_by: tuple[str, ...]
    claims: tuple[str, ...] = ()
    """What the receipt says and nothing in it proves (the run id), said as such."""

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(ok for ok, _ in self.checks)


def _cosignatures(note: str) -> list[str]:
    """The signature lines of a signed note (the part after its last blank line)."""
    split = note.rfind("\n\n")
    return [line for line in note[split + 2 :].split("\n") if line] if split >= 0 else []


def verify_receipt(text: str | bytes, policy: Policy, run: str | None = None) -> ReceiptReport:
    """Check a receipt offline against ``policy``: log signature, witness quorum, inclusion.

    ``run``: the run the caller expects. The receipt cannot prove it (the run id is not in
    the leaf), so a receipt naming another run is a failed check, and one naming ``run`` is
    a *claim* (:attr:`ReceiptReport.claims`), never a passed check. Never raises for a
    hostile file: a malformed receipt or note, a hostile cosignature line, a wrong proof all
    come back as failed checks.
    """
    checks: list[tuple[bool, str]] = []
    try:
        receipt = parse_receipt(text)
    except ValueError as exc:
        return ReceiptReport(((False, f"the receipt is well formed ({exc})"),), None, None, ())
    checks.append((True, f"the receipt is well formed (leaf {receipt.index})"))
    claims: list[str] = []
    if run is not None and receipt.run != run:
        checks.append((False, f"the receipt names run {run} (it names {receipt.run})"))
    elif run is not None:
        claims.append(_RUN_CLAIM.format(run=run))
    if not policy.logs:
        checks.append((False, "the policy names a log key (it lists no 'log' line)"))
        return ReceiptReport(tuple(checks), receipt, None, ())
    try:
        opened = open_note(receipt.note, policy.log_keys)
        checkpoint = Checkpoint.from_signed_note(receipt.note, policy.log_keys)
    except NoteVerificationError as exc:
        checks.append((False, f"the checkpoint is signed by a log of the policy ({exc})"))
        return ReceiptReport(tuple(checks), receipt, None, ())
    except ValueError as exc:
        checks.append((False, f"the checkpoint is a well-formed signed note ({exc})"))
        return ReceiptReport(tuple(checks), receipt, None, ())
    signer = opened.verified[0].name
    if signer != checkpoint.origin:
        checks.append(
            (
                False,
                f"the log key's name {signer!r} is the checkpoint's origin "
                f"{checkpoint.origin!r} (c2sp.org/tlog-policy: a log key is named for its origin)",
            )
        )
    checks.append(
        (
            True,
            f"the checkpoint ({checkpoint.origin}, size {checkpoint.size}) is "
            f"signed by the policy's log key {signer!r}",
        )
    )
    body = checkpoint.to_note()
    cosigned: set[str] = set()
    for line in _cosignatures(receipt.note):
        try:
            cosig = Cosignature.parse(line)
        except ValueError:
            continue  # the log's own signature, or another type: not a cosignature
        for witness in policy.witnesses:
            key = witness.key
            if (cosig.name, cosig.key_hash) != (key.name, key.key_hash):
                continue
            if key.verify(body, cosig):
                cosigned.add(witness.name)
            else:
                checks.append(
                    (False, f"the cosignature claiming witness {witness.name!r} verifies")
                )
    names = tuple(w.name for w in policy.witnesses if w.name in cosigned)
    if names:
        checks.append((True, f"valid cosignatures from: {', '.join(names)}"))
    checks.append(
        (policy.quorum_met(cosigned), f"the witness quorum is met ({policy.describe_quorum()})")
    )
    included = verify_inclusion(
        leaf_hash(receipt.head), receipt.index, checkpoint.size, receipt.proof, checkpoint.root
    )
    checks.append(
        (
            included,
            f"the sealed head {receipt.head.hex()[:16]}… is leaf {receipt.index} of the checkpoint",
        )
    )
    return ReceiptReport(tuple(checks), receipt, checkpoint, names, tuple(claims))
