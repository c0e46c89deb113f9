"""``verify-export`` reads a record line's ``body`` as its wire value when the body, written
back canonically, is the wire bytes (``exportfmt/body_wire.py``), instead of parsing the bytes
again and walking both. That shortcut only ever says yes, and only where the slow way says the
same: held here value by value (the wire's own parse is the body, type for type) and verdict by
verdict (a whole verifier with the shortcut, and one without it, on hostile record lines).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentplane_journal import RunId
from agentplane_journal.core.ids import Digest
from agentplane_journal.exportfmt import body_wire, verify
from agentplane_journal.exportfmt.body import serde_value
from agentplane_journal.exportfmt.body_wire import _SORTED, body_is_wire, sorted_text
from agentplane_journal.exportfmt.lines import Trailer, header_line, run_line, trailer_line
from agentplane_journal.exportfmt.verify import ExportVerifier
from agentplane_journal.tlog.checkpoint import Checkpoint

RUN = RunId.parse("01HZY5V7Q3T8R2M6K4N9P0W1XA")


def _exact(a: object, b: object) -> bool:
    """Equal with the same types throughout (``1`` is not ``1.0``, ``True`` not ``1``), and
    a zero's sign kept: what reading the body as the wire must not change."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(_exact(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(_exact(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        assert isinstance(b, float)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b


_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([0, -0.0, 0.0, 1.0, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**400])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
    | st.sampled_from(["\ud800", "\x1f", "é", '"', "\\", "\u2028", "\U0001f600", "1e400"])
)
_json = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(max_size=4) | st.sampled_from(["\U0001f600", "\uff61"]), inner, max_size=4
        )
    ),
    max_leaves=12,
)
_members = st.sampled_from(["seq", "run", "kind", "epoch", "v", "text", "chain_head", "a", "é"])


def _dumped(value: Any, how: int) -> str:
    """``value`` written one of several ways, canonical or not."""
    if how == 0:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    if how == 1:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)  # spaced
    if how == 2:
        return json.dumps(value, separators=(",", ":"), sort_keys=True)  # \\u escapes
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))  # unsorted


def _edited(value: Any, edit: int) -> Any:
    """``value`` with one change the body-vs-wire check must see (or not, for ``0``)."""
    if not isinstance(value, dict) or not value or edit == 0:
        return value
    key = sorted(value)[0]
    out = dict(value)
    v = out[key]
    if edit == 1:
        out[key] = float(v) if type(v) is int and abs(v) < 2**1000 else v
    elif edit == 2:
        out[key] = int(v) if type(v) is float and math.isfinite(v) else v
    elif edit == 3:
        out[key] = [v]
    elif edit == 4:
        del out[key]
    elif edit == 5:
        out[key + "x"] = v
    return out


_pairs = st.tuples(
    st.dictionaries(_members, _json, max_size=6) | _json,
    st.integers(0, 3),
    st.integers(0, 5),
)


def _pair(wire: Any, how: int, edit: int) -> tuple[Any, str]:
    """A record line's ``(body, raw)`` as a line carries them (the body read back from the
    line's text, so as ``json.loads`` reads it)."""
    raw = _dumped(wire, how)
    body = json.loads(json.dumps(_edited(wire, edit)))
    return body, raw


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_json)
def test_the_writer_built_once_writes_what_the_encoder_writes(value: Any) -> None:
    try:
        expected = _SORTED.encode(value)
    except ValueError as exc:
        with pytest.raises(ValueError):
            sorted_text(value)
        assert "JSON compliant" in str(exc)
    else:
        assert sorted_text(value) == expected


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_pairs)
def test_a_body_taken_as_the_wire_is_the_wires_own_value(pair: tuple[Any, int, int]) -> None:
    body, raw = _pair(*pair)
    if body_is_wire(body, raw, raw.encode("utf-8", "surrogatepass")):
        assert _exact(body, serde_value(raw))


