"""agentplane 0.22's typed record decode, as a check: would its ``RecordBody`` read these
wire bytes, and would re-chaining it give them back? Pure, no I/O.

agentplane 0.22's export ``verify`` parses every record's wire bytes as its typed
``RecordBody`` before anything else, and a record it cannot parse is "malformed": it is
skipped, and every later record of the run then reads as missing or edited. Its ``restore``
re-chains the typed value, which drops what the type does not hold. So a canon-1 export is
only agentplane's if each record is a ``RecordBody``; :func:`decode_problem` says why one is
not (a required member missing, an enum in another form, a kind 0.22 does not define), and
:func:`dropped_members` what its re-chaining would drop. The rules are agentplane 0.22.0's
``RecordKind`` and the structs it names (``src/journal/record.rs``, ``src/core``), checked
against agentplane's own decode in ``tests/test_interop22.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from agentplane_journal.exportfmt.body import TOP_MEMBERS, VARIANT_MEMBERS

__all__ = ["decode_problem", "dropped_members"]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_TRUST = frozenset({"trusted", "untrusted"})
_SENSITIVITY = frozenset({"public", "internal", "confidential", "secret"})
_DISPOSITION = frozenset({"landed", "did_not_happen", "in_doubt"})
_MODES = frozenset({"retry", "idempotent", "reconcile", "requires_operator"})
_PHASES = frozenset({"forward", "compensating"})


def _str(v: Any) -> str | None:
    return None if isinstance(v, str) else "a string"


def _bool(v: Any) -> str | None:
    return None if type(v) is bool else "true or false"


def _uint(bits: int) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        return None if type(v) is int and 0 <= v < 2**bits else f"an unsigned {bits}-bit integer"

    return check


def _digest(v: Any) -> str | None:
    return None if isinstance(v, str) and _HEX64.fullmatch(v) else "64 lowercase hex digits"


def _any(v: Any) -> str | None:
    return None


def _strings(v: Any) -> str | None:
    ok = isinstance(v, list) and all(isinstance(x, str) for x in v)
    return None if ok else "a list of strings"


def _label(v: Any) -> str | None:
    if not isinstance(v, dict):
        return "a Label {provenance, trust, sensitivity}"
    if _strings(v.get("provenance")) is not None:
        return "a Label whose provenance is a list of source ids"
    if v.get("trust") not in _TRUST or v.get("sensitivity") not in _SENSITIVITY:
        return f"a Label with trust in {sorted(_TRUST)} and sensitivity in {sorted(_SENSITIVITY)}"
    return None


def _declared(v: Any) -> str | None:
    ok = isinstance(v, dict) and v.get("trust") in _TRUST and v.get("sensitivity") in _SENSITIVITY
    return None if ok else "a DeclaredOutput {trust, sensitivity}"


def _recovery(v: Any) -> str | None:
    # internally tagged by `mode` (snake_case); Idempotent carries its key
    if not isinstance(v, dict) or v.get("mode") not in _MODES:
        return 'agentplane\'s internally tagged Recovery, e.g. {"mode": "reconcile"}'
    if v["mode"] == "idempotent" and not isinstance(v.get("key"), str):
        return 'Recovery::Idempotent with its "key"'
    return None


def _descriptor(v: Any) -> str | None:
    ok = isinstance(v, dict) and isinstance(v.get("kind"), str) and "args" in v
    return None if ok else "an EffectDescriptor {kind, args}"


def _disposition(v: Any) -> str | None:
    return None if v in _DISPOSITION else f"a Disposition ({', '.join(sorted(_DISPOSITION))})"


def _object(v: Any) -> str | None:
    return None if isinstance(v, dict) else "an object"


Check = Callable[[Any], str | None]

#: Each kind's members agentplane requires (no ``#[serde(default)]``), with the form each
#: must have; members it defaults are checked only for their form when present.
_REQUIRED: dict[str, dict[str, Check]] = {
    "RunAdmitted": {"capability": _str, "input": _any, "input_label": _label, "canon": _uint(16)},
    "PlanFrozen": {"steps": _strings, "plan": _any},
    "StepStarted": {"skill": _str},
    "StepFinished": {"outcome": _str},
    "CaseBound": {"case_kind": _str, "opened": _bool},
    "DeadlineRegistered": {"name": _str, "resolved_at": _str, "calendar_digest": _digest},
    "DeadlineTransition": {"name": _str, "from": _str, "to": _str},
    "RunSuspended": {"reason": _object},
    "Note": {"text": _str},
    "EffectStarted": {
        "descriptor": _descriptor,
        "recovery": _recovery,
        "mutates": _bool,
        "attempt": _uint(32),
        "backoff_ms": _uint(64),
    },
    "EffectDone": {"output": _any, "declared": _declared},
    "EffectFailed": {"error": _str, "disposition": _disposition},
    "BudgetRefused": {"limit": _str, "used": _str},
    "BudgetReadmitted": {"limit": _str},
    "IdentityBound": {"chain": lambda v: None if isinstance(v, list) else "a list"},
    "PolicyDenied": {"reason": _str, "action": _str, "resource": _str},
    "GroupOpened": {"group": _str, "resources": _strings},
    "GroupSettled": {"group": _str, "outcome": _str},
    "StepCompensated": {"compensation": _any, "outcome": _str},
    "EffectReconciled": {"disposition": _disposition},
    "Released": {
        "releaser": _str,
        "release": _object,
        "label": _label,
        "field_labels": _object,
        "result_label": _label,
        "result_field_labels": _object,
        "value": _digest,
    },
    "RunCancelled": {"actor": _str, "reason": _str},
    "RunSealed": {"outcome": _str, "chain_head": _digest},
    "BreakGlass": {"actor": _str, "roles": _strings, "reason": _str},
    "Swept": {"subject": _str, "action": _any},
}

_OPTIONAL: dict[tuple[str, str], Check] = {
    ("EffectStarted", "outbound_label"): _label,
    ("EffectDone", "source"): _str,
    ("EffectFailed", "permanent"): _bool,
    ("EffectReconciled", "declared"): _declared,
    ("EffectReconciled", "detail"): _str,
    ("RunSealed", "reason"): _str,
    ("RunAdmitted", "idempotency_key"): _str,
}

#: ``Option`` members (written only when present: a ``null`` is read as absent, then skipped).
_TOP_OPTIONS = frozenset({"case", "step", "effect_key"})
_OPTIONS: dict[str, frozenset[str]] = {
    "RunAdmitted": frozenset({"governed_by", "policy_bundle", "idempotency_key"}),
    "EffectStarted": frozenset({"outbound_label"}),
    "EffectDone": frozenset({"source"}),
    "EffectReconciled": frozenset({"output", "detail", "declared"}),
    "GroupSettled": frozenset({"detail"}),
    "RunSealed": frozenset({"reason"}),
    "Swept": frozenset({"detail"}),
}

_ENVELOPE: dict[str, Check] = {"seq": _uint(64), "epoch": _uint(64), "v": _uint(16), "run": _str}


def decode_problem(wire: Mapping[str, Any]) -> str | None:
    """Why agentplane 0.22's ``RecordBody`` cannot be read from these (parsed) wire bytes,
    or ``None`` when it can."""
    for name, check in _ENVELOPE.items():
        if name not in wire:
            return f"missing field `{name}`"
        wrong = check(wire[name])
        if wrong is not None:
            return f"`{name}` must be {wrong}"
    phase = wire.get("phase", "forward")
    if phase not in _PHASES:
        return f"`phase` must be one of {sorted(_PHASES)}"
    if "effect_key" in wire and _digest(wire["effect_key"]) is not None:
        return "`effect_key` must be 64 lowercase hex digits"
    if "step" in wire and _uint(32)(wire["step"]) is not None:
        return "`step` must be an unsigned 32-bit integer"
    kind = wire.get("kind")
    if not isinstance(kind, str) or kind not in _REQUIRED:
        return f"agentplane 0.22 defines no record kind {kind!r}"
    for name, check in _REQUIRED[kind].items():
        if name not in wire:
            return f"{kind}: missing field `{name}`"
        wrong = check(wire[name])
        if wrong is not None:
            return f"{kind}.{name} must be {wrong}"
    for (k, name), check in _OPTIONAL.items():
        if k == kind and wire.get(name) is not None:
            wrong = check(wire[name])
            if wrong is not None:
                return f"{kind}.{name} must be {wrong}"
    return None


def _sets(kind: str) -> tuple[frozenset[str], frozenset[str]]:
    """A kind's known members and its ``Option`` members, built once per kind (every record of
    a canon-1 file asks; a hostile file's invented kinds do not grow the memo past a bound)."""
    sets = _SETS.get(kind)
    if sets is None:
        sets = (
            frozenset({*TOP_MEMBERS, "kind", *VARIANT_MEMBERS.get(kind, ())}),
            _OPTIONS.get(kind, frozenset()) | _TOP_OPTIONS,
        )
        if len(_SETS) < _MAX_SETS:
            _SETS[kind] = sets
    return sets


_SETS: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
_MAX_SETS = 256


def dropped_members(wire: Mapping[str, Any]) -> list[str]:
    """Members agentplane 0.22's typed re-chaining of a readable record would not write back
    (members its types do not hold; ``null`` where it skips an absent option; the default
    ``"phase": "forward"``), so that its ``restore`` would re-chain the record to other bytes."""
    kind = wire.get("kind")
    known, options = _sets(kind if isinstance(kind, str) else "")
    dropped = [f"{kind}.{name}" for name in wire if name not in known]
    dropped += [
        f"{kind}.{name}: null" for name, value in wire.items() if value is None and name in options
    ]
    if wire.get("phase") == "forward":
        dropped.append(f'{kind}.phase: "forward"')
    return dropped
