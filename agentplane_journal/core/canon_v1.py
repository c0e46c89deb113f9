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

**Exact ties follow agentplane, not the standard** — the one other departure: on a double
exactly halfway between two shortest digit strings, agentplane (Rust's ``{:e}``) writes the
upper one where RFC 8785 writes the even one (``2**-25``: ``2.9802322387695313e-8``, not
``…312e-8``; :func:`agentplane_number`). Bytes and effect keys must agree with a Rust runtime
sharing the journal. :func:`canonical_bytes_rfc8785` is the standard, ties included.

Checked against an implementation we did not write (the ``rfc8785`` package) in
``tests/test_canon_v1.py``, and against agentplane's own ``canon`` (when ``../shared`` is
present) in ``tests/test_interop22.py``. Pure: no I/O.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
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

__all__ = [
    "CANON_VERSION",
    "agentplane_number",
    "canonical_bytes_rfc8785",
    "canonical_bytes_v1",
    "es_number",
]

CANON_VERSION = 1
"""agentplane 0.22.0's ``canon::VERSION``: what ``RunAdmitted.canon`` says under this rule."""

_I64_MIN = -(2**63)
_U64_MAX = 2**64 - 1
_FLOAT_MAX = sys.float_info.max

# json's escaper for ensure_ascii=False: exactly serde_json's (and RFC 8785's) escapes.
_encode_str = encode_basestring


def canonical_bytes_v1(value: object, *, path: str = "value") -> bytes:
    """agentplane 0.22's canon v1 of ``value`` as UTF-8 bytes: RFC 8785 (integers exact),
    with agentplane's digits on an exact tie (:func:`agentplane_number`).

    Refusals are ``ValueError``/``TypeError`` naming the offending path, as
    :func:`~.canon.canonical_bytes`'s are.
    """
    return _canonical(value, path, agentplane_number)


def canonical_bytes_rfc8785(value: object, *, path: str = "value") -> bytes:
    """Plain RFC 8785 (integers exact): :func:`canonical_bytes_v1` with the standard's digits
    on an exact tie (the even one, :func:`es_number`), for whoever wants the standard rather
    than agentplane's bytes (a JCS signature checked by other software)."""
    return _canonical(value, path, es_number)


def _canonical(value: object, path: str, number: Callable[[float], str]) -> bytes:
    if _c_encode is not None and _plain(value, 1):
        try:
            return "".join(_c_encode(value, 0)).encode("utf-8")
        except UnicodeEncodeError:
            pass  # a lone surrogate: the general encoder names where it is
    out: list[str] = []
    try:
        _write(value, out, 1, number)
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
    would come out as ``100.0``) that is not an exact tie (where the rules differ).
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
            if _tie_upper(abs(item), *_shortest(abs(item))) is None:
                continue  # (an exact tie is written differently by the two rules)
        return False
    return True


def es_number(x: float) -> str:
    """``x`` as ECMAScript's ``Number.prototype.toString(10)`` writes it (RFC 8785 §3.2.2.3).

    The digits are Python's shortest round-trip ones (``repr``), which are ECMAScript's (the
    shortest that round-trip, the closest to the value among them, the even one on an exact
    tie); only their placement is done here. With ``k`` digits and the point after position
    ``n`` (value = 0.d * 10^n): digits then zeros when k <= n <= 21; the point inside the
    digits when 0 < n <= 21; ``0.`` and -n zeros when -6 < n <= 0; otherwise
    ``d[.ddd]e±(n-1)``. ``-0.0`` is ``0``.

    This is the standard's rule; agentplane 0.22's differs on exact ties
    (:func:`agentplane_number`), and canon v1 follows agentplane.
    """
    if x == 0.0:
        return "0"
    _check_finite(x)
    digits, n = _shortest(abs(x))
    return _place("-" if x < 0 else "", digits, n)


