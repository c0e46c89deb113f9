"""Restore's pass one: a file's lines read, judged and each record made the ``Append`` the
restore writes (:func:`check_frame`), with what was established spooled for pass two.

Split from :mod:`~agentplane_journal.journal.restore` (pass two, the report) because it is
one idea of its own: how a line's record becomes an append whose bytes are, provably, the
line's wire bytes, either shown by the verifier's own writing of the body (:func:`_proven`,
:func:`_bare`) or compared the ordinary way (:func:`_replay_of`), every refusal naming its
line (:class:`~agentplane_journal.journal.restore_check.RestoreRefused`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, overload

from agentplane_journal.core import jsonload
from agentplane_journal.core.append import RESERVED_MEMBERS, Append
from agentplane_journal.core.canon import canonical_of_sorted
from agentplane_journal.core.checks import MAX_I64, check_label
from agentplane_journal.core.ids import RunId
from agentplane_journal.core.kinds import field_problem
from agentplane_journal.core.profile import AGENTPLANE_0_4, WireProfile, profile_of_record
from agentplane_journal.core.record import MAX_RECORD_BYTES, decode_wire
from agentplane_journal.exportfmt.read import read_line
from agentplane_journal.journal.restore_check import INDEXED, Frame, Judge, RestoreRefused
from agentplane_journal.journal.restore_spool import Spool

__all__ = ["append_of", "check_frame"]


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """Each non-blank line as :func:`~.exportfmt.read.read_line` reads it (a sentence for an
    unreadable one), with its number."""
    with path.open("rb") as f:
        for number, line in enumerate(f, 1):
            value = read_line(line.removesuffix(b"\n"))
            if value is not None:
                yield number, value


def _wire(value: dict[str, Any], number: int) -> dict[str, Any]:
    raw = value.get("raw")
    if not isinstance(raw, str):
        raise RestoreRefused(
            f"line {number}: a record line carries no wire bytes (`raw`) — restoring its "
            "display copy instead would rebuild what the readable half says rather than what "
            "the chain hashed, so the file is refused instead of guessed at"
        )
    try:
        body = decode_wire(raw)  # numbers as the writer meant them (1e20 stored as an integer)
    except RecursionError:  # nested past any body a writer makes: refused, not a traceback
        body = jsonload.JsonTooDeep(jsonload.MAX_JSON_DEPTH)
    except ValueError as exc:
        body = exc
    if not isinstance(body, dict):
        raise RestoreRefused(
            f"line {number}: a record line's wire bytes do not parse as a record "
            "— it cannot be replayed as written, and its display copy is not a substitute"
        )
    return body


def check_frame(path: Path, spool: Spool | None = None) -> Frame:
    """Pass one (:mod:`~agentplane_journal.journal.restore_check`): every line judged as
    ``verify-export`` judges it, and every record's ``append`` built, under its own run's
    block, and checked against the wire profile its version names; what it established
    written to ``spool``, if given, for pass two."""
    judge = Judge(spool)
    line, record, plain = judge.line, judge.record, judge.plain  # bound once: per line
    try:
        for number, value in _lines(path):
            run = line(number, value)
            if run is None or isinstance(value, str):
                continue
            read = judge.last_read
            shown = value.get("body")
            if read is not None and read[0] is not value.get("raw"):
                read = None  # not this line's (never expected): nothing reused
            if read is not None and read[3] is shown and type(shown) is dict:
                # The commonest record, taken here rather than through _replay_of (which
                # would take the same branch first): the verifier wrote its body back.
                try:
                    # read[0] is the line's raw
                    proven = _proven(shown, run, read[0], read, plain=True)
                except (TypeError, ValueError, KeyError, RecursionError):
                    proven = None  # judged the ordinary way below, as _replay_of does
                if proven is not None:
                    data, epoch, append = proven
                    carried = value.get("hash")
                    if append is None:  # _plain_envelope: seq and kind checked there
                        plain(shown["seq"], epoch, shown["kind"], data, carried, read)
                    else:
                        record(
                            number, data, shown, epoch, append, carried, True, AGENTPLANE_0_4, read
                        )
                    continue
            data, body, epoch, append, profile = _replay_of(value, run, number)
            resealed = profile is not None
            record(number, data, body, epoch, append, value.get("hash"), resealed, profile, read)
        return judge.finish()
    finally:
        judge.close()


def _replay_of(
    value: dict[str, Any],
    run: RunId,
    number: int,
    read: tuple[str, bytes, bytes, object] | None = None,
) -> tuple[bytes, dict[str, Any], int, Append, WireProfile | None]:
    """``(raw, body, epoch, append, resealed)`` for a record line (``resealed``: the profile
    whose bytes were compared, else ``None``).

    The line's readable ``body`` was parsed with the line; when the append built from it
    is written by its version's profile as exactly the line's wire bytes, it *is* the
    record (canonical JSON is one text per value), and the wire bytes need no parse of
    their own (``resealed``: that comparison is made). Anything else (a display copy that
    differs, a body the profile writes otherwise, an unreplayable one) is read from the wire
    bytes as before, and judged there: the same verdicts and messages either way.

    ``read``: the verifier's reading of this line (``ExportVerifier.last_read``); where it
    wrote this very body back as this very ``raw`` (:func:`_proven`), that writing is the
    comparison, and is not made again."""
    raw = value.get("raw")
    if not isinstance(raw, str):
        _wire(value, number)  # refuses it, naming the line
        raise AssertionError("unreachable")
    shown = value.get("body")
    if type(shown) is dict:
        try:
            proven = _proven(shown, run, raw, read)
            if proven is not None:
                return proven[0], shown, proven[1], proven[2], AGENTPLANE_0_4
        except (TypeError, ValueError, KeyError, RecursionError):
            pass  # judged the ordinary way below
    data = raw.encode("utf-8", "surrogatepass")
    if type(shown) is dict and len(data) <= MAX_RECORD_BYTES:
        try:
            epoch, append = append_of(shown, run)
            profile = profile_of_record(shown)
            if (
                profile is not None
                and append.run == run
                and profile.canonicalize(append.body(shown["seq"], epoch), path="body") == data
            ):
                return data, shown, epoch, append, profile
        except (TypeError, ValueError, KeyError, RecursionError):
            pass  # judged from the wire bytes below
    body = _wire(value, number)
    epoch, append = _replayable(body, run, number)
    return data, body, epoch, append, None


@overload
def _proven(
    shown: dict[str, Any],
    run: RunId,
    raw: str,
    read: tuple[str, bytes, bytes, object] | None,
    *,
    plain: Literal[False] = False,
) -> tuple[bytes, int, Append] | None: ...
@overload
def _proven(
    shown: dict[str, Any],
    run: RunId,
    raw: str,
    read: tuple[str, bytes, bytes, object] | None,
    *,
    plain: bool,
) -> tuple[bytes, int, Append | None] | None: ...
def _proven(
    shown: dict[str, Any],
    run: RunId,
    raw: str,
    read: tuple[str, bytes, bytes, object] | None,
    *,
    plain: bool = False,
) -> tuple[bytes, int, Append | None] | None:
    """``(bytes, epoch, append)`` when the verifier's reading shows, with no canonical
    JSON written here, that ``append``'s body is written by ``agentplane-0.4`` as exactly
    ``raw``'s bytes; ``None`` when not shown (the caller then compares the ordinary way).

    The chain of equalities, each checked: the verifier wrote ``shown`` (the very object)
    with canonical JSON's C encoder as exactly ``raw`` (the very object);
    :func:`~agentplane_journal.core.canon.canonical_of_sorted` holds that writing to be
    ``canonical_bytes(shown)`` (else ``None`` here); the payload is members of ``shown``,
    so it has canonical bytes too and :meth:`Append.of_canonical_payload` skips only that
    check; and ``append.body(seq, epoch)`` is ``shown`` again member for member
    (:func:`_same_json`), so its canonical bytes are those same bytes. A line whose wire
    bytes are anything else cannot pass: every step compares with what was written.

    ``plain``: the append is ``None`` where :func:`_plain_envelope` shows the record needs
    none (the caller then judges it by ``Judge.plain``)."""
    if read is None or read[3] is not shown or read[0] is not raw:
        return None
    if profile_of_record(shown) is not AGENTPLANE_0_4:
        return None  # the other profile's canonical JSON is not the C encoder's
    data = canonical_of_sorted(shown, raw)
    if data is None or len(data) > MAX_RECORD_BYTES:
        return None
    if plain:
        epoch = _plain_envelope(shown, run)
        if epoch is not None:
            return data, epoch, None
    bare = _bare(shown, run)
    if bare is not None:
        return data, bare[0], bare[1]
    epoch, append = append_of(shown, run, canonical_payload=True)
    if append.run != run or not _same_json(append.body(shown["seq"], epoch), shown):
        return None
    return data, epoch, append


def _bare(shown: dict[str, Any], run: RunId) -> tuple[int, Append] | None:
    """``(epoch, append)`` for a body whose envelope is bare (``seq``, ``run``, ``epoch``,
    ``v`` and ``kind``, nothing else of :data:`RESERVED_MEMBERS`); ``None`` for any other
    body (:func:`_proven` then builds it by :func:`append_of` and compares it member for
    member).

    What :func:`_same_json` would establish of ``append.body(seq, epoch)`` holds here by
    construction, so that body is not built: its payload members are ``shown``'s own (the
    very objects), ``seq``, ``epoch`` and ``v`` are ``shown``'s, ``kind`` is ``shown``'s
    string (:func:`~agentplane_journal.core.checks.check_label` returns it), and ``run`` is
    checked to be the block's ULID text; the members ``body`` leaves out when unset (case,
    step, phase, effect key) are absent from ``shown`` too, since exactly five reserved
    members are present and they are these five. ``body``'s range checks on ``seq`` and
    ``epoch`` are made here."""
    payload = {k: x for k, x in shown.items() if k not in RESERVED_MEMBERS}
    if len(shown) - len(payload) != _BARE_MEMBERS:
        return None
    kind, v = shown.get("kind"), shown.get("v")
    epoch = _envelope_epoch(shown, run)
    if epoch is None or type(kind) is not str or type(v) is not int:
        return None
    return epoch, Append.of_bare_envelope(run, kind, payload, v)


def _envelope_epoch(shown: dict[str, Any], run: RunId) -> int | None:
    """The body's ``epoch`` when its ``seq``, ``epoch`` and ``run`` are of the types and
    ranges an append takes and ``run`` is the block's; ``None`` otherwise (the slower path
    then judges the body)."""
    seq, epoch, named = shown.get("seq"), shown.get("epoch"), shown.get("run")
    if (
        type(seq) is not int
        or type(epoch) is not int
        or type(named) is not str
        or not 1 <= seq <= MAX_I64
        or not 0 <= epoch <= MAX_I64
        or named != run.ulid
    ):
        return None
    return epoch


def _plain_envelope(shown: dict[str, Any], run: RunId) -> int | None:
    """``epoch`` for a body whose record pass one can judge without building its ``Append``
    (``Judge.plain``); ``None`` for any other (then :func:`_bare` or the member compare).

    The body is ``agentplane-0.4``'s and its canonical bytes are the line's wire bytes
    (:func:`_proven` has shown both, so ``v`` is that profile's record version); its
    envelope is bare (no case, step, phase or effect key; ``seq``, ``epoch``, ``run`` and
    ``kind`` of the types and ranges :func:`_bare` checks, ``run`` the block's); and its
    kind is not one the store indexes or claims by (``INDEXED``: a sealing outcome, a
    started effect, an admission key). What :meth:`Append.of_bare_envelope` would check of
    such a record is checked here by the same functions, raising as it raises: the kind a
    label, and the kind's fields (``field_problem``, given the body: no kind's field is a
    reserved member, so the body's fields are the payload's, tests/test_restore_plain.py).
    ``v`` is the profile's, an unsigned 16-bit integer, and the profile refuses nothing
    else of a kind that is not ``RunAdmitted``. Nothing else of an append is used by
    pass one for such a record: it is spooled with no effect key, case, claim or
    outcome, exactly as :meth:`Judge.record` spools its append."""
    kind = shown.get("kind")
    if (
        type(kind) is not str
        or kind in INDEXED
        or "case" in shown
        or "step" in shown
        or "phase" in shown
        or "effect_key" in shown
    ):
        return None
    epoch = _envelope_epoch(shown, run)
    if epoch is None:
        return None
    check_label(kind, "kind")
    problem = field_problem(kind, shown)
    if problem is not None:
        raise ValueError(problem)
    return epoch


_BARE_MEMBERS = 5
"""``seq``, ``run``, ``epoch``, ``v`` and ``kind``: the reserved members every body has."""


def _same_json(built: dict[str, Any], shown: dict[str, Any]) -> bool:
    """Whether ``built`` is ``shown`` as JSON: the same members, each value the very same
    object or an ``int`` or ``str`` equal to it and of its exact type (``True == 1`` and
    ``1.0 == 1`` in Python, not in JSON; ``-0.0 == 0.0`` is never taken)."""
    if len(built) != len(shown):
        return False
    for key, value in shown.items():
        other = built.get(key, _ABSENT)
        if other is value:
            continue
        kind = type(value)
        if (kind is str or kind is int) and type(other) is kind and other == value:
            continue
        return False
    return True


_ABSENT = object()


def append_of(
    body: dict[str, Any], run: RunId | None = None, *, canonical_payload: bool = False
) -> tuple[int, Append]:
    """``(epoch, Append)`` that re-creates ``body``: the envelope's members as the append's
    fields, every other member its payload (one place, so no field can be forgotten).
    ``run``: the block's, used as it is when the body names it (no second parse).
    ``canonical_payload``: the caller holds ``body``'s canonical bytes
    (:meth:`Append.of_canonical_payload`)."""
    payload = {k: v for k, v in body.items() if k not in RESERVED_MEMBERS}
    epoch = body.get("epoch")
    if type(epoch) is not int:
        raise ValueError(f"record {body.get('seq')!r} has no integer epoch")
    named = body.get("run")
    build = Append.of_canonical_payload if canonical_payload else Append
    return epoch, build(
        run if run is not None and named == run.ulid else str(named),
        str(body.get("kind")),
        payload,
        case=body.get("case"),
        step=body.get("step"),
        phase=body.get("phase", "forward"),
        effect_key=body.get("effect_key"),
        v=body.get("v", 0),
    )


def _replayable(body: dict[str, Any], run: RunId, number: int) -> tuple[int, Append]:
    """:func:`append_of`, or :class:`RestoreRefused` naming the line (pass one finds every
    such line before anything is written; pass two meets only lines pass one accepted)."""
    try:
        epoch, append = append_of(body)
    except (TypeError, ValueError) as exc:
        raise RestoreRefused(f"line {number}: the record cannot be replayed ({exc})") from None
    if append.run != run:
        raise RestoreRefused(
            f"line {number}: a record of run {append.run} sits in run {run}'s block — "
            "replaying it would mix two runs' chains; the file was edited or damaged"
        )
    return epoch, append
