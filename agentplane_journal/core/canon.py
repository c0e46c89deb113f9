"""Canonical JSON: the bytes a record's hash and signature commit to.

The store keeps these bytes verbatim and verification never re-serialises, so this module
only has to agree with agentplane 0.4.0 (Rust, serde_json 1.0.151) at write time — but it must agree
byte for byte, forever: a different key order, escape or float layout is a different hash,
and a journal written that way never verifies under agentplane. The rules (wire-format.md):

* no whitespace; arrays keep their order; object keys sorted by UTF-16 code unit;
* strings escape ``"`` ``\\`` and ``\\b \\f \\n \\r \\t``, other C0 controls as ``\\u00xx``,
  everything else (DEL, U+2028, non-ASCII) as raw UTF-8; lone surrogates are refused;
* integers must fit i64 or u64 (serde_json would silently turn anything wider into a float);
* floats use the shortest round-trip digits in serde_json 1.0.151's layout (``1e+16``,
  ``1e-7``, ``-0.0``); releases before it (ryu) wrote ``1e16``, and records stored that way
  still verify because stored bytes are verified as stored.

Refusals are ``ValueError`` / ``TypeError`` naming the offending path (``payload.items[3]``)
so a caller can find the bad field in a large payload.

This is on the append hot path. The common value (exact dicts with str keys below U+D800,
lists, tuples, str, int within 64 bits, bool, None, floats repr writes without a negative
exponent, at most 127 levels deep) is checked by one walk and written by json's C encoder,
whose text for exactly such values is this module's (see :func:`_plain`); anything else,
and every refusal, goes through the general encoder: one pass, appending string parts to a
list joined once, with the exact-type checks first and the path only assembled when
something is refused.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any, cast

__all__ = ["MAX_DEPTH", "canonical_bytes", "canonical_of_sorted", "format_float"]

MAX_DEPTH = 127
"""Deepest container nesting accepted (the root counts as 1).

