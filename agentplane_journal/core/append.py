"""Appends: what a caller asks the store to write, checked before any transaction starts.

An :class:`Append` is a caller's intent (run, kind, the kind's fields); the store assigns
``seq`` and ``epoch`` and :meth:`Append.body` is the body :meth:`Record.seal` turns into
canonical bytes. Pure code, no I/O.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from agentplane_journal.core.admission import IDEMPOTENCY_KEY, RUN_ADMITTED, check_admission_key
from agentplane_journal.core.canon import canonical_bytes
from agentplane_journal.core.checks import MAX_I64 as _I64_MAX
from agentplane_journal.core.checks import MAX_U16 as _U16_MAX
from agentplane_journal.core.checks import check_label
from agentplane_journal.core.checks import is_int as _is_int
from agentplane_journal.core.ids import PHASES, CaseId, EffectKey, RunId, validate_step
from agentplane_journal.core.kinds import field_problem

__all__ = ["EFFECT_STARTED", "RUN_SEALED", "RECORD_VERSION", "RESERVED_MEMBERS", "Append"]

#: The record kinds the store acts on, spelled once: a started effect (the exactly-once
#: index) and a conclusion (the outcome index).
EFFECT_STARTED = "EffectStarted"
RUN_SEALED = "RunSealed"

RECORD_VERSION = 4
"""Schema version (``v``) of every agentplane 0.4.0 record kind."""

RESERVED_MEMBERS = frozenset(
    {"seq", "run", "case", "step", "phase", "epoch", "v", "effect_key", "kind"}
)
"""Body members the record owns; a kind's fields are flattened beside them, so a field
with one of these names would silently overwrite (or be overwritten by) the envelope."""


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
    payload: dict[str, Any] = field(hash=False)  # __init__ defaults it to {}
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
        _fill(self, run, kind, payload, case, step, phase, effect_key, v, True)

    @classmethod
    def of_canonical_payload(
        cls,
        run: RunId | str,
        kind: str,
        payload: dict[str, Any],
        *,
        case: CaseId | str | None = None,
        step: int | None = None,
        phase: str = "forward",
        effect_key: EffectKey | str | None = None,
        v: int = RECORD_VERSION,
    ) -> Append:
        """The :class:`Append` of these arguments, every check made as by the constructor
        but one: ``payload``'s canonical bytes are not written to see that they can be.

        For a caller that holds the canonical bytes (:func:`~.canon.canonical_bytes`, the
        ``agentplane-0.4`` rule the constructor checks with) of a JSON object whose members
        include every member of ``payload``, the very same values (restore's pass one: the
        record body it read, of which the payload is the members other than the envelope's).
        The canonical form of an object checks each member's key and value on its own (the
        nesting, the key order's range, the integers, the floats, the strings' UTF-8), so
        an object with a canonical form has members that all pass, and so has any object
        made of some of them: the check would pass, and it is that check alone that is
        skipped. Anything else (a payload the caller has not seen written so) must use the
        constructor."""
        self = object.__new__(cls)
        _fill(self, run, kind, payload, case, step, phase, effect_key, v, False)
        return self

    @classmethod
    def of_bare_envelope(cls, run: RunId, kind: str, payload: dict[str, Any], v: int) -> Append:
        """``of_canonical_payload(run, kind, payload, v=v)`` for the commonest record (no
        case, step, phase or effect key), given a ``payload`` the caller built afresh from
        members none of which is in :data:`RESERVED_MEMBERS` and holds no other reference
        to (restore's pass one, per record). The checks that depend on the arguments are
        made as :func:`_fill` makes them (the kind a label, the kind's fields, an admission
        key, ``v`` an unsigned 16-bit integer); those that cannot fail for such arguments
        (a ``RunId`` parsed, the payload a dict, a reserved name in it, the unset members)
        are not, nor is the payload copied: nothing else can edit it."""
        if type(run) is not RunId or type(payload) is not dict:
            raise TypeError("of_bare_envelope takes a RunId and a dict")  # a caller's bug
        self = object.__new__(cls)
        _append_run(self, run)
        _append_kind(self, check_label(kind, "kind"))
        _check_fields(kind, payload)
        _append_payload(self, payload)
        _append_case(self, None)
        _append_step(self, None)
        _append_phase(self, "forward")
        _append_effect_key(self, None)
        _append_v(self, _checked_v(v))
        return self

    @property
    def idempotency_key(self) -> str | None:
        """The admission key this append claims: a ``RunAdmitted``'s ``idempotency_key``
        payload member, else ``None`` (every other kind, and an admission without one)."""
        if self.kind != RUN_ADMITTED:
            return None
        key: str | None = self.payload.get(IDEMPOTENCY_KEY)  # checked at construction
        return key

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


def _fill(
    self: Append,
    run: RunId | str,
    kind: str,
    payload: dict[str, Any] | None,
    case: CaseId | str | None,
    step: int | None,
    phase: str,
    effect_key: EffectKey | str | None,
    v: int,
    canonical: bool,
) -> None:
    """:class:`Append`'s checks, each argument set once through its slot; ``canonical``:
    whether to check that the payload has canonical bytes (see
    :meth:`Append.of_canonical_payload`)."""
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
    if canonical:  # else shown by the caller (Append.of_canonical_payload)
        canonical_bytes(payload, path="payload")
    _check_fields(kind, payload)
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
    _append_v(self, _checked_v(v))


def _check_fields(kind: str, payload: dict[str, Any]) -> None:
    """agentplane 0.22.0's newer members, by JSON type (core/kinds.py), and a
    ``RunAdmitted``'s admission key: the key the store will claim is refused here, in the
    caller's code, rather than by the index (see core/admission.py)."""
    problem = field_problem(kind, payload)
    if problem is not None:
        raise ValueError(problem)
    if kind == RUN_ADMITTED and IDEMPOTENCY_KEY in payload:
        check_admission_key(payload[IDEMPOTENCY_KEY], f"{kind}'s {IDEMPOTENCY_KEY}")


def _checked_v(v: Any) -> int:
    """``v``, an unsigned 16-bit integer (``TypeError``/``ValueError`` otherwise)."""
    if type(v) is not int and not _is_int(v):
        raise TypeError(f"v must be an int, not {type(v).__name__}")
    if not 0 <= v <= _U16_MAX:
        raise ValueError(f"v {v} is outside 0..{_U16_MAX} (an unsigned 16-bit integer)")
    return v  # as given (an int subclass stays one, as before)


# The slots' own setters, for Append.__init__ (past the frozen guard without its lookup).
_append_run = Append.__dict__["run"].__set__
_append_kind = Append.__dict__["kind"].__set__
_append_payload = Append.__dict__["payload"].__set__
_append_case = Append.__dict__["case"].__set__
_append_step = Append.__dict__["step"].__set__
_append_phase = Append.__dict__["phase"].__set__
_append_effect_key = Append.__dict__["effect_key"].__set__
_append_v = Append.__dict__["v"].__set__
