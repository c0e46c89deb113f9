"""An export record line's readable ``body``, as agentplane 0.22 writes it, from the wire bytes.

agentplane 0.22's export parses each record's hashed bytes into its ``RecordBody`` struct and
writes ``serde_json::to_string`` of that struct (``src/export.rs``). So its ``body`` is not the
wire text: members come in the structs' *declaration* order (the wire is sorted by RFC 8785),
and numbers are re-rendered by serde_json's writer. This module derives exactly that text from
the wire bytes alone (never from a typed view that could disagree with them):

* **Order.** ``seq, run, case, step, phase, epoch, v, effect_key`` (``RecordBody``), then the
  flattened, internally tagged ``RecordKind``: ``kind`` first, then the variant's members in
  declaration order (:data:`VARIANT_MEMBERS`, from ``src/journal/record.rs``). Nested structs
  whose definition the reference holds are reordered too (:data:`NESTED_MEMBERS`:
  ``AgentIdentity``, ``EffectDescriptor``, ``Recovery``, ``DeclaredOutput``);
  ``BTreeMap<String, Label>`` members sort their keys by UTF-8 bytes (= code point).
  ``serde_json::Value`` members (``input``, ``plan``, ``output``, ``args``) keep the wire's
  order: agentplane's build enables serde_json's ``preserve_order`` (``src/keyring/envelope.rs``
  says so), so a parsed ``Value`` re-serialises in the order it was read.
* **Numbers**, as ``serde_json::Value`` holds them: an integer within ``i64``/``u64`` stays as
  written; ``-0`` and an integer beyond ``u64``/below ``i64`` become an ``f64``; every
  fraction/exponent is an ``f64``; an ``f64`` is written in serde_json 1.0.151's layout
  (:func:`~.canon.format_float`: ``100.0``, ``1e+16``, ``1e-7``, ``-0.0``). A number serde_json
  cannot hold (``1e400``) makes the record unreadable, as it does in 0.22.
* **Strings**: ``"`` ``\\`` and C0 controls escaped (``\\n``, ``\\u001f``), everything else raw
  UTF-8 (serde_json's escaping, which is ``json.dumps(ensure_ascii=False)``'s). A lone
  surrogate (an unpaired ``\\ud800`` escape) is refused (``ValueError``): serde_json refuses it.

What is deliberately *not* 0.22's behaviour, and only for wire bytes 0.22 never writes itself
(so every record 0.22 could have written gets 0.22's exact bytes): a member 0.22 does not
define (another kind, a 0.4-profile member) is kept, after the known ones, in wire order, where
0.22 would drop it (or refuse the record); a member its writer would skip (``"phase":"forward"``,
``null`` options, ``"permanent":false``, ``"correlation":[]``) is kept; strings are never
re-spelled (a lowercase ULID or uppercase hex stays as stored). Each keeps ``body`` equal to the
wire as a JSON value, which both verifiers demand. Structs the reference does not define
(``Label``, ``Spend``, ``PolicyBundleIdentity``, ``Principal``, ...) keep the wire's order:
unverifiable here (see docs/operations/backup.md).

Pure: no I/O.
"""

from __future__ import annotations

import json
import math
from typing import Any

from agentplane_journal.core.canon import format_float

__all__ = [
    "NESTED_MEMBERS",
    "TOP_MEMBERS",
    "VARIANT_MEMBERS",
    "body_text",
    "serde_value",
]

TOP_MEMBERS: tuple[str, ...] = ("seq", "run", "case", "step", "phase", "epoch", "v", "effect_key")
"""``RecordBody``'s members before the flattened kind, in declaration order."""

VARIANT_MEMBERS: dict[str, tuple[str, ...]] = {
    "RunAdmitted": (
        "capability",
        "governed_by",
        "input",
        "input_label",
        "policy_bundle",
        "canon",
        "idempotency_key",
    ),
    "PlanFrozen": ("steps", "plan"),
    "StepStarted": ("skill",),
    "StepFinished": ("outcome",),
    "CaseBound": ("case_kind", "opened", "correlation"),
    "DeadlineRegistered": ("name", "resolved_at", "calendar_digest"),
    "DeadlineTransition": ("name", "from", "to"),
    "RunSuspended": ("reason",),
    "Note": ("text",),
    "EffectStarted": (
        "descriptor",
        "recovery",
        "mutates",
        "attempt",
        "backoff_ms",
        "outbound_label",
    ),
    "EffectDone": ("output", "source", "spend", "declared"),
    "EffectFailed": ("error", "spend", "disposition", "permanent"),
    "BudgetRefused": ("limit", "used"),
    "BudgetReadmitted": ("limit",),
    "IdentityBound": ("chain",),
    "PolicyDenied": ("reason", "action", "resource"),
    "GroupOpened": ("group", "resources"),
    "GroupSettled": ("group", "outcome", "detail"),
    "StepCompensated": ("compensation", "outcome"),
    "EffectReconciled": ("disposition", "output", "spend", "detail", "declared"),
    "Released": (
        "releaser",
        "release",
        "label",
        "field_labels",
        "result_label",
        "result_field_labels",
        "value",
    ),
    "RunCancelled": ("actor", "reason"),
    "RunSealed": ("outcome", "reason", "chain_head"),
    "BreakGlass": ("actor", "roles", "reason"),
    "Swept": ("subject", "action", "detail"),
}
"""agentplane 0.22's ``RecordKind`` variants and their members, in declaration order."""

