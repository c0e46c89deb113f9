"""Verifying an export (format 1) from its own bytes against a checkpoint from elsewhere.

The rules are agentplane 0.22's ``export::verify``, restated:

* every record is **re-chained**: ``SHA-256(prev || raw)`` over the exact bytes the line
  carries, ``prev`` being the hash recomputed from the lines before it (never the line's own
  ``prev_hash``: a file agreeing with itself is what a competent editor produces);
* sequences are contiguous from 1 (a removed *tail* breaks no link), every record's body
  names the run its block names (a relabelled block), the readable ``body`` equals the wire
  bytes as a JSON value (an edited display copy), a ``RunSealed`` ``chain_head`` equals the
  head it sits on;
* a sealed run's terminal hash is its block's ``seal``, and the Merkle tree rebuilt from the
  blocks' ``(index, seal)`` has log positions exactly ``0..N`` (a duplicated or missing one is
  named, not left to surface as a root mismatch) and the root of the **outside** checkpoint;
* the file is framed (a trailer) and the trailer's counts hold; an empty block is tampering
  unless the trailer declares the run unreadable;
* every line is read as a restore reads it (:mod:`.read`): an unreadable line stops
  the pass with a finding, a run's second block is a finding (each block alone verifies,
  and a restore would replay both), and so is a block neither open nor sealed (an ``index``
  beside a malformed ``seal``);
* what could not be checked is listed as such (signatures with no key, deletion with no
  outside checkpoint, the case layer this package does not hold, a foreign canon rule).

Pure: feed it lines (:meth:`ExportVerifier.feed`), then :meth:`ExportVerifier.finish`.
Memory does not grow with the file's runs, read in log order (what only the whole file can
show is kept and settled by :mod:`.settle`): a run's records (for the signature
check), the log's root as a streaming frontier, counts, the first :data:`SOUND_LISTED` sound
runs' names, and, to name a repeated block, the runs met so far in whatever
:class:`~.settle.SeenRuns` the caller passes (a set by default; the command line and
restore pass a temporary SQLite file).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from agentplane_journal.core.canon_v1 import CANON_VERSION
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.signing import DOMAIN_RECORD, Verifier, signing_hash
from agentplane_journal.exportfmt.body import same_value, serde_value
from agentplane_journal.exportfmt.body_wire import body_is_wire
from agentplane_journal.exportfmt.lines import (
    CASE_BLOCK,
    FORMAT_VERSION,
    HEADER,
    IMPLEMENTED_CANONS,
    RUN_BLOCK,
    TRAILER,
    parse_checkpoint,
    parse_digest,
    parse_ulid_run,
)
from agentplane_journal.exportfmt.read import RunBlock, attestation, read_line, run_block
from agentplane_journal.exportfmt.settle import (
    InMemorySeen,
    LogLeaves,
    SeenRuns,
    Tally,
    settle_cases,
    settle_trailer,
    settle_tree,
)
from agentplane_journal.exportfmt.typed_022 import decode_problem, dropped_members
from agentplane_journal.exportfmt.verify_report import SOUND_LISTED, VerifyReport
from agentplane_journal.tlog.checkpoint import Checkpoint

__all__ = ["SOUND_LISTED", "ExportVerifier", "VerifyReport"]

_RUN_SEALED = "RunSealed"
_NO_TIE = "run {run}: a record line carries no wire bytes or no hash — nothing ties it to the chain"
_sha256 = hashlib.sha256


@dataclass(slots=True)
class _RunPass:
    """The state of the block being read; replaced whole at the next block."""

    run: RunId
    declared_seal: Digest | None
    ulid: str
    """``run.ulid``, which every record's body must name."""
    prev: bytes = bytes(32)
    """The head so far, as raw bytes (a ``Digest`` is made only where one is kept)."""
    last_seq: int = 0
    records: int = 0
    signed: list[tuple[int, Digest, str, bytes] | tuple[int, Digest, None, None]] = field(
        default_factory=list
    )
    clean: bool = True


