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
import re
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any

from agentplane_journal.core import jsonload
from agentplane_journal.core.canon import format_float

__all__ = [
    "NESTED_MEMBERS",
    "TOP_MEMBERS",
    "VARIANT_MEMBERS",
    "body_text",
    "same_value",
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

Shape = tuple[tuple[str, ...], dict[str, Any]]
"""A struct's members in declaration order, and the shapes of its struct-valued members
(a ``("map", shape)`` member is a ``BTreeMap<String, struct>``: keys sorted, values shaped;
a ``("list", shape)`` member a sequence of such structs)."""

_RELEASE_SCOPE: Shape = (("trust", "sensitivity"), {})
_RELEASE_MARK: Shape = (("destination", "field", "scope", "basis"), {"scope": _RELEASE_SCOPE})
_LABEL: Shape = (
    ("provenance", "trust", "sensitivity", "releases"),
    {"releases": ("list", _RELEASE_MARK)},
)
_SPEND: Shape = (("tokens", "minor_units"), {})
_CORRELATION_KEY: Shape = (("namespace", "value"), {})
_POLICY_BUNDLE: Shape = (("rules", "schema", "entities", "configuration", "evaluator"), {})
# Internally tagged by `reason`: the tag first, then AwaitingEvent's or AwaitingTime's members.
_SUSPEND_REASON: Shape = (
    ("reason", "kind", "correlation", "until"),
    {"correlation": ("list", _CORRELATION_KEY)},
)
_RELEASE: Shape = (
    ("scope", "basis", "destination", "fields", "evidence"),
    {"scope": _RELEASE_SCOPE},
)

NESTED_MEMBERS: dict[tuple[str, str], Any] = {
    ("RunAdmitted", "governed_by"): (_AGENT_IDENTITY, {}),
    ("RunAdmitted", "input_label"): _LABEL,
    ("RunAdmitted", "policy_bundle"): _POLICY_BUNDLE,
    ("CaseBound", "correlation"): ("list", _CORRELATION_KEY),
    ("RunSuspended", "reason"): _SUSPEND_REASON,
    ("EffectStarted", "descriptor"): (("kind", "args"), {}),
    # Internally tagged by `mode`: the tag first, then `Idempotent`'s `key`.
    ("EffectStarted", "recovery"): (("mode", "key"), {}),
    ("EffectStarted", "outbound_label"): _LABEL,
    ("EffectDone", "spend"): _SPEND,
    ("EffectDone", "declared"): (_DECLARED_OUTPUT, {}),
    ("EffectFailed", "spend"): _SPEND,
    ("EffectReconciled", "spend"): _SPEND,
    ("EffectReconciled", "declared"): (_DECLARED_OUTPUT, {}),
    ("Released", "release"): _RELEASE,
    ("Released", "label"): _LABEL,
    ("Released", "field_labels"): ("map", _LABEL),
    ("Released", "result_label"): _LABEL,
    ("Released", "result_field_labels"): ("map", _LABEL),
}
"""Typed members of agentplane's structs, (kind, member) -> their :data:`Shape`, so that
``body`` holds them in declaration order as agentplane's writer does (members a struct does
not declare stay after the declared ones, in wire order)."""

_U64_MAX = (1 << 64) - 1
_I64_MIN = -(1 << 63)


def _as_f64(token: str) -> float:
    f = float(token)
    if math.isinf(f):
        raise ValueError(f"the number {token[:40]} is out of range for serde_json (f64)")
    return f


def _serde_number(token: str) -> int | float:
    """The number ``serde_json::Value`` holds for an integer token: ``int`` for what it keeps
    as ``u64``/``i64``, ``float`` for what it keeps as ``f64`` (``-0``, and beyond them)."""
    v = int(token)
    if token.startswith("-"):
        return -0.0 if v == 0 else (v if v >= _I64_MIN else _as_f64(token))
    return v if v <= _U64_MAX else _as_f64(token)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_SERDE = json.JSONDecoder(
    parse_int=_serde_number, parse_float=_as_f64, parse_constant=_refuse_constant
)
"""serde_json's reading, built once (``json.loads`` with arguments builds a decoder and its
scanner per call, which cost more than the parse of a small record)."""


def serde_value(text: str | bytes) -> Any:
    """``text`` parsed with serde_json's number semantics (an integer token beyond
    ``u64``/below ``i64``, and ``-0``, is a ``float``; a number out of ``f64`` range is a
    ``ValueError``): what the reference compares a ``body`` with its wire bytes as."""
    if isinstance(text, str):
        return jsonload.decode(_SERDE, text)
    return jsonload.loads(
        text, parse_int=_serde_number, parse_float=_as_f64, parse_constant=_refuse_constant
    )


def _ordered(obj: dict[str, Any], order: tuple[str, ...]) -> dict[str, Any]:
    """``obj`` with ``order``'s members first, in that order, then the rest in wire order."""
    out = {k: obj[k] for k in order if k in obj}
    if len(out) != len(obj):
        out.update((k, v) for k, v in obj.items() if k not in out)
    return out


def _shaped(value: Any, shape: Any) -> Any:
    """``value`` with every struct in it in declaration order (anything not shaped as
    expected is left as it is: ``body`` must still equal the wire)."""
    if shape[0] == "map":
        if not isinstance(value, dict):
            return value
        # a BTreeMap: keys in code point order (= UTF-8 byte order)
        return {k: _shaped(value[k], shape[1]) for k in sorted(value)}
    if shape[0] == "list":
        if not isinstance(value, list):
            return value
        return [_shaped(item, shape[1]) for item in value]
    if not isinstance(value, dict):
        return value
    order, members = shape
    out = _ordered(value, order)
    for key, inner in members.items():
        if key in out:
            out[key] = _shaped(out[key], inner)
    return out


def _plan(kind: str) -> tuple[tuple[str, ...], tuple[tuple[str, Any], ...]]:
    """A kind's member order and its shaped members, looked up once per kind."""
    plan = _PLANS.get(kind)
    if plan is None:
        plan = (
            (*TOP_MEMBERS, "kind", *VARIANT_MEMBERS.get(kind, ())),
            tuple((key, shape) for (k, key), shape in NESTED_MEMBERS.items() if k == kind),
        )
        if len(_PLANS) < _MAX_PLANS:  # a hostile file's invented kinds do not grow it
            _PLANS[kind] = plan
    return plan


_PLANS: dict[str, tuple[tuple[str, ...], tuple[tuple[str, Any], ...]]] = {}
_MAX_PLANS = 256


def _reordered(wire: dict[str, Any]) -> dict[str, Any]:
    kind = wire.get("kind")
    if type(kind) is not str:
        return _ordered(wire, TOP_MEMBERS) if not isinstance(kind, str) else _by_plan(wire, kind)
    # A body's members, as the wire holds them, and its kind name its order exactly: the
    # members it holds, in declaration order, then the rest in wire order. Looked up once
    # per such shape (a journal holds a handful), so a body is built by one comprehension
    # over its own members, with no test of the members it lacks.
    shape = (kind, *wire)
    exact = _EXACT.get(shape)
    if exact is None:
        return _by_plan(wire, kind, shape)
    order, shaped = exact
    body = {key: wire[key] for key in order}
    for key, inner in shaped:
        body[key] = _shaped(body[key], inner)
    return body


def _by_plan(
    wire: dict[str, Any], kind: str, shape: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """:func:`_reordered` from the kind's plan; ``shape`` (the kind and the wire's members):
    the order found is kept for the next body of that shape (up to :data:`_MAX_PLANS`)."""
    order, shaped = _plan(kind)
    body = _ordered(wire, order)
    present = tuple((key, inner) for key, inner in shaped if key in body)
    for key, inner in present:
        body[key] = _shaped(body[key], inner)
    if shape is not None and len(_EXACT) < _MAX_PLANS:
        _EXACT[shape] = (tuple(body), present)
    return body


_EXACT: dict[tuple[str, ...], tuple[tuple[str, ...], tuple[tuple[str, Any], ...]]] = {}
"""``(kind, *wire members)`` -> the members in ``body``'s order and the shaped ones among
them (bounded, as :data:`_PLANS` is: a hostile journal's shapes do not grow it)."""


def _write(value: Any, out: list[str]) -> None:
    """serde_json's writer, for the exact path: floats in its layout (:func:`format_float`)."""
    if isinstance(value, dict):
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            out.append(',"' if i else '"')
            out.append(json.dumps(key, ensure_ascii=False)[1:])
            out.append(":")
            _write(item, out)
        out.append("}")
    elif isinstance(value, list):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    elif type(value) is float:
        out.append(format_float(value))
    else:
        out.append(json.dumps(value, ensure_ascii=False))


_BODY_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
"""serde_json's compact writer for the common body (built once, not per call)."""


def _no_default(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _compact_writer() -> Callable[[Any], str]:
    """:data:`_BODY_ENCODER`'s ``encode``, or the same C writer built once: ``encode`` builds
    its C encoder on every call (a third of writing a small body). Built without a circular
    check, which no parsed value needs (it holds no cycle, and its depth is bounded by the
    read's checks); used only where it writes what ``encode`` writes for a probe of every
    kind of value."""
    c_make_encoder = getattr(json.encoder, "c_make_encoder", None)  # not in typeshed
    if c_make_encoder is None:  # CPython has it; another Python may not
        return _BODY_ENCODER.encode
    once = c_make_encoder(None, _no_default, encode_basestring, None, ":", ",", False, False, False)

    def write(value: Any) -> str:
        return "".join(once(value, 0))  # it returns the chunks, as encode joins them

    probe = {"a": [1, 1.5, 1e16, -0.0, True, None, 'é\n\u001f"\\'], "b": {"c": {}}, "d": []}
    return write if write(probe) == _BODY_ENCODER.encode(probe) else _BODY_ENCODER.encode


_compact = _compact_writer()


def _maybe_small(raw: str) -> bool:
    """Whether ``raw`` may hold a non-zero number below ``1e-4`` in magnitude: written with a
    negative exponent, or with at least four zeros after the point (conservative)."""
    return "e-" in raw or "E-" in raw or "0.0000" in raw


#: A ``-`` that can belong to a number in JSON text: a sign, which follows ``:``, ``,``, ``[``
#: or JSON whitespace (a value's start), or an exponent's, which follows a digit's ``e``/``E``
#: (``-?(0|[1-9][0-9]*)(\.[0-9]+)?[eE]-``: the digit follows a digit, ``.``, ``-`` or a
#: value's start, never a letter or ``_``). Any other ``-`` is inside a string, where it
#: changes no number: a date, a UUID's ``8a1e-`` (most real records hold one). Conservative:
#: a string's ``a,-b``, `` -`` or ``"12e-5"`` match too, and only cost the exact path. The
#: pattern starts with its literal ``-`` so that ``re`` scans for it at C speed (about 1 ns
#: a character; a leading character class scans at 8).
_NUMBER_MINUS = re.compile(r"-(?:(?<=[:,\[\s]-)|(?<=[0-9][eE]-)(?<![A-Za-z_][0-9][eE]-))")


def body_text(raw: str, parsed: dict[str, Any] | None = None) -> str:
    """The ``body`` agentplane 0.22 writes for a record whose wire bytes are ``raw``.

    ``parsed``: ``raw`` as ``json.loads`` parses it, given by a caller that knows ``raw`` holds
    no run of 20 digits (``record_line`` for a read record's body): used instead of parsing
    ``raw`` again when serde_json would hold the same values (no ``-`` of a number in
    ``raw``, so no ``-0`` and no integer below ``i64``; no float the C writer writes
    otherwise); anything else is parsed here, as without it.

    ``ValueError`` when ``raw`` is not a JSON object or holds what serde_json cannot (a number
    out of ``f64`` range, a lone surrogate): 0.22 files such a run as unreadable.
    """
    # (With no `-` of a number, only "0.0000" can write a number below 1e-4: the other two
    # forms `_maybe_small` looks for are a number's `e-`.)
    if (
        type(parsed) is dict
        and "0.0000" not in raw
        and ("-" not in raw or _NUMBER_MINUS.search(raw) is None)
    ):
        try:
            text = _compact(_reordered(parsed))
        except ValueError:  # an infinity (1e400): the exact path below names it
            pass
        else:
            text.encode("utf-8")  # a lone surrogate: UnicodeEncodeError, a ValueError
            return text
    # Integers are parsed as serde_json holds them (beyond 64 bits, and `-0`, an f64);
    # json's C encoder then writes every value as serde_json does, except a float below
    # 1e-4, which repr writes `1e-05` where serde_json writes `0.00001` (and `1e-07` for
    # `1e-7`): only a record holding one takes the slower, exact writer.
    small: list[float] = []

    def f64(token: str) -> float:
        x = _as_f64(token)
        if x and -1e-4 < x < 1e-4:
            small.append(x)
        return x

    if not _maybe_small(raw):
        # The common record: no float the C writer would write otherwise, so the decoder
        # built once reads it (the closure below needs a decoder per call).
        wire = jsonload.decode(_SERDE, raw)
    else:
        wire = jsonload.loads(
            raw, parse_int=_serde_number, parse_float=f64, parse_constant=_refuse_constant
        )
    if not isinstance(wire, dict):
        raise ValueError("the wire bytes are not a JSON object")
    body = _reordered(wire)
    if small:
        out: list[str] = []
        _write(body, out)
        text = "".join(out)
    else:
        text = _compact(body)
    text.encode("utf-8")  # a lone surrogate: UnicodeEncodeError, a ValueError
    return text


def same_value(a: object, b: object) -> bool:
    """JSON values equal as serde_json's ``Value`` compares them: ints and floats differ,
    and an integer beyond ``u64``/below ``i64`` is the ``f64`` serde_json parses it as (``b``
    comes from :func:`serde_value`, ``a`` from ``json.loads``)."""
    # Written as loops (no generators): this runs over every value of every record.
    if type(a) is str:  # the commonest leaf first
        return type(b) is str and a == b
    if isinstance(a, dict):
        if not isinstance(b, dict) or a.keys() != b.keys():
            return False
        for k, v in a.items():
            if not same_value(v, b[k]):
                return False
        return True
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return False
        for x, y in zip(a, b, strict=True):
            if not same_value(x, y):
                return False
        return True
    if type(a) is int and not _I64_MIN <= a <= _U64_MAX:
        try:
            a = float(a)
        except OverflowError:
            return False
    return type(a) is type(b) and a == b