_AGENT_IDENTITY = ("name", "version", "digest", "publisher")
_DECLARED_OUTPUT = ("trust", "sensitivity")

NESTED_MEMBERS: dict[tuple[str, str], tuple[str, ...]] = {
    ("RunAdmitted", "governed_by"): _AGENT_IDENTITY,
    ("EffectStarted", "descriptor"): ("kind", "args"),
    # Internally tagged by `mode`: the tag first, then `Idempotent`'s `key`.
    ("EffectStarted", "recovery"): ("mode", "key"),
    ("EffectDone", "declared"): _DECLARED_OUTPUT,
    ("EffectReconciled", "declared"): _DECLARED_OUTPUT,
}
"""Typed struct members whose definition the reference holds: (kind, member) -> order."""

_BTREE_MAPS = frozenset({("Released", "field_labels"), ("Released", "result_field_labels")})

_U64_MAX = (1 << 64) - 1
_I64_MIN = -(1 << 63)


class _Num:
    """A wire number token, kept as text until it is rendered the way serde_json holds it."""

    __slots__ = ("token",)

    def __init__(self, token: str) -> None:
        self.token = token


def _as_f64(token: str) -> float:
    f = float(token)
    if math.isinf(f):
        raise ValueError(f"the number {token[:40]} is out of range for serde_json (f64)")
    return f


def _serde_number(token: str) -> int | float:
    """The number ``serde_json::Value`` holds for a JSON number token: ``int`` for what it
    keeps as ``u64``/``i64``, ``float`` for what it keeps as ``f64``."""
    if "." in token or "e" in token or "E" in token:
        return _as_f64(token)
    v = int(token)
    if token.startswith("-"):
        # serde_json parses `-0` as f64 -0.0, and what underflows i64 as f64.
        return -0.0 if v == 0 else (v if v >= _I64_MIN else _as_f64(token))
    return v if v <= _U64_MAX else _as_f64(token)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def serde_value(text: str | bytes) -> Any:
    """``text`` parsed with serde_json's number semantics (see :func:`_serde_number`): what
    the reference compares when it holds a ``body`` to its wire bytes as ``Value``\\ s."""
    return json.loads(
        text,
        parse_int=_serde_number,
        parse_float=_as_f64,
        parse_constant=_refuse_constant,
    )


def _tokens(text: str) -> Any:
    return json.loads(text, parse_int=_Num, parse_float=_Num, parse_constant=_refuse_constant)


def _dump_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _write(value: Any, out: list[str], order: tuple[str, ...] | None = None) -> None:
    if isinstance(value, _Num):
        n = _serde_number(value.token)
        out.append(format_float(n) if isinstance(n, float) else str(n))
    elif isinstance(value, str):
        out.append(_dump_str(value))
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif value is None:
        out.append("null")
    elif isinstance(value, list):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        keys = list(value) if order is None else _ordered(value, order)
        _object(value, keys, out)


def _ordered(obj: dict[str, Any], order: tuple[str, ...]) -> list[str]:
    """``order``'s members present in ``obj``, then the rest in wire order."""
    known = [k for k in order if k in obj]
    return known + [k for k in obj if k not in order]


def _object(obj: dict[str, Any], keys: list[str], out: list[str], kind: str | None = None) -> None:
    out.append("{")
    for i, key in enumerate(keys):
        if i:
            out.append(",")
        out.append(_dump_str(key))
        out.append(":")
        value = obj[key]
        if kind is not None and isinstance(value, dict):
            if (kind, key) in _BTREE_MAPS:
                _object(value, sorted(value), out)
                continue
            _write(value, out, NESTED_MEMBERS.get((kind, key)))
        else:
            _write(value, out)
    out.append("}")


def body_text(raw: str) -> str:
    """The ``body`` agentplane 0.22 writes for a record whose wire bytes are ``raw``.

    ``ValueError`` when ``raw`` is not a JSON object or holds what serde_json cannot (a number
    out of ``f64`` range, a lone surrogate): 0.22 files such a run as unreadable.
    """
    wire = _tokens(raw)
    if not isinstance(wire, dict):
        raise ValueError("the wire bytes are not a JSON object")
    kind = wire.get("kind")
    variant = VARIANT_MEMBERS.get(kind, ()) if isinstance(kind, str) else ()
    order = (*TOP_MEMBERS, "kind", *variant)
    out: list[str] = []
    _object(wire, _ordered(wire, order), out, kind if isinstance(kind, str) else None)
    text = "".join(out)
    text.encode("utf-8")  # a lone surrogate: UnicodeEncodeError, a ValueError
    return text
