"""Canon v1: RFC 8785 (JCS) canonical JSON, the bytes agentplane 0.22 hashes.

agentplane 0.22.0 journals ``canon: 1`` in every ``RunAdmitted`` and writes every record,
and every effect key's arguments, with this rule. It differs from :mod:`.canon` (the
agentplane 0.4.0 rule, kept byte for byte for that profile) only in how a *float* is
written: ECMAScript's ``Number.prototype.toString`` (RFC 8785 §3.2.2.3) instead of
serde_json's layout::

    value     canon (0.4)   canon v1 (0.22)
    1e16      1e+16         10000000000000000
    100.0     100.0         100
    -0.0      -0.0          0
    1e21      1e+21         1e+21
    1e30      1e+30         1e+30
    1e-7      1e-7          1e-7
    1e-6      0.000001      0.000001

Everything else is the same rule: no whitespace, keys sorted by UTF-16 code unit, serde_json's
string escapes (which are RFC 8785's: ``"`` ``\\`` the five short forms, other C0 as
``\\u00xx``, everything else raw UTF-8), lone surrogates and NaN/infinity refused, at most
:data:`~.canon.MAX_DEPTH` levels.

**Integers stay exact** — a deliberate departure from JCS, which reads every number as an
IEEE-754 double: two distinct integers above 2^53 would collapse into one byte string and two
different effects would share one key. Inside ±2^53 the exact and the double forms agree, so
nothing interoperable is lost; outside it, integers are written exactly (as agentplane does)
and must fit i64..u64 (serde_json cannot hold anything wider). A Python ``float`` is always a
double and always takes the ECMAScript form: ``100.0`` is ``100``, ``1e16`` is
``10000000000000000``.

Checked against an implementation we did not write (the ``rfc8785`` package) in
``tests/test_canon_v1.py``. Pure: no I/O.
"""

from __future__ import annotations

import math
import sys
from json.encoder import encode_basestring
from typing import Any, cast

# What RFC 8785 and 0.4's canon agree on is canon.py's, used as it is: key order, lone
# surrogates, depth, the refusal that carries a path, and json's C encoder for plain values.
from agentplane_journal.core.canon import (  # noqa: F401 - shared, module-private helpers
    MAX_DEPTH,
    _c_encode,
    _find_surrogate,
    _has_surrogate,
    _Refusal,
    _sorted_keys,
    _too_deep,
)

__all__ = ["CANON_VERSION", "canonical_bytes_v1", "es_number"]

CANON_VERSION = 1
"""agentplane 0.22.0's ``canon::VERSION``: what ``RunAdmitted.canon`` says under this rule."""

_I64_MIN = -(2**63)
_U64_MAX = 2**64 - 1
_FLOAT_MAX = sys.float_info.max

# json's escaper for ensure_ascii=False: exactly serde_json's (and RFC 8785's) escapes.
_encode_str = encode_basestring


def canonical_bytes_v1(value: object, *, path: str = "value") -> bytes:
    """The RFC 8785 canonical JSON of ``value`` (integers exact) as UTF-8 bytes.

    Refusals are ``ValueError``/``TypeError`` naming the offending path, as
    :func:`~.canon.canonical_bytes`'s are.
    """
    if _c_encode is not None and _plain(value, 1):
        try:
            return "".join(_c_encode(value, 0)).encode("utf-8")
        except UnicodeEncodeError:
            pass  # a lone surrogate: the general encoder names where it is
    out: list[str] = []
    try:
        _write(value, out, 1)
    except _Refusal as refusal:
        where = path + "".join(reversed(refusal.segments))
        raise refusal.error(f"{where}: {refusal.detail}") from None
    text = "".join(out)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"{_find_surrogate(value, path) or path}: string contains a lone surrogate, "
            "which is not valid Unicode and cannot be written as UTF-8"
        ) from None


