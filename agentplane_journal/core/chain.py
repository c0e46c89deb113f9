"""Chain checks: what a run's records must satisfy together, beyond each row's own hash.

Reading checks that a stored hash covers the stored bytes (an edited row); these catch
what per-row hashing cannot:

* :func:`verify_chain`: seqs are contiguous and each record links to its predecessor
  (a deleted, duplicated or reordered row);
* :func:`verify_attested`: each hash was signed by a trusted key (a chain rebuilt from
  scratch by someone who can write the table but does not hold the key);
* :func:`check_exactly_once` and :func:`verify_run` / :class:`RunCheck`: the whole run, its
  effects and its seal. Pure code, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from agentplane_journal.core.append import EFFECT_STARTED
from agentplane_journal.core.ids import Digest
from agentplane_journal.core.signing import DOMAIN_RECORD, Verifier, signing_hash
from agentplane_journal.core.wire_errors import CorruptRecordError

if TYPE_CHECKING:
    from agentplane_journal.core.record import Record

__all__ = ["RunCheck", "check_exactly_once", "verify_attested", "verify_chain", "verify_run"]


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
        if key is None or body.get("kind") != EFFECT_STARTED:
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

    @property
    def signed(self) -> bool:
        """Whether pages are checked against a verifier (then only :meth:`feed` takes them)."""
        return self._verifier is not None

    @property
    def started(self) -> dict[str, int]:
        """The effects started so far (key -> seq), for a pass that checks a page by this
        class's rules elsewhere (``db/row_chain.py``); not to be changed."""
        return self._started

    def advance(self, head: Digest, last: int, started: dict[str, int]) -> None:
        """Take a page that ``db/row_chain.py``'s ``chain_rows`` checked by :meth:`feed`'s
        rules without building its records: its head, last seq and newly started effects.
        Unsigned checks only (:attr:`signed` is ``False``): a signature needs the records."""
        if self._verifier is not None:
            raise ValueError("a signed check needs the records: feed() them")
        self._started.update(started)
        self.head, self.last = head, last

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
