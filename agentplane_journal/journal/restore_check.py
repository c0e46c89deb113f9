"""Pass one of a restore: the file judged as ``verify-export`` judges it, before any write.

A restore used to read the file its own way: it skipped an unreadable line (a record line
cut in half restored its run short), replayed a run's repeated block (its records twice, or
after its seal), sealed an open block that carried an ``index`` beside a malformed ``seal``,
and met a record its target could not hold only when writing it. Each ended in a history
other than the file's called FAITHFUL, or in a failure after writing. So pass one is
:class:`~agentplane_journal.exportfmt.verify.ExportVerifier` itself, fed every line as
both passes read it (:mod:`~agentplane_journal.exportfmt.read`), against the header's own
checkpoint: a file it would not call SOUND is refused, nothing written. What only a restore
must know is judged beside it, also before any write:

* every record is replayable (:func:`~agentplane_journal.journal.restore_read.append_of`) and
  writable in the wire profile its version names (``v=4``: ``agentplane-0.4``, ``v=1``:
  ``agentplane-0.22``, through :meth:`WireProfile.refusal`, the check ``append`` makes);
  another version is refused (no profile this build writes holds it);
* the profile writes the record's bytes again exactly (``Record.seal`` as ``append`` calls
  it): a record whose bytes it would write otherwise, although sound in the file (the hash
  covers the bytes as they are), would be restored as another record;
* what ``append`` and the store's indexes would refuse part-way is found here instead: a
  ``RunSealed`` outcome that is not a label, an effect started twice in a run (the
  exactly-once index), an admission key two runs claim (one holder per key; memory: the
  keys);
* a run sealed in the header's log must carry records: the export declared it unreadable
  (its source is damaged), and the log cannot be rebuilt without its leaf.

What is left to fail after writing is what only the target can say (its database refusing or
going away, another writer's lease on a run): :class:`~agentplane_journal.journal.restore.
RestoreIncomplete`, named as PARTIAL.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from agentplane_journal.core.admission import RUN_ADMITTED, claimed_keys
from agentplane_journal.core.append import EFFECT_STARTED, RUN_SEALED, Append
from agentplane_journal.core.checks import check_label
from agentplane_journal.core.ids import Digest, EffectKey, RunId
from agentplane_journal.core.profile import (
    AGENTPLANE_0_4,
    PROFILES,
    WireProfile,
    profile_of_record,
)
from agentplane_journal.core.record import Record
from agentplane_journal.errors import RecordTooLargeError, RefusedError
from agentplane_journal.exportfmt.lines import (
    FORMAT_VERSION,
    HEADER,
    RUN_BLOCK,
    TRAILER,
    parse_checkpoint,
)
from agentplane_journal.exportfmt.read import RunBlock, run_block
from agentplane_journal.exportfmt.verify import ExportVerifier
from agentplane_journal.journal.export_seen import SpilledRuns
from agentplane_journal.journal.restore_spool import Spool
from agentplane_journal.tlog.checkpoint import Checkpoint

__all__ = ["INDEXED", "Frame", "Judge", "RestoreRefused"]

_SHOWN = 5
"""Findings quoted in a refusal (the rest are counted; ``verify-export`` lists them all)."""

INDEXED = frozenset({RUN_SEALED, EFFECT_STARTED, RUN_ADMITTED})
"""The kinds :meth:`Judge._indexed` has anything to check for (an outcome, a started effect,
an admission key); every other kind claims nothing and indexes nothing."""
_NO_KEYS: list[str] = []


class RestoreRefused(ValueError, RefusedError):
    """The export cannot be restored, or the target is not empty; nothing was written."""


@dataclass(slots=True)
class Frame:
    """What pass one learnt that pass two and the report need."""

    checkpoint: Checkpoint
    canon: int | None
    signed: int = 0
    profiles: set[WireProfile] = field(default_factory=set)
    """The wire profiles the file's records are in (both, for a migrated tenant)."""
    dropped: int = 0
    """Open runs the export declared unreadable: nothing of them to restore."""
    differing: int = 0
    """Records whose hash, chained here over their bytes, is not the one their line carries
    (the verifier's findings refuse such a file; counted for the report all the same)."""