def agentplane_number(x: float) -> str:
    """``x`` as agentplane 0.22's ``canon::es_number`` writes it: :func:`es_number`, except
    that on an exact tie between two shortest digit strings it takes the upper one.

    agentplane takes its digits from Rust's ``format!("{:e}")``, whose shortest-digits
    algorithm (Grisu, falling back to Dragon4 when Grisu cannot decide, which an exact tie
    is) rounds a remainder of exactly one half *up*; ECMAScript, RFC 8785 and Python round it
    to the even digit. The two differ only for a double whose exact binary value lies
    exactly halfway between two shortest decimal strings that both round-trip, e.g.::

        2**-25 = 2.98023223876953125e-8   RFC 8785: 2.9802322387695312e-8
                                           agentplane: 2.9802322387695313e-8
        1973340522371668.25               RFC 8785: 1973340522371668.2
                                           agentplane: 1973340522371668.3

    (about 1 double in 3,000 of a fuzzed set; magnitude decides, the sign is written
    separately). A journal shared with a Rust runtime must hash the same bytes, and derive
    the same effect keys, for the same arguments, so canon v1 uses this.
    """
    if x == 0.0:
        return "0"
    _check_finite(x)
    magnitude = abs(x)
    digits, n = _shortest(magnitude)
    upper = _tie_upper(magnitude, digits, n)
    if upper is not None:
        digits, n = upper
    return _place("-" if x < 0 else "", digits, n)


def _check_finite(x: float) -> None:
    if not math.isfinite(x):
        if math.isnan(x):
            raise ValueError("NaN is not JSON; canonical JSON has no NaN or infinity")
        sign = "-" if x < 0 else ""
        raise ValueError(f"{sign}Infinity is not JSON; canonical JSON has no NaN or infinity")


def _shortest(magnitude: float) -> tuple[str, int]:
    """Python's shortest round-trip digits of a positive finite double, and the point
    position ``n`` (value = 0.digits * 10^n)."""
    mantissa, _, exponent = float.__repr__(magnitude).partition("e")
    whole, _, fraction = mantissa.partition(".")
    raw = whole + fraction
    digits = raw.lstrip("0")
    n = len(whole) + (int(exponent) if exponent else 0) - (len(raw) - len(digits))
    return digits.rstrip("0"), n


_MIN_NORMAL = sys.float_info.min


def _tie_upper(magnitude: float, digits: str, n: int) -> tuple[str, int] | None:
    """The upper digit string when ``magnitude`` lies exactly halfway between ``digits``
    (Python's, the even one) and the next ``len(digits)``-digit string up, and that one also
    round-trips; ``None`` otherwise (no tie, or Python's choice already the upper).

    Cheap for almost every double: two shortest candidates both inside the rounding interval
    (at most one ulp, under 2^-52 of the value) must be closer than that, so a tie needs at
    least 16 digits unless the double is subnormal (a fixed ulp of 2^-1074). Only those are
    checked, exactly, in integers.
    """
    k = len(digits)
    if k < 16 and magnitude >= _MIN_NORMAL:
        return None
    d = int(digits)
    q = n - k  # value of the digits = d * 10^q
    num, den = magnitude.as_integer_ratio()
    # magnitude == (2d + 1) * 10^q / 2, in integers (den is a power of two)
    if q >= 0:
        tie = 2 * num == (2 * d + 1) * 10**q * den
    else:
        tie = 2 * num * 10**-q == (2 * d + 1) * den
    if not tie or float(f"{d + 1}e{q}") != magnitude:
        return None
    upper = str(d + 1)
    n += len(upper) - k  # a carry (…9 + 1) lengthens it
    return upper.rstrip("0"), n


def _place(sign: str, digits: str, n: int) -> str:
    """ECMAScript's placement of ``digits`` with the point after position ``n``."""
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


def _scalar(value: Any, number: Callable[[float], str]) -> str:
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
            return number(float(value))
        except ValueError as exc:
            raise _Refusal(ValueError, str(exc)) from None
    raise _Refusal(
        TypeError,
        f"{type(value).__name__} is not JSON; use dict, list, tuple, str, int, float, bool or None",
    )


def _write(value: object, out: list[str], depth: int, number: Callable[[float], str]) -> None:
    if isinstance(value, dict):
        if depth > MAX_DEPTH:
            raise _too_deep()
        obj: dict[Any, Any] = value
        sep = "{"
        for key in _sorted_keys(obj):
            out.append(sep + _encode_str(key) + ":")
            try:
                _write(obj[key], out, depth + 1, number)
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
                _write(item, out, depth + 1, number)
            except _Refusal as refusal:
                refusal.segments.append(f"[{index}]")
                raise
            sep = ","
        out.append("[]" if sep == "[" else "]")
    else:
        out.append(_scalar(value, number))