serde_json, which agentplane reads records with, refuses input nested deeper than this
(its default recursion limit of 128); a record it cannot decode is one we must not write.
The limit also turns a self-referencing dict into a clear error instead of a crash."""

_I64_MIN = -(2**63)
_U64_MAX = 2**64 - 1

# encode_basestring is json's C-accelerated escaper for ensure_ascii=False. Its escapes are
# exactly serde_json's: `"` and `\`, the five short forms, other C0 as \u00xx in lower-case
# hex, and nothing else (DEL, U+2028/2029 and non-ASCII stay raw). Pinned by known-answer
# tests, so a change in a future Python would be caught.
_encode_str = encode_basestring

_FLOAT_MAX = sys.float_info.max


def _unexpected(value: object) -> object:
    # Never called for a value _plain accepted; kept so that a gap in _plain fails loudly.
    raise TypeError(f"{type(value).__name__} reached the C encoder")


# json's C encoder, configured as canonical JSON's rules say: no whitespace, keys sorted
# (by code point: _plain only lets through keys below U+D800, where that is UTF-16 order),
# strings through the same escaper as the general encoder, NaN refused. Without _json (not
# CPython), every value takes the general encoder.
# (json.encoder takes make_encoder from _json the same way, as its c_make_encoder.)
_c_encode: Callable[[object, int], Any] | None
try:
    from _json import make_encoder
except ImportError:
    _c_encode = None
else:
    _c_encode = make_encoder(None, _unexpected, _encode_str, None, ":", ",", True, False, False)


def _sorted_chunks_slow(value: object, _level: int) -> tuple[str]:
    return (
        json.dumps(
            value, ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
        ),
    )


sorted_chunks: Callable[[object, int], Any] = (
    _c_encode if _c_encode is not None else _sorted_chunks_slow
)
"""``sorted_chunks(value, 0)``: the pieces of ``json.dumps(value, ensure_ascii=False,
separators=(",", ":"), sort_keys=True, allow_nan=False)``, by the C encoder above, built once
(without canonical JSON's own checks: for writing a parsed value back, as verify-export's
body-vs-wire shortcut does). ``"".join`` them."""


class _Refusal(Exception):
    """Internal: carries a refusal up the recursion, collecting the path on the way."""

    def __init__(self, error: type[Exception], detail: str) -> None:
        super().__init__(detail)
        self.error = error
        self.detail = detail
        self.segments: list[str] = []


def canonical_bytes(value: object, *, path: str = "value") -> bytes:
    """The canonical JSON of ``value`` as UTF-8 bytes.

    ``path`` names the root in error messages, so the store can say ``payload.x`` or
    ``body.x`` rather than ``value.x``.
    """
    if _c_encode is not None and _plain(value, 1):
        try:
            return "".join(_c_encode(value, 0)).encode("utf-8")
        except UnicodeEncodeError:
            pass  # a lone surrogate: the general encoder names where it is
    return _general_bytes(value, path)


def canonical_of_sorted(value: object, text: str) -> bytes | None:
    """:func:`canonical_bytes` of ``value``, given ``text``, the joined :data:`sorted_chunks`
    of that same ``value`` already written by the caller (verify-export compares it with a
    record's wire bytes); ``None`` where that text is not shown to be the canonical one
    (then call :func:`canonical_bytes`, whose answer or refusal is the only one).

    The text is reused exactly where :func:`canonical_bytes` would take its own fast path:
    the C encoder is :data:`sorted_chunks`, ``value`` passes :func:`_plain`, and the text
    encodes as UTF-8 (no lone surrogate). There :func:`canonical_bytes` writes the same
    pieces of the same value and returns those bytes; a caller that passes a text written
    from anything but ``value`` gets that text's bytes back, so it must hold the two
    together (restore holds the verifier's own ``(body, text)``, by identity)."""
    if _c_encode is None or not _plain(value, 1):
        return None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return None


def _general_bytes(value: object, path: str) -> bytes:
    """:func:`canonical_bytes` without the fast path: the encoder every value can take."""
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
        # Only a lone surrogate in a string value can get here (keys are checked while
        # sorting); finding which one is slow, but only happens when refusing.
        where = _find_surrogate(value, path) or path
        raise ValueError(
            f"{where}: string contains a lone surrogate, which is not valid Unicode "
            "and cannot be written as UTF-8"
        ) from None


def _plain(value: object, depth: int) -> bool:
    """Whether json's C encoder writes ``value`` (a container at nesting ``depth``) exactly
    as the general encoder would, so that its text can be used as is.

    The C encoder (``sort_keys``, compact separators, :data:`_encode_str`) agrees with this
    module wherever its own choices coincide with the spec's, and this walk admits only
    values made entirely of such places, by exact type:

    * dicts whose keys are all ``str`` (the C encoder would turn int, float, bool and None
      keys into strings, where the spec refuses them) and all below U+D800 (it sorts by code
      point; UTF-16 order differs only at and above U+D800);
    * lists and tuples (both arrays in both encoders);
    * ``str`` (the same escaper; a lone surrogate is caught when the text is encoded to
      UTF-8), ``bool``, ``None``;
    * ``int`` within i64..u64 (the C encoder writes any size; the spec refuses the rest);
    * ``float`` that is zero or at least 1e-4 in magnitude, and finite: both write
      ``float.__repr__`` there (repr goes scientific with a padded negative exponent below
      1e-4, which :func:`format_float` lays out differently);
    * at most :data:`MAX_DEPTH` levels (the C encoder only stops at Python's recursion
      limit; a self-referencing value is caught here too).

    Subclasses (enums, OrderedDict) and every other type return False: the general encoder
    writes them, or refuses them with their path.
    """
    if depth > MAX_DEPTH:
        return False
    t = type(value)
    if t is dict:
        mapping = cast("dict[Any, object]", value)  # its type is exactly dict
        try:
            joined = "".join(mapping)  # TypeError unless every key is a str
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
        if t is float and (item == 0.0 or 1e-4 <= abs(item) <= _FLOAT_MAX):
            continue
        return False
    return True


def format_float(x: float) -> str:
    """``x`` as serde_json 1.0.151 writes it, from Python's shortest round-trip digits.

    With digits ``d`` and point position ``k`` (value = 0.d * 10^k): plain decimal when
    0 < k ≤ 16 (``.0`` if integral), ``0.000ddd`` when -5 < k ≤ 0, otherwise
    ``d[.ddd]e±<k-1>`` with an explicit ``+`` on positive exponents and no exponent padding.

    Python's repr already chooses the same digits and almost the same layout, so this only
    patches the difference instead of re-deriving it (the hot path): repr goes scientific
    below 1e-4 rather than 1e-5 and pads negative exponents (``1e-07``). Positive exponents
    come out of repr exactly as serde_json writes them (``1e+16``), because repr goes
    scientific at exactly the same point, 1e16.
    """
    text = float.__repr__(x)
    if "e" not in text:
        if text[-1] == "n" or text[-1] == "f":
            raise ValueError(_non_finite(x))
        # repr writes plain decimal exactly when 1e-4 <= |x| < 1e16 (and for zero), a
        # range inside serde_json's plain-decimal one, and then the two texts are identical.
        return text
    mantissa, _, exponent = text.partition("e")
    if exponent[0] == "+":
        return text  # |x| >= 1e16: k > 16, scientific in both, and repr's `e+NN` is serde's
    # Negative exponent: repr pads to two digits (`1e-07`); only e-05 (k = -4) is plain.
    if exponent == "-05":
        if mantissa[0] == "-":
            return "-0.0000" + mantissa[1:].replace(".", "")
        return "0.0000" + mantissa.replace(".", "")
    return mantissa + "e-" + exponent[1:].lstrip("0")


def _non_finite(x: float) -> str:
    if math.isnan(x):
        return "NaN is not JSON; canonical JSON has no NaN or infinity"
    return f"{'-' if x < 0 else ''}Infinity is not JSON; canonical JSON has no NaN or infinity"


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be")


def _sorted_keys(obj: dict[Any, Any]) -> list[str]:
    keys = list(obj)
    try:
        joined = "".join(keys)  # also the type check: join refuses anything but str
    except TypeError:
        bad = next(k for k in keys if not isinstance(k, str))
        raise _Refusal(
            TypeError,
            f"object keys must be strings, found {type(bad).__name__} {bad!r}",
        ) from None
    # Code-point order equals UTF-16 order unless a key holds a character at or above
    # U+D800 (surrogates, U+E000..U+FFFF vs astral); only then pay for the encoding sort.
    if joined.isascii() or max(joined) < "\ud800":
        return sorted(keys)
    try:
        return sorted(keys, key=_utf16_key)
    except UnicodeEncodeError:
        bad = next(k for k in keys if _has_surrogate(k))
        raise _Refusal(
            ValueError, f"object key {bad!r} contains a lone surrogate, which is not valid Unicode"
        ) from None


def _write(value: object, out: list[str], depth: int) -> None:
    # Exact-type checks first (the common case, and cheap); bool before int because
    # True is an int in Python but `true` in JSON. Containers write their scalar members
    # inline (see _scalar) and only recurse here for nested containers and rare types.
    t = type(value)
    if t is dict:
        _write_object(cast("dict[Any, Any]", value), out, depth)
    elif t is list or t is tuple:
        _write_array(cast("list[Any] | tuple[Any, ...]", value), out, depth)
    else:
        text = _scalar(value, t)
        if text is None:
            _write_other(value, out, depth)
        else:
            out.append(text)


def _scalar(value: Any, t: type) -> str | None:
    """The JSON text of an exact-type scalar, or None for anything else."""
    if t is str:
        return _encode_str(value)
    if t is int:
        if _I64_MIN <= value <= _U64_MAX:
            return repr(value)
        raise _Refusal(ValueError, _int_range(value))
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if t is float:
        try:
            return format_float(value)
        except ValueError as exc:
            raise _Refusal(ValueError, str(exc)) from None
    return None


def _write_other(value: object, out: list[str], depth: int) -> None:
    # Subclasses (StrEnum, IntEnum, OrderedDict, ...) are written as their base type.
    if isinstance(value, str):
        out.append(_encode_str(value))
    # _scalar writes an exact int or float, or raises: it never answers None for them.
    elif isinstance(value, int):
        out.append(cast(str, _scalar(int(value), int)))
    elif isinstance(value, float):
        out.append(cast(str, _scalar(float(value), float)))
    elif isinstance(value, dict):
        _write_object(value, out, depth)
    elif isinstance(value, list | tuple):
        _write_array(value, out, depth)
    else:
        raise _Refusal(
            TypeError,
            f"{type(value).__name__} is not JSON; use dict, list, tuple, str, int, float, "
            "bool or None",
        )


def _int_range(value: int) -> str:
    return (
        f"integer {value} does not fit a 64-bit integer ({_I64_MIN}..{_U64_MAX}); "
        "write it as a string"
    )


def _too_deep() -> _Refusal:
    return _Refusal(
        ValueError,
        f"nested more than {MAX_DEPTH} levels deep (or refers to itself); "
        "agentplane's reader cannot decode such a record",
    )


def _write_object(obj: dict[Any, Any], out: list[str], depth: int) -> None:
    # serde_json counts an empty container against its depth limit too.
    if depth > MAX_DEPTH:
        raise _too_deep()
    if not obj:
        out.append("{}")
        return
    depth += 1
    append = out.append
    sep = "{"
    for key in _sorted_keys(obj):
        value = obj[key]
        try:
            t = type(value)
            if t is str:
                append(sep + _encode_str(key) + ":" + _encode_str(value))
                sep = ","
                continue
            text = None if t is dict or t is list else _scalar(value, t)
            if text is None:
                append(sep + _encode_str(key) + ":")
                _write(value, out, depth)
            else:
                append(sep + _encode_str(key) + ":" + text)
        except _Refusal as refusal:
            refusal.segments.append("." + key)
            raise
        sep = ","
    append("}")


def _write_array(items: list[Any] | tuple[Any, ...], out: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise _too_deep()
    if not items:
        out.append("[]")
        return
    depth += 1
    append = out.append
    sep = "["
    for index, item in enumerate(items):
        try:
            t = type(item)
            if t is str:
                append(sep + _encode_str(item))
                sep = ","
                continue
            text = None if t is dict or t is list else _scalar(item, t)
            if text is None:
                append(sep)
                _write(item, out, depth)
            else:
                append(sep + text)
        except _Refusal as refusal:
            refusal.segments.append(f"[{index}]")
            raise
        sep = ","
    append("]")


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _find_surrogate(value: object, path: str) -> str | None:
    """The path of the first string holding a lone surrogate, in canonical order."""
    if isinstance(value, str):
        return path if _has_surrogate(value) else None
    if isinstance(value, dict):
        for key in sorted(value, key=_utf16_key):
            found = _find_surrogate(value[key], f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _find_surrogate(item, f"{path}[{index}]")
            if found:
                return found
    return None