class ExportVerifier:
    """Reads an export line by line and settles it against an outside checkpoint.

    ``verifier``: the keys signatures are checked with (inside a signed history an unsigned
    record is a finding, as agentplane's auditor posture has it); ``None`` lists signatures
    as not checked. ``canons``: the ``canon`` rules this build implements (a foreign one is a
    coverage note, never a finding: nothing here re-derives a digest under a rule).
    ``agentplane_typed``: read a canon-1 file's records as agentplane 0.22's typed decode does
    (a record it cannot read is a finding); ``False`` for a check of this package's own
    readers only (``drill``: a tenant holding this package's own kinds restores here).
    ``seen``: where the runs met so far are kept, to name a run's second block (a set by
    default: a run id per run). ``sound_listed``: how many sound runs the report names
    (``None``: every one).
    """

    def __init__(
        self,
        verifier: Verifier | None = None,
        canons: frozenset[int] = IMPLEMENTED_CANONS,
        *,
        agentplane_typed: bool = True,
        seen: SeenRuns | None = None,
        sound_listed: int | None = SOUND_LISTED,
    ) -> None:
        self._verifier = verifier
        self._seen: SeenRuns = InMemorySeen() if seen is None else seen
        self._listed = sound_listed
        self._typed_check = agentplane_typed
        self._canons = canons
        self.report = VerifyReport()
        if verifier is None:
            self.report.not_checked.append(
                "signatures — no public key was supplied, so this pass cannot say who wrote "
                "anything"
            )
        self._header_seen = False
        self._leaves = LogLeaves()
        self._pass: _RunPass | None = None
        self._tally = Tally()
        self._stamped: set[str] = set()
        self._carried: set[str] = set()
        self._stopped = False
        self._canon: int | None = None
        self._dropped = 0
        self._dropped_example = ""
        self.last_block: tuple[dict[str, Any], RunBlock | str] | None = None
        """The run block line read last and :func:`~.read.run_block`'s reading of it (the
        very line object), for a restore's pass one, which reads each block as this does."""
        self.last_read: tuple[str, bytes, bytes, object] | None = None
        """The record line just fed, as read here: ``(raw, prev, digest, body)``, its ``raw``
        text (the very object), the head it was chained onto, SHA-256 over ``prev`` and
        ``raw``'s bytes (UTF-8, surrogates passed), and its ``body`` (the very object) if
        that was shown to be the wire's value by writing it back as exactly ``raw`` with
        :func:`~.body_wire.sorted_text`, else ``None``. ``None`` for any other line, or a
        record not hashed. For a restore's pass one, which would otherwise hash and write
        each record a second time; read it before the next line is fed."""

    # -- reading ---------------------------------------------------------------------------

    def feed(self, line: str | bytes) -> bool:
        """Read one line; ``False`` once the file is unreadable from here on (stop feeding)."""
        if self._stopped:
            return False
        value = read_line(line)
        p = self._pass
        if type(value) is dict and p is not None and value.get("kind") is None:
            # A record inside a block, the commonest line: feed_read's own branch for it.
            self.report.records += 1
            self._read_record(value, p)
            return True
        return self.feed_read(value)

    def feed_read(self, value: dict[str, Any] | str | None) -> bool:
        """Take one line as :func:`~.read.read_line` read it (a restore reads each line
        once for itself and for this pass); ``False`` as :meth:`feed`."""
        self.last_read = None
        if self._stopped:
            return False
        if value is None:
            return True
        if isinstance(value, str):
            self._stop(value)
            return False
        kind = value.get("kind")
        if kind is None:  # a record: the commonest line first
            self.report.records += 1
            if self._pass is None:
                self.report.findings.append(
                    "a record appears before any run block, so nothing says which run it belongs to"
                )
            else:
                self._read_record(value, self._pass)
        elif kind == RUN_BLOCK:
            self._tally.run_blocks += 1
            self._finish_run()
            self._open_run(value)
        elif kind == HEADER:
            self._header_seen = True
            self._read_header(value)
        elif kind == CASE_BLOCK:
            self._read_case(value)
        elif kind == TRAILER:
            self._read_trailer(value)
        # A kind this build does not know is skipped (a newer writer's line), as agentplane does.
        return True

    def _stop(self, finding: str) -> None:
        self.report.findings.append(finding)
        self._stopped = True

    def _read_header(self, value: dict[str, Any]) -> None:
        version = value.get("version")
        if version != FORMAT_VERSION or type(version) is not int:
            self.report.findings.append(
                f"the export claims format version {version!r} and this build reads "
                f"{FORMAT_VERSION} — the findings below describe the lines this build could "
                "interpret, which may not be all of them"
            )
        canon = value.get("canon")
        self._canon = canon if type(canon) is int else None
        if type(canon) is not int or canon not in self._canons:
            self.report.not_checked.append(
                f"derived digests — the export was written under canonicalization rule "
                f"{canon!r} and this build implements {sorted(self._canons)}. The chain, leaf, "
                "root and signature checks still ran (they hash the bytes as written); what "
                "cannot be done is re-deriving digests inside the bodies, such as effect keys"
            )
        cp = parse_checkpoint(value.get("checkpoint"))
        if cp is None:
            self.report.findings.append("the header carries no readable checkpoint")
        else:
            self.report.checkpoint = cp

    def _read_case(self, value: dict[str, Any]) -> None:
        self.report.cases += 1
        case = value.get("case")
        case_id = case.get("id") if isinstance(case, dict) else None
        if isinstance(case_id, str):
            self._carried.add(case_id.removeprefix("case_"))
        else:
            self.report.findings.append("a case block is malformed: it names no case id")
        if not isinstance(value.get("deadlines"), list):
            self.report.findings.append("a case block's deadlines are malformed")

    def _open_run(self, value: dict[str, Any]) -> None:
        block = run_block(value)
        self.last_block = (value, block)
        if isinstance(block, str):
            self._pass = None
            self.report.findings.append(block)
            return
        ulid = block.run.ulid
        self._pass = _RunPass(block.run, block.seal, ulid)
        if block.problem is not None:
            self.report.findings.append(block.problem)
            self._pass.clean = False
        if not self._seen.add(ulid):
            # Each run is exported once: a second block would be replayed as more records
            # of the run (or onto its seal), and each block alone verifies.
            self.report.findings.append(
                f"run {block.run}: a second block for this run — an export writes each run "
                "once, so its records were repeated (a restore would write them twice)"
            )
            self._pass.clean = False
        if block.index is not None and block.seal is not None:
            self._leaves.add(block.index, block.seal)

    def _read_trailer(self, value: dict[str, Any]) -> None:
        self.report.complete = True
        declared = value.get("cases")
        if type(declared) is int and declared != self.report.cases:
            self.report.findings.append(
                f"the trailer says {declared} case(s) were exported and this file carries "
                f"{self.report.cases} — the case layer was cut after the export was taken"
            )
        for name in ("runs_requested", "runs_exported", "records"):
            count = value.get(name)
            self._tally.claims[name] = count if type(count) is int else None
        entries = value.get("unreadable")
        for entry in entries if isinstance(entries, list) else []:
            run = parse_ulid_run(entry.get("run")) if isinstance(entry, dict) else None
            if run is None or not isinstance(entry, dict):
                continue
            reason = entry.get("reason")
            self._tally.unreadable.append(
                (run, reason if isinstance(reason, str) else "no reason recorded")
            )

    def _typed(self, wire: dict[str, Any], seq: int, p: _RunPass, raw: str | None) -> None:
        """agentplane 0.22's typed decode of a canon-1 record (:mod:`.typed_022`): a record it
        cannot read is a finding (its verify calls it malformed, and every later record of
        the run tampered); what its re-chaining would drop is counted for :meth:`finish`.

        ``raw``: the wire bytes, when ``wire`` is the line's body (the same value, its
        members in another order): what is named is then named from the wire's own parse."""
        problem = decode_problem(wire)
        if problem is not None and raw is not None:
            problem = decode_problem(serde_value(raw))
        if problem is not None:
            self.report.findings.append(
                f"run {p.run}: record {seq} is not a record agentplane 0.22 can read ({problem})"
                " — agentplane's verify calls it malformed and the rest of the run tampered"
            )
            p.clean = False
            return
        dropped = dropped_members(wire)
        if dropped:
            self._dropped += 1
            if not self._dropped_example:
                if raw is not None:
                    dropped = dropped_members(serde_value(raw))
                self._dropped_example = f"record {seq} of {p.run}: {dropped}"

    def _read_record(self, value: dict[str, Any], p: _RunPass) -> None:
        report, run = self.report, p.run
        p.records += 1
        self.last_read = None
        raw, hash_text = value.get("raw"), value.get("hash")
        if not isinstance(raw, str):
            report.findings.append(_NO_TIE.format(run=run))
            p.clean = False
            return
        raw_bytes = raw.encode("utf-8", "surrogatepass")
        recomputed = _sha256(p.prev + raw_bytes).digest()
        # The hash as this package and agentplane write it (lower-case hex) is compared as
        # text; anything else is parsed (upper case is a digest too) or named.
        if hash_text != recomputed.hex():
            claimed = parse_digest(hash_text)
            if claimed is None:
                report.findings.append(_NO_TIE.format(run=run))
                p.clean = False
                return
            recomputes = claimed._bytes == recomputed
        else:
            recomputes = True
        body = value.get("body")
        # The line's body, written back canonically, is the wire bytes: the wire's value is
        # the body's (body_wire.py), so the second parse and the walk comparing them are not
        # needed. Otherwise, both the slow way: the only verdicts and messages there are.
        fast = body_is_wire(body, raw, raw_bytes)
        if fast:
            wire: Any = body
            same = True
        else:
            try:
                wire = serde_value(raw)
            except (ValueError, RecursionError):  # nested deeper than a record can be
                wire = None
            same = "body" in value and same_value(body, wire)
        seq = wire.get("seq") if isinstance(wire, dict) else None
        self.last_read = (raw, p.prev, recomputed, body if fast else None)
        if not isinstance(wire, dict) or type(seq) is not int:
            report.findings.append(f"run {run}: a record line is malformed")
            p.clean = False
            return
        if self._canon == CANON_VERSION and self._typed_check:
            self._typed(wire, seq, p, raw if fast else None)
        if not same:
            report.findings.append(
                f"run {run}: record {seq}'s readable body does not match its wire bytes — the "
                "display copy was edited, and every hash still verifies over the real one"
            )
            p.clean = False
        case = wire.get("case")
        if isinstance(case, str):
            self._stamped.add(case)
        if wire.get("run") != p.ulid:
            named = (serde_value(raw) if fast else wire).get("run")  # in the wire's order
            report.findings.append(
                f"run {run}: a record in this block belongs to run {named!r} — the "
                "block was relabelled, or spliced from another history"
            )
            p.clean = False
        if seq != p.last_seq + 1:
            report.findings.append(
                f"run {run}: seq {seq} follows {p.last_seq}, so a record is missing from the "
                "middle — every chain link either side of the gap still joins"
            )
            p.clean = False
        p.last_seq = seq
        if wire.get("kind") == _RUN_SEALED and "chain_head" in wire:
            if wire["chain_head"] != p.prev.hex():
                report.findings.append(
                    f"run {run}: the sealing record claims a chain head that is not the head "
                    "it sits on — the conclusion was drawn over a different history"
                )
                p.clean = False
        if not recomputes:
            report.findings.append(
                f"run {run}: record {seq} does not recompute to the hash it carries — it was "
                "edited after it was sealed"
            )
            p.clean = False
        # The head walks over the bytes present, so the leaf check speaks about this file.
        p.prev = recomputed
        if self._verifier is not None:
            att = value.get("attestation")
            opened = attestation(att)
            if att is not None and opened is None:
                report.findings.append(f"run {run}: record {seq}'s attestation is malformed")
                p.clean = False
            digest = Digest._trusted(recomputed)
            if opened is None:
                p.signed.append((seq, digest, None, None))
            else:
                p.signed.append((seq, digest, opened[0], opened[1]))

    def _finish_run(self) -> None:
        p, self._pass = self._pass, None
        if p is None:
            return
        if p.records == 0:  # judged by the trailer: declared unreadable, or emptied
            self._tally.empty.append(p.run)
            return
        self._tally.read_runs += 1
        ok = p.clean
        if p.declared_seal is not None and p.declared_seal._bytes != p.prev:
            self.report.findings.append(
                f"run {p.run}: the log's leaf is not this run's terminal hash, so the chain in "
                "this file is not the chain the checkpoint committed to"
            )
            ok = False
        if self._verifier is not None:
            for seq, hash_, key_id, sig in p.signed:
                if key_id is None or sig is None:
                    problem = f"record {seq} carries no signature inside a signed history"
                elif not self._verifier.verify(key_id, signing_hash(DOMAIN_RECORD, hash_), sig):
                    problem = f"record {seq} has a signature that '{key_id}' did not make"
                else:
                    continue
                self.report.findings.append(f"run {p.run}: {problem}")
                ok = False
                break
        if ok:
            if self._listed is None or len(self.report.sound) < self._listed:
                self.report.sound.append(p.run)
            else:
                self.report.sound_unlisted += 1

    # -- settling --------------------------------------------------------------------------

    def finish(self, expected: Checkpoint | None) -> VerifyReport:
        """Settle what only the whole file can show, against ``expected`` (the checkpoint the
        reader was given by someone other than the file's writer; ``None``: only the header's,
        and deletion is listed as not checked)."""
        self._finish_run()
        report = self.report
        if self._dropped:
            report.not_checked.append(
                f"agentplane 0.22's restore of {self._dropped} record(s) — they hold members "
                "its typed records do not carry, so its re-seal would give other bytes (this "
                f"package's restore keeps them); first: {self._dropped_example}"
            )
        if expected is not None:
            cp = report.checkpoint
            if self._header_seen and cp is not None and cp != expected:
                report.findings.append(
                    f"the export's header names log '{cp.origin}' at size {cp.size} with root "
                    f"{cp.root.hex()}, and the checkpoint this pass was given names "
                    f"'{expected.origin}' at size {expected.size} with root "
                    f"{expected.root.hex()} — the file describes a different history than the "
                    "one it is being checked against"
                )
            against: Checkpoint | None = expected
        else:
            report.not_checked.append(
                "deletion — no checkpoint was supplied, so the Merkle root could only be "
                "rebuilt and compared against this file's own header, which an editor who "
                "dropped a run and rewrote the header also satisfies. Pass the checkpoint an "
                "earlier `checkpoint` printed, or one a witness cosigned (--checkpoint NOTE)"
            )
            against = report.checkpoint
        if not self._header_seen:
            report.findings.append(
                "the export has no header, so nothing says which log it came from"
            )
        if against is not None:
            settle_tree(report.findings, self._leaves, against)
        if not report.complete:
            report.findings.append(
                "the export has no trailer, so it was cut short — every line in it is still "
                "valid, which is why the frame is the signal"
            )
        settle_trailer(
            report.findings, report.not_checked, self._tally, report.complete, report.records
        )
        settle_cases(report.findings, report.not_checked, self._carried, self._stamped)
        return report