_RAWS: list[tuple[Any, str]] = [
    ({"a": 1}, '{"a":1}'),
    ({"a": 1}, '{"a":1.0}'),
    ({"a": 1.0}, '{"a":1}'),
    ({"a": 1.0}, '{"a":1.0}'),
    ({"a": 0}, '{"a":-0}'),
    ({"a": -0.0}, '{"a":-0.0}'),
    ({"a": 2**64}, '{"a":18446744073709551616}'),
    ({"a": [2**64 - 1]}, '{"a":[18446744073709551615]}'),
    ({"a": -(2**63) - 1}, '{"a":-9223372036854775809}'),
    ({"a": 10**400}, '{"a":' + "1" + "0" * 400 + "}"),
    ({"a": float("inf")}, '{"a":Infinity}'),
    ({"a": float("nan")}, '{"a":NaN}'),
    ({"a": 1e16}, '{"a":1e+16}'),
    ({"a": 1e-7}, '{"a":1e-07}'),
    ({"a": "\ud800"}, '{"a":"\ud800"}'),
    ({"a": "é"}, '{"a":"\\u00e9"}'),
    ({"b": 1, "a": 2}, '{"a":2,"b":1}'),
    ({"a": True}, '{"a":1}'),
    ([1], "[1]"),
    ("x", '"x"'),
    ({"a": {"b": []}}, '{"a": {"b": []}}'),
    ({"a": 1}, '{"a":1,"a":1}'),
]


@pytest.mark.parametrize(("body", "raw"), _RAWS)
def test_hostile_bodies_taken_as_the_wire_are_its_value(body: Any, raw: str) -> None:
    if body_is_wire(body, raw, raw.encode("utf-8", "surrogatepass")):
        assert _exact(body, serde_value(raw))


def _report(lines: list[str], *, fast: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(verify, "body_is_wire", lambda body, raw, raw_bytes: False)
        check = ExportVerifier(None)
        for line in lines:
            if not check.feed(line):
                break
        report = check.finish(None)
    out = report.to_json()
    out["sound_runs"] = [str(r) for r in report.sound]
    return out


def _lines(pairs: list[tuple[Any, str]], canon: int) -> list[str]:
    """An export of one open run whose record lines carry these ``(body, raw)`` pairs, each
    hashed over its raw bytes (so that only the body, the bytes' value and the links speak)."""
    lines = [header_line(Checkpoint("o", 0, Digest(bytes(32))), canon), run_line(RUN, None, None)]
    prev = bytes(32)
    for body, raw in pairs:
        h = hashlib.sha256(prev + raw.encode("utf-8", "surrogatepass")).digest()
        lines.append(
            json.dumps(
                {"seq": 1, "body": body, "prev_hash": prev.hex(), "hash": h.hex(), "raw": raw},
                ensure_ascii=False,
            )
        )
        prev = h
    lines.append(trailer_line(Trailer(1, 1, len(pairs), 0)))
    return lines


def _record(members: dict[str, Any], seq: int) -> dict[str, Any]:
    out: dict[str, Any] = {"seq": seq, "run": RUN.ulid, "epoch": 1, "v": 1, "kind": "Note"}
    out["text"] = "t"
    out.update(members)
    return out


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.dictionaries(_members, _json, max_size=3), st.integers(0, 3), st.integers(0, 5)
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from([0, 1]),
)
def test_the_verdict_with_the_shortcut_is_the_verdict_without_it(
    records: list[tuple[dict[str, Any], int, int]], canon: int
) -> None:
    pairs = [_pair(_record(m, i + 1), how, edit) for i, (m, how, edit) in enumerate(records)]
    lines = _lines(pairs, canon)
    with pytest.MonkeyPatch.context() as mp:
        assert _report(lines, fast=True, monkeypatch=mp) == _report(
            lines, fast=False, monkeypatch=mp
        )


_RECORDS: list[tuple[Any, str]] = [
    (_record({}, 1), sorted_text(_record({}, 1))),
    (_record({"seq": 2**64}, 1), sorted_text(_record({"seq": 2**64}, 1))),
    (_record({"seq": 1.0}, 1), sorted_text(_record({}, 1))),
    (
        _record({"text": float("inf")}, 1),
        json.dumps(_record({"text": float("inf")}, 1), sort_keys=True, separators=(",", ":")),
    ),
    ([1, 2], "[1,2]"),
    (
        _record({"kind": "RunSealed", "outcome": "x", "chain_head": "0" * 64}, 1),
        sorted_text(_record({"kind": "RunSealed", "outcome": "x", "chain_head": "0" * 64}, 1)),
    ),
    (
        _record(
            {
                "kind": "EffectReconciled",
                "disposition": "landed",
                "output": None,
                "detail": None,
                "zz": 1,
            },
            1,
        ),
        sorted_text(
            _record(
                {
                    "kind": "EffectReconciled",
                    "disposition": "landed",
                    "output": None,
                    "detail": None,
                    "zz": 1,
                },
                1,
            )
        ),
    ),
    (_record({"run": "other"}, 1), sorted_text(_record({"run": "other"}, 1))),
    (_record({"run": {"b": 1, "a": 2}}, 1), sorted_text(_record({"run": {"b": 1, "a": 2}}, 1))),
    # named in a typed-decode finding: in the wire's order, not the body's
    (_record({"kind": {"b": 1, "a": 2}}, 1), sorted_text(_record({"kind": {"b": 1, "a": 2}}, 1))),
]