class Judge:
    """Pass one's state: fed every line (:meth:`line`) and every record's replayable form
    (:meth:`record`), then :meth:`finish` refuses or returns the :class:`Frame`.

    With a ``spool``, what it established of each block and record is written there in
    order (:mod:`~agentplane_journal.journal.restore_spool`) for pass two to write from."""

    def __init__(self, spool: Spool | None = None) -> None:
        # This package's restore replays its own kinds too (LangGraph, sessions), which
        # agentplane 0.22's typed decode cannot read: that is verify-export's remark about
        # agentplane, not a reason to refuse the file here.
        # The runs met spill to a scratch file (memory stays flat; :meth:`close` deletes it),
        # and no sound run needs naming: a refusal quotes findings.
        self._seen = SpilledRuns()
        self._verifier = ExportVerifier(
            None, agentplane_typed=False, seen=self._seen, sound_listed=0
        )
        self._version: object = None
        self._checkpoint: Checkpoint | None = None
        self._canon: int | None = None
        self._complete = False
        self._run: RunId | None = None
        self._sealed = False
        self._records = 0
        self._sealed_empty: list[RunId] = []
        self._signed = self._dropped = 0
        self._profiles: set[WireProfile] = set()
        self._profile: WireProfile | None = None  # the one last added to _profiles
        self._started: set[EffectKey] = set()  # the current run's
        self._claims: dict[str, RunId] = {}
        self._spool = spool
        self._prev = bytes(32)  # the current run's head, chained here over the bytes
        self._last_seq = 0
        self._gaps = 0  # records whose seq does not follow the one before (the verifier names them)
        self._differing = 0

    @property
    def last_read(self) -> tuple[str, bytes, bytes, object] | None:
        """The verifier's reading of the record line just fed to :meth:`line`
        (``ExportVerifier.last_read``)."""
        return self._verifier.last_read

    def line(self, number: int, value: dict[str, Any] | str) -> RunId | None:
        """Take line ``number`` as :func:`~.exportfmt.read.read_line` read it; the run whose
        block a record line sits in (``None``: none, which the verifier names)."""
        self._verifier.feed_read(value)
        if isinstance(value, str):
            raise RestoreRefused(
                f"line {number}: {value} — a restore that skipped it would rebuild the run "
                "without what the line held (a record line cut short restores its run short)"
            )
        kind = value.get("kind")
        if kind is None:  # a record, the commonest line
            self._records += 1
            if value.get("attestation") is not None:
                self._signed += 1
            return self._run
        if kind == HEADER:
            self._version = value.get("version")
            c = value.get("canon")
            self._canon = c if type(c) is int else None
            self._checkpoint = parse_checkpoint(value.get("checkpoint"))
        elif kind == RUN_BLOCK:
            self._close_block()
            seen = self._verifier.last_block
            block = seen[1] if seen is not None and seen[0] is value else run_block(value)
            self._run = None if isinstance(block, str) else block.run
            self._sealed = not isinstance(block, str) and block.index is not None
            if self._spool is not None and isinstance(block, RunBlock):
                self._spool.block(block.run.ulid, block.index)
        elif kind == TRAILER:
            self._complete = True
        return None

    def record(
        self,
        number: int,
        raw: bytes,
        body: dict[str, Any],
        epoch: int,
        append: Append,
        carried: object = None,
        resealed: bool = False,
        profile: WireProfile | None = None,
        read: tuple[str, bytes, bytes, object] | None = None,
    ) -> None:
        """A record line's wire bytes (``raw``, parsed: ``body``) and the ``(epoch, append)``
        that re-creates them: the wire profile its version names must write them again,
        byte for byte, and nothing the store checks may refuse them. ``resealed``: the
        caller has already compared that profile's canonical bytes of ``append``'s body
        with ``raw`` (and found them equal, at most ``MAX_RECORD_BYTES``). ``carried``: the
        line's ``hash``; ``profile``: ``body``'s, if the caller has it. Then chained onto the
        run's head and spooled. ``read``: the verifier's reading of this line
        (:attr:`last_read`), whose ``raw`` is the text ``raw`` was encoded from: its digest
        is taken when it was chained onto this run's head, rather than hashed again."""
        if profile is None:
            profile = profile_of_record(body)
        if profile is None:
            known = ", ".join(f"v={p.record_version} ({p.name})" for p in PROFILES)
            raise RestoreRefused(
                f"line {number}: a record of version v={repr(body.get('v'))[:40]}, which no wire "
                f"profile this build writes holds ({known}) — it cannot be restored as its "
                "bytes say"
            )
        refused = profile.refusal(append)
        if refused is not None:
            raise RestoreRefused(f"line {number}: {refused}")
        if profile is not self._profile:  # hashing a profile is a dataclass's tuple hash
            self._profiles.add(profile)
            self._profile = profile
        seq = body.get("seq")
        if type(seq) is not int:  # verify-export's finding too; never chained as a number
            raise RestoreRefused(
                f"line {number}: a record whose seq is not an integer "
                f"({repr(seq)[:40]}) cannot be replayed at any position"
            )
        kind = append.kind
        try:
            keys = self._indexed(append) if kind in INDEXED else _NO_KEYS
            if not resealed:
                again = Record.seal(
                    append.body(seq, epoch),
                    Digest.ZERO,
                    canon=profile.canonicalize,
                ).raw
        except (TypeError, ValueError, RecordTooLargeError) as exc:
            raise RestoreRefused(
                f"line {number}: {exc} — the store would refuse it part-way through the restore"
            ) from None
        if not resealed and again != raw:
            # Sound as a file (the hash is over these bytes), yet append would write other
            # bytes under another hash: the restored run would not be the file's.
            raise RestoreRefused(
                f"line {number}: the record's wire bytes are not the bytes wire profile "
                f"{profile.name} writes for it, so replaying it would write another record "
                "(another hash) than the file holds"
            )
        effect, case = append.effect_key, append.case
        self._chain(
            seq,
            epoch,
            kind,
            None if effect is None else effect.hex(),
            None if case is None else str(case),
            raw,
            keys[0] if keys else None,
            append.payload.get("outcome") if kind == RUN_SEALED else None,
            carried,
            read,
        )

    def plain(
        self,
        seq: int,
        epoch: int,
        kind: str,
        raw: bytes,
        carried: object,
        read: tuple[str, bytes, bytes, object],
    ) -> None:
        """:meth:`record` for a record pass one showed needs no ``Append``
        (``restore_read._plain_envelope``): written by ``agentplane-0.4`` as exactly ``raw``
        (``resealed``), ``seq`` an integer, a bare envelope (no effect key, no case) of a
        kind that claims and indexes nothing (not in :data:`INDEXED`) and that ``append``
        accepts with its fields. What :meth:`record` would judge of it holds: its profile
        refuses only another version or a ``RunAdmitted``; it has no key, no outcome."""
        if self._profile is not AGENTPLANE_0_4:
            self._profiles.add(AGENTPLANE_0_4)
            self._profile = AGENTPLANE_0_4
        self._chain(seq, epoch, kind, None, None, raw, None, None, carried, read)

    def _chain(
        self,
        seq: int,
        epoch: int,
        kind: str,
        effect: str | None,
        case: str | None,
        raw: bytes,
        key: str | None,
        outcome: str | None,
        carried: object,
        read: tuple[str, bytes, bytes, object] | None,
    ) -> None:
        """``raw`` (what append writes for the record) chained from the run's first record,
        and the record spooled with the columns the store writes for it."""
        if seq != self._last_seq + 1:
            self._gaps += 1
        self._last_seq = seq
        prev = self._prev
        if read is not None and read[1] == prev:
            digest = read[2]  # SHA-256 over prev and these very bytes, by the verifier
        else:
            h = hashlib.sha256(prev)
            h.update(raw)
            digest = h.digest()
        self._prev = digest
        if carried != digest.hex():
            self._differing += 1
        if self._spool is not None:
            self._spool.record((seq, epoch, kind, effect, case, prev, digest, raw, key, outcome))

    def _indexed(self, append: Append) -> list[str]:
        """What ``append`` checks (an outcome label) and its indexes refuse (a second start
        of an effect in a run, a key another run claimed), as a ``ValueError``; the
        admission keys it claims."""
        if append.kind == RUN_SEALED:
            check_label(append.payload.get("outcome"), "the RunSealed record's outcome")
        elif append.kind == EFFECT_STARTED and append.effect_key is not None:
            if append.effect_key in self._started:
                raise ValueError(
                    f"run {append.run} starts effect {append.effect_key.hex()} a second time "
                    "(the exactly-once index holds one start per effect and run)"
                )
            self._started.add(append.effect_key)
        keys = claimed_keys([append])
        for key in keys:
            holder = self._claims.setdefault(key, append.run)
            if holder != append.run:
                raise ValueError(
                    f"run {append.run} claims admission key {key!r}, which run {holder} "
                    "claimed earlier in this file (a key has one holder; a claim the source "
                    "retired with forget_admissions cannot be replayed)"
                )
        return keys

    def _close_block(self) -> None:
        if self._run is not None and not self._records:
            if self._sealed:
                self._sealed_empty.append(self._run)
            else:
                self._dropped += 1
        self._run, self._sealed, self._records = None, False, 0
        self._started = set()
        self._prev, self._last_seq = bytes(32), 0

    def close(self) -> None:
        """Delete the scratch file of runs met (after :meth:`finish`, or on a refusal)."""
        self._seen.close()

    def finish(self) -> Frame:
        """Refuse what cannot be restored as the file says; otherwise the :class:`Frame`."""
        self._close_block()
        if self._version != FORMAT_VERSION:
            raise RestoreRefused(
                f"the export claims format version {self._version!r} and this build reads "
                f"{FORMAT_VERSION} — restoring a format this build cannot fully parse would "
                "rebuild an unknowable subset and call it a history"
            )
        if not self._complete:
            raise RestoreRefused(
                "the export has no trailer, so it was cut short — every line in it is a valid "
                "prefix, and restoring a prefix would rebuild a partial history shaped exactly "
                "like a whole one. Re-take the export"
            )
        if self._checkpoint is None:
            raise RestoreRefused("the export's header carries no readable checkpoint")
        findings = self._verifier.finish(None).findings
        if findings:
            more = f" (and {len(findings) - _SHOWN} more)" if len(findings) > _SHOWN else ""
            raise RestoreRefused(
                "the file is not sound, so what a restore rebuilt would not be the history it "
                "commits to (`verify-export` lists every finding): "
                + "; ".join(findings[:_SHOWN])
                + more
            )
        if self._gaps:
            # The verifier names every gap; this is the spool's own guard, should it not.
            raise RestoreRefused(
                f"{self._gaps} record(s) do not follow the seq before them in their run, so "
                "the file's runs are not contiguous chains"
            )
        if self._sealed_empty:
            runs = ", ".join(str(r) for r in self._sealed_empty[:_SHOWN])
            raise RestoreRefused(
                f"{len(self._sealed_empty)} run(s) sealed in the export's log carry no records "
                f"({runs}): the export declares them unreadable, and the log cannot be rebuilt "
                "without them. Repair them in the source (`verify --all` names the damage) and "
                "export again"
            )
        return Frame(
            self._checkpoint,
            self._canon,
            self._signed,
            self._profiles,
            self._dropped,
            self._differing,
        )