def _plain(value: object, depth: int) -> bool:
    """Whether json's C encoder writes ``value`` exactly as :func:`_write` would.

    As in canon.py (exact dicts with str keys below U+D800, lists, tuples, str, bool, None,
    i64..u64 ints, at most MAX_DEPTH deep), except floats: the C encoder writes
    ``float.__repr__``, which is the ECMAScript form only for a non-integral float with
    1e-4 <= |x| < 1e16 (repr's plain-decimal range, inside ECMAScript's; an integral one
    would come out as ``100.0``).
    """
    if depth > MAX_DEPTH:
        return False
    t = type(value)
    if t is dict:
        mapping = cast("dict[Any, object]", value)
        try:
            joined = "".join(mapping)
        except TypeError:
            return False
        if not joined.isascii() and max(joined) >= "\ud800":
            return False
        items: Any = mapping.values()
    elif t is list or t is tuple:
        items = value
    else:
        return False
    depth += 1
    for item in items:
        t = type(item)
        if t is str or item is None or t is bool:
            continue
        if t is int:
            if _I64_MIN <= item <= _U64_MAX:
                continue
            return False
        if t is dict or t is list or t is tuple:
            if _plain(item, depth):
                continue
            return False
        if t is float and 1e-4 <= abs(item) < 1e16 and not item.is_integer():
            continue
        return False
    return True


def es_number(x: float) -> str:
    """``x`` as ECMAScript's ``Number.prototype.toString(10)`` writes it (RFC 8785 §3.2.2.3).

    The digits are Python's shortest round-trip ones (``repr``), which are ECMAScript's (the
    shortest that round-trip, the closest to the value among them); only their placement is
    done here. With ``k`` digits and the point after position ``n`` (value = 0.d * 10^n):
    digits then zeros when k <= n <= 21; the point inside the digits when 0 < n <= 21;
    ``0.`` and -n zeros when -6 < n <= 0; otherwise ``d[.ddd]e±(n-1)``. ``-0.0`` is ``0``.
    """
    if x == 0.0:
        return "0"
    if not math.isfinite(x):
        if math.isnan(x):
            raise ValueError("NaN is not JSON; canonical JSON has no NaN or infinity")
        sign = "-" if x < 0 else ""
        raise ValueError(f"{sign}Infinity is not JSON; canonical JSON has no NaN or infinity")
    sign = "-" if x < 0 else ""
    mantissa, _, exponent = float.__repr__(abs(x)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    raw = whole + fraction
    digits = raw.lstrip("0")
    n = len(whole) + (int(exponent) if exponent else 0) - (len(raw) - len(digits))
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    e = n - 1
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{sign}{head}e{'-' if e < 0 else '+'}{abs(e)}"


def _scalar(value: Any) -> str:
    """The JSON text of a scalar (subclasses as their base type), or a refusal."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _encode_str(value)
    if isinstance(value, int):
        if _I64_MIN <= value <= _U64_MAX:
            return int.__repr__(value)
        raise _Refusal(
            ValueError,
            f"integer {value} does not fit a 64-bit integer ({_I64_MIN}..{_U64_MAX}); "
            "write it as a string",
        )
    if isinstance(value, float):
        try:
            return es_number(float(value))
        except ValueError as exc:
            raise _Refusal(ValueError, str(exc)) from None
    raise _Refusal(
        TypeError,
        f"{type(value).__name__} is not JSON; use dict, list, tuple, str, int, float, bool or None",
    )


def _write(value: object, out: list[str], depth: int) -> None:
    if isinstance(value, dict):
        if depth > MAX_DEPTH:
            raise _too_deep()
        obj: dict[Any, Any] = value
        sep = "{"
        for key in _sorted_keys(obj):
            out.append(sep + _encode_str(key) + ":")
            try:
                _write(obj[key], out, depth + 1)
            except _Refusal as refusal:
                refusal.segments.append("." + key)
                raise
            sep = ","
        out.append("{}" if sep == "{" else "}")
    elif isinstance(value, list | tuple):
        if depth > MAX_DEPTH:
            raise _too_deep()
        sep = "["
        for index, item in enumerate(value):
            out.append(sep)
            try:
                _write(item, out, depth + 1)
            except _Refusal as refusal:
                refusal.segments.append(f"[{index}]")
                raise
            sep = ","
        out.append("[]" if sep == "[" else "]")
    else:
        out.append(_scalar(value))