@pytest.mark.parametrize("canon", [0, 1])
@pytest.mark.parametrize(("body", "raw"), _RECORDS)
def test_hostile_record_lines_get_the_same_verdict_either_way(
    body: Any, raw: str, canon: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = _lines([(body, raw)], canon)
    assert _report(lines, fast=True, monkeypatch=monkeypatch) == _report(
        lines, fast=False, monkeypatch=monkeypatch
    )


def test_the_shortcut_is_taken_for_an_honest_record() -> None:
    # What the speed rests on: an honest line's body is written back as its bytes.
    wire = _record({"kind": "RunAdmitted", "input": {"i": 1, "x": 1.5}}, 1)
    raw = sorted_text(wire)
    assert body_is_wire(json.loads(json.dumps(wire)), raw, raw.encode())
    assert body_wire.sorted_text is sorted_text


@pytest.mark.parametrize(
    ("spelling", "finding"),
    [
        (str.lower, None),
        (str.upper, None),  # a digest in upper case is the same digest
        (lambda h: h[:-1] + ("0" if h[-1] != "0" else "1"), "does not recompute"),
        (lambda h: h[:-1] + "g", "no wire bytes or no hash"),
        (lambda h: h[:-1], "no wire bytes or no hash"),
        (lambda h: int(h[:8], 16), "no wire bytes or no hash"),
    ],
)
def test_the_hash_compared_as_text_is_the_hash_compared_as_a_digest(
    spelling: Any, finding: str | None
) -> None:
    # The hash is compared as text where it is spelt as written (lower case), else parsed.
    wire = _record({}, 1)
    raw = sorted_text(wire)
    line = json.loads(_lines([(wire, raw)], 0)[2])
    line["hash"] = spelling(line["hash"])
    lines = _lines([(wire, raw)], 0)
    lines[2] = json.dumps(line)
    check = ExportVerifier(None)
    for text in lines:
        check.feed(text)
    findings = [f for f in check.finish(None).findings if "record" in f]
    if finding is None:
        assert findings == []
    else:
        assert len(findings) == 1 and finding in findings[0]


_ULID_CHARS = "0123456789ABCDEFGHJKMNPQRSTVWXYZabcdefghjkmnpqrstvwxyzILOUilou_-"


@settings(max_examples=800, deadline=None)
@given(
    st.text(_ULID_CHARS, min_size=24, max_size=30)
    | st.sampled_from(["run_01HZY5V7Q3T8R2M6K4N9P0W1XA", "01hzy5v7q3t8r2m6k4n9p0w1xa", "8" * 26])
)
def test_a_run_block_read_the_short_way_names_the_run_parse_names(text: str) -> None:
    # read.run_block keeps a bare upper-case ULID as written; anything else is parsed.
    from agentplane_journal.exportfmt.lines import parse_ulid_run
    from agentplane_journal.exportfmt.read import run_block

    block = run_block({"kind": "agentplane.export.run", "run": text})
    parsed = parse_ulid_run(text)
    if parsed is None:
        assert isinstance(block, str)
    else:
        assert not isinstance(block, str)
        assert block.run == parsed and block.run.ulid == parsed.ulid


@settings(max_examples=500, deadline=None)
@given(
    st.text("0123456789abcdefABCDEF g", min_size=62, max_size=66)
    | st.sampled_from(["a" * 64, "A" * 64, "0" * 63 + " ", " " + "0" * 63])
    | st.integers()
)
def test_a_run_blocks_leaf_read_the_short_way_is_the_digest_parse_reads(seal: Any) -> None:
    # read.run_block reads a lower-case digest as written; anything else is parsed.
    from agentplane_journal.exportfmt.lines import parse_digest
    from agentplane_journal.exportfmt.read import run_block

    block = run_block({"run": RUN.ulid, "index": 0, "seal": seal})
    assert not isinstance(block, str)
    assert block.seal == parse_digest(seal)
    assert (block.problem is None) == (parse_digest(seal) is not None)
