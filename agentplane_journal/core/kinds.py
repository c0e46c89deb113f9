"""agentplane 0.22.0's newer record fields and kinds: their names, JSON types and typed reads.

agentplane 0.22.0 added fields to existing kinds and two kinds; a journal in either profile
accepts them (agentplane 0.4.0's reader ignores members it does not know), and a record's
typed view reads them (:class:`~agentplane_journal.core.record.Record`'s properties):

=====================  ===================  ==================================================
kind                   member               JSON type, and what its absence means
=====================  ===================  ==================================================
``RunAdmitted``        ``canon``            integer; required in ``agentplane-0.22``
``RunAdmitted``        ``idempotency_key``  string (:mod:`.admission`); absent: none
``EffectDone``         ``declared``         object ``{trust, sensitivity}``; required in 0.22
``EffectFailed``       ``permanent``        boolean; absent: ``false`` (0.22 omits false)
``EffectReconciled``   ``declared``         object, present exactly when ``output`` is
``RunSealed``          ``reason``           string; absent: none (0.22 omits it)
``CaseBound``          ``correlation``      array; absent: ``[]`` (0.22 omits it when empty)
``BudgetReadmitted``   ``limit``            string (a new kind)
``BreakGlass``         ``actor``, ``roles``, string, array of strings, non-blank string
                       ``reason``           (a new kind)
=====================  ===================  ==================================================

A member of the wrong JSON type is refused when an :class:`~.append.Append` is built (no
writer of agentplane produces it, and its reader would refuse the record), and read back as
:class:`~agentplane_journal.errors.CorruptRecordError`. Only the types are checked here, as
0.22's deserializer would; the values' vocabulary (``trust`` levels, ...) is the runtime's.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "BREAK_GLASS",
    "BUDGET_READMITTED",
    "CASE_BOUND",
    "EFFECT_DONE",
    "EFFECT_FAILED",
    "EFFECT_RECONCILED",
    "field_problem",
    "json_type",
]

EFFECT_DONE = "EffectDone"
EFFECT_FAILED = "EffectFailed"
EFFECT_RECONCILED = "EffectReconciled"
CASE_BOUND = "CaseBound"
BUDGET_READMITTED = "BudgetReadmitted"
BREAK_GLASS = "BreakGlass"


def json_type(value: object) -> str:
    """The JSON type of a decoded value, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    return "array" if isinstance(value, list | tuple) else type(value).__name__


def _declared(value: object) -> bool:
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("trust"), str)
        and isinstance(value.get("sensitivity"), str)
    )


def _strings(value: object) -> bool:
    return isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)


#: kind -> member -> (check, what it must be). Checked only when the member is present; the
#: members a profile requires are its own refusal (core/profile.py).
_FIELDS: dict[str, dict[str, tuple[Any, str]]] = {
    "RunAdmitted": {
        "canon": (lambda v: type(v) is int and 0 <= v <= 65535, "an integer in 0..65535"),
    },
    EFFECT_DONE: {"declared": (_declared, "an object with string 'trust' and 'sensitivity'")},
    EFFECT_FAILED: {"permanent": (lambda v: type(v) is bool, "a boolean")},
    EFFECT_RECONCILED: {"declared": (_declared, "an object with string 'trust' and 'sensitivity'")},
    "RunSealed": {"reason": (lambda v: type(v) is str, "a string (leave it out for none)")},
    CASE_BOUND: {"correlation": (lambda v: isinstance(v, list | tuple), "an array")},
    BUDGET_READMITTED: {"limit": (lambda v: type(v) is str, "a string")},
    BREAK_GLASS: {
        "actor": (lambda v: type(v) is str and v.strip() != "", "a non-blank string"),
        "roles": (_strings, "an array of strings"),
        "reason": (lambda v: type(v) is str and v.strip() != "", "a non-blank string"),
    },
}

#: Members a new kind cannot do without (0.22's reader refuses the record without them).
_REQUIRED: dict[str, tuple[str, ...]] = {
    BUDGET_READMITTED: ("limit",),
    BREAK_GLASS: ("actor", "roles", "reason"),
}


def field_problem(kind: str, payload: Mapping[str, Any]) -> str | None:
    """What is wrong with ``payload``'s agentplane 0.22 members for ``kind``, or ``None``."""
    fields = _FIELDS.get(kind)
    if fields is None:
        return None
    for member in _REQUIRED.get(kind, ()):
        if member not in payload:
            return f"a {kind} record needs a '{member}' member ({fields[member][1]})"
    for member, (check, expected) in fields.items():
        if member in payload and not check(payload[member]):
            return (
                f"{kind}'s '{member}' member must be {expected}, not a JSON "
                f"{json_type(payload[member])}"
            )
    return None
