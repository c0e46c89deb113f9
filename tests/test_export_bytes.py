"""Export format 1, byte for byte: every line against text written by hand from agentplane
0.22's own definitions (src/export.rs, src/journal/record.rs, src/core/{id,effect}.rs).

A record line's ``body`` is ``serde_json::to_string`` of 0.22's ``RecordBody`` parsed from the
wire bytes: ``seq, run, case, step, phase, epoch, v, effect_key``, then ``kind`` and the
variant's members in declaration order (never the wire's sorted order), numbers as
serde_json holds and writes them. The expected strings below are that, typed out; the
records are sealed by this package in both wire profiles. Pure except the last test, which
exports from a store on both dialects and checks the file verifies.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentplane_journal import AGENTPLANE_0_4, AGENTPLANE_0_22, RunId
from agentplane_journal.core.ids import Digest
from agentplane_journal.core.profile import WireProfile
from agentplane_journal.core.record import Attestation, Record, stored_record
from agentplane_journal.exportfmt.body import body_text, serde_value
from agentplane_journal.exportfmt.lines import (
    Trailer,
    Unreadable,
    header_line,
    record_line,
    run_line,
    trailer_line,
)
from agentplane_journal.exportfmt.verify import ExportVerifier
from agentplane_journal.journal.export import write_export
from agentplane_journal.tlog.checkpoint import Checkpoint

R = "01HZY5V7Q3T8R2M6K4N9P0W1XB"
C = "01HZY5V7Q3T8R2M6K4N9P0W1XC"
D = "ab" * 32
E = "cd" * 32
ZERO = "00" * 32
V1 = f'"seq":1,"run":"{R}","epoch":1,"v":1'
V4 = f'"seq":1,"run":"{R}","epoch":1,"v":4'
LABEL = {"provenance": [], "sensitivity": "public", "trust": "trusted"}
LABEL_TEXT = '{"provenance":[],"trust":"trusted","sensitivity":"public"}'  # Label's order


def seal(profile: WireProfile, kind: str, payload: dict[str, Any], **env: Any) -> Record:
    body = {"seq": 1, "run": R, "epoch": 1, "v": profile.record_version, "kind": kind}
    body.update(env)
    body.update(payload)
    return Record.seal(body, Digest.ZERO, canon=profile.canonicalize)


def body_of(profile: WireProfile, kind: str, payload: dict[str, Any], **env: Any) -> str:
    return body_text(bytes(seal(profile, kind, payload, **env).raw).decode())


# (kind, payload, the members after "kind" as 0.22 writes them), agentplane-0.22 profile.
KINDS: list[tuple[str, dict[str, Any], str]] = [
    (
        "RunAdmitted",
        {
            "idempotency_key": "order-1",
            "canon": 1,
            "policy_bundle": {"evaluator": "cedar", "schema": D, "rules": D},
            "input_label": LABEL,
            "input": {"b": 1, "a": [1.5, 100.0]},
            "governed_by": {"publisher": "k1", "digest": D, "version": "1", "name": "a"},
            "capability": "pay",
        },
        f'"capability":"pay","governed_by":{{"name":"a","version":"1","digest":"{D}",'
        f'"publisher":"k1"}},"input":{{"a":[1.5,100],"b":1}},"input_label":{LABEL_TEXT},'
        f'"policy_bundle":{{"rules":"{D}","schema":"{D}","evaluator":"cedar"}},"canon":1,'
        '"idempotency_key":"order-1"',
    ),
    (
        "PlanFrozen",
        {"plan": {"z": 1, "a": None}, "steps": ["s"]},
        '"steps":["s"],"plan":{"a":null,"z":1}',
    ),
    ("StepStarted", {"skill": "x"}, '"skill":"x"'),
    ("StepFinished", {"outcome": "ok"}, '"outcome":"ok"'),
    (
        "CaseBound",
        {
            "correlation": [{"value": "7", "namespace": "meter"}],
            "opened": True,
            "case_kind": "claim",
        },
        '"case_kind":"claim","opened":true,"correlation":[{"namespace":"meter","value":"7"}]',
    ),
    (
        "DeadlineRegistered",
        {"calendar_digest": D, "resolved_at": "2026-12-02T09:10:00Z", "name": "reply"},
        f'"name":"reply","resolved_at":"2026-12-02T09:10:00Z","calendar_digest":"{D}"',
    ),
    (
        "DeadlineTransition",
        {"to": "met", "from": "pending", "name": "reply"},
        '"name":"reply","from":"pending","to":"met"',
    ),
    (
        "RunSuspended",
        {
            "reason": {
                "until": "2026-01-01T00:00:00Z",
                "reason": "awaiting_event",
                "kind": "e",
                "correlation": [{"value": "7", "namespace": "order"}],
            }
        },
        '"reason":{"reason":"awaiting_event","kind":"e","correlation":[{"namespace":"order",'
        '"value":"7"}],"until":"2026-01-01T00:00:00Z"}',
    ),
    ("Note", {"text": "why"}, '"text":"why"'),
    (
        "EffectStarted",
        {
            "outbound_label": LABEL,
            "backoff_ms": 400,
            "attempt": 3,
            "mutates": True,
            "recovery": {"key": "k-1", "mode": "idempotent"},
            "descriptor": {"args": {"to": "x", "amount": 100.0}, "kind": "pay"},
        },
        '"descriptor":{"kind":"pay","args":{"amount":100,"to":"x"}},'
        '"recovery":{"mode":"idempotent","key":"k-1"},"mutates":true,"attempt":3,'
        f'"backoff_ms":400,"outbound_label":{LABEL_TEXT}',
    ),
    (
        "EffectDone",
        {
            "declared": {"sensitivity": "internal", "trust": "untrusted"},
            "spend": {"minor_units": 3, "tokens": 5},
            "source": "hook",
            "output": {"ok": True},
        },
        '"output":{"ok":true},"source":"hook","spend":{"tokens":5,"minor_units":3},'
        '"declared":{"trust":"untrusted","sensitivity":"internal"}',
    ),
    (
        "EffectFailed",
        {"permanent": True, "disposition": "did_not_happen", "spend": {"tokens": 1}, "error": "e"},
        '"error":"e","spend":{"tokens":1},"disposition":"did_not_happen","permanent":true',
    ),
    ("BudgetRefused", {"used": "11", "limit": "10"}, '"limit":"10","used":"11"'),
    ("BudgetReadmitted", {"limit": "20"}, '"limit":"20"'),
    ("IdentityBound", {"chain": [{"sub": "u"}]}, '"chain":[{"sub":"u"}]'),
    (
        "PolicyDenied",
        {"resource": "r", "action": "a", "reason": "no"},
        '"reason":"no","action":"a","resource":"r"',
    ),
    ("GroupOpened", {"resources": ["a", "b"], "group": "g"}, '"group":"g","resources":["a","b"]'),
    (
        "GroupSettled",
        {"detail": "d", "outcome": "committed", "group": "g"},
        '"group":"g","outcome":"committed","detail":"d"',
    ),
    (
        "StepCompensated",
        {"outcome": "undone", "compensation": "reverse"},
        '"compensation":"reverse","outcome":"undone"',
    ),
    (
        "EffectReconciled",
        {
            "declared": {"trust": "trusted", "sensitivity": "public"},
            "detail": "probe",
            "spend": {"tokens": 2},
            "output": {"id": 7},
            "disposition": "landed",
        },
        '"disposition":"landed","output":{"id":7},"spend":{"tokens":2},"detail":"probe",'
        '"declared":{"trust":"trusted","sensitivity":"public"}',
    ),
    (
        "Released",
        {
            "value": D,
            "result_field_labels": {"b": LABEL, "a": LABEL},
            "result_label": LABEL,
            "field_labels": {"\ue000": LABEL, "\U0001f600": LABEL},
            "label": LABEL,
            "release": {
                "evidence": ["e"],
                "fields": ["f"],
                "destination": "d",
                "basis": "b",
                "scope": {"sensitivity": "internal", "trust": True},
            },
            "releaser": "ops",
        },
        '"releaser":"ops","release":{"scope":{"trust":true,"sensitivity":"internal"},'
        '"basis":"b","destination":"d","fields":["f"],"evidence":["e"]},'
        f'"label":{LABEL_TEXT},'
        # BTreeMap<String, Label>: UTF-8 byte order, so U+E000 before U+1F600 (the wire,
        # RFC 8785's UTF-16 order, has them the other way round).
        f'"field_labels":{{"\ue000":{LABEL_TEXT},"\U0001f600":{LABEL_TEXT}}},'
        f'"result_label":{LABEL_TEXT},"result_field_labels":{{"a":{LABEL_TEXT},'
        f'"b":{LABEL_TEXT}}},"value":"{D}"',
    ),
    ("RunCancelled", {"reason": "stop", "actor": "ops"}, '"actor":"ops","reason":"stop"'),
    (
        "RunSealed",
        {"chain_head": D, "reason": "budget", "outcome": "failed"},
        f'"outcome":"failed","reason":"budget","chain_head":"{D}"',
    ),
    (
        "BreakGlass",
        {"reason": "incident 7", "roles": ["sre", "audit"], "actor": "ops"},
        '"actor":"ops","roles":["sre","audit"],"reason":"incident 7"',
    ),
    (
        "Swept",
        {"detail": "expired", "action": "breached", "subject": "case"},
        '"subject":"case","action":"breached","detail":"expired"',
    ),
]


@pytest.mark.parametrize(("kind", "payload", "members"), KINDS, ids=[k[0] for k in KINDS])
def test_every_kind_is_written_in_its_declaration_order(
    kind: str, payload: dict[str, Any], members: str
) -> None:
    assert body_of(AGENTPLANE_0_22, kind, payload) == f'{{{V1},"kind":"{kind}",{members}}}'
    # The same members in an agentplane-0.4 journal: v 4, and 100.0 stays a double there.
    in_0_4 = members.replace("100]", "100.0]").replace('"amount":100,', '"amount":100.0,')
    assert body_of(AGENTPLANE_0_4, kind, payload) == f'{{{V4},"kind":"{kind}",{in_0_4}}}'


def test_every_0_22_kind_has_a_golden_line() -> None:
    from agentplane_journal.exportfmt.body import VARIANT_MEMBERS

    assert [k for k, _, _ in KINDS] == list(VARIANT_MEMBERS)


def test_the_envelope_comes_first_in_record_body_order() -> None:
    payload = {"recovery": {"mode": "retry"}, "descriptor": {"kind": "k", "args": None}}
    got = body_of(
        AGENTPLANE_0_22,
        "EffectStarted",
        payload,
        effect_key=E,
        phase="compensating",
        step=2,
        case=C,
    )
    assert got == (
        f'{{"seq":1,"run":"{R}","case":"{C}","step":2,"phase":"compensating","epoch":1,"v":1,'
        f'"effect_key":"{E}","kind":"EffectStarted","descriptor":{{"kind":"k","args":null}},'
        '"recovery":{"mode":"retry"}}'
    )


def test_a_kind_or_member_0_22_does_not_define_is_kept_after_the_known_ones() -> None:
    """No 0.22 bytes to match (0.22 refuses an unknown kind and drops an unknown member);
    keeping them keeps body equal to the wire, which both verifiers demand."""
    got = body_of(AGENTPLANE_0_22, "LangGraphWrites", {"z": 1, "a": 2})
    assert got == f'{{{V1},"kind":"LangGraphWrites","a":2,"z":1}}'
    got = body_of(AGENTPLANE_0_22, "Note", {"zz": 1, "text": "t", "aa": 2})
    assert got == f'{{{V1},"kind":"Note","text":"t","aa":2,"zz":1}}'


FLOATS = [100.0, 1e16, 1e30, -0.0, 1e-7, 0.5, 1e21, 1e-6, 1e-5, 123456.789, 1e15 + 0.5]
INTS = [2**63, -(2**63), 2**64 - 1]


def test_numbers_in_the_0_22_profile() -> None:
    """RFC 8785 wire bytes, re-read as serde_json's Value and written by serde_json."""
    payload = {"input": {"f": [*FLOATS, 1e20], "i": INTS}}
    rec = seal(AGENTPLANE_0_22, "PlanFrozen", payload)
    assert bytes(rec.raw).decode() == (
        '{"epoch":1,"input":{"f":[100,10000000000000000,1e+30,0,1e-7,0.5,1e+21,0.000001,'
        "0.00001,123456.789,1000000000000000.5,100000000000000000000],"
        '"i":[9223372036854775808,-9223372036854775808,18446744073709551615]},'
        f'"kind":"PlanFrozen","run":"{R}","seq":1,"v":1}}'
    )
    assert body_text(bytes(rec.raw).decode()) == (
        f'{{{V1},"kind":"PlanFrozen","input":{{"f":[100,10000000000000000,1e+30,0,1e-7,0.5,'
        # 1e20 is written out by RFC 8785; beyond u64, serde_json reads it as an f64.
        "1e+21,1e-6,0.00001,123456.789,1000000000000000.5,1e+20],"
        '"i":[9223372036854775808,-9223372036854775808,18446744073709551615]}}'
    )


def test_integers_beyond_64_bits_are_the_f64_serde_json_reads() -> None:
    """This package refuses to write them; another writer's wire bytes may hold them."""
    raw = '{"i":[18446744073709551616,-9223372036854775809,123456789012345678901234567890]}'
    assert body_text(raw) == (
        '{"i":[1.8446744073709552e+19,-9.223372036854776e+18,1.2345678901234568e+29]}'
    )
    assert serde_value(raw) == {"i": [2.0**64, -(2.0**63), 1.2345678901234568e29]}


def test_numbers_in_the_0_4_profile() -> None:
    """serde_json's own layout on the wire already: the body's numbers are the wire's."""
    rec = seal(AGENTPLANE_0_4, "PlanFrozen", {"input": {"f": FLOATS, "i": INTS}})
    assert body_text(bytes(rec.raw).decode()) == (
        f'{{{V4},"kind":"PlanFrozen","input":{{"f":[100.0,1e+16,1e+30,-0.0,1e-7,0.5,1e+21,'
        "1e-6,0.00001,123456.789,1000000000000000.5],"
        '"i":[9223372036854775808,-9223372036854775808,18446744073709551615]}}'
    )


def test_a_whole_record_line_with_escapes_and_a_signature() -> None:
    text = 'é"\\\x01\n\t\x7f\u2028\U0001f600/'
    rec = seal(AGENTPLANE_0_22, "Note", {"text": text})
    raw = bytes(rec.raw)
    signed = stored_record(
        rec.body, raw, rec.prev_hash, rec.hash, Attestation("k1", b"\x00\x01\xff")
    )
    want_hash = hashlib.sha256(bytes(32) + raw).hexdigest()
    esc = 'é\\"\\\\\\u0001\\n\\t\x7f\u2028\U0001f600/'
    assert record_line(signed) == (
        f'{{"seq":1,"body":{{{V1},"kind":"Note","text":"{esc}"}},"prev_hash":"{ZERO}",'
        f'"hash":"{want_hash}","attestation":{{"key_id":"k1","signature":"0001ff"}},'
        # raw: the canonical text (sorted members) as a JSON string, escaped once more.
        f'"raw":"{{\\"epoch\\":1,\\"kind\\":\\"Note\\",\\"run\\":\\"{R}\\",\\"seq\\":1,'
        f'\\"text\\":\\"é\\\\\\"\\\\\\\\\\\\u0001\\\\n\\\\t\x7f\u2028\U0001f600/\\",\\"v\\":1}}"}}'
    )
    unsigned = record_line(rec)
    assert '"attestation":null,"raw":' in unsigned


def test_value_members_keep_the_wire_order_even_where_utf16_and_utf8_disagree() -> None:
    """serde_json with `preserve_order` (which 0.22's build enables) re-writes a Value in
    the order it read it: the wire's UTF-16 order (U+1F600 before U+E000)."""
    got = body_of(AGENTPLANE_0_22, "PlanFrozen", {"plan": {"\ue000": 1, "\U0001f600": 2}})
    assert got == f'{{{V1},"kind":"PlanFrozen","plan":{{"\U0001f600":2,"\ue000":1}}}}'


def test_what_serde_json_cannot_hold_is_refused() -> None:
    raw = f'{{"epoch":1,"kind":"Note","run":"{R}","seq":1,"text":"\\ud800","v":1}}'
    with pytest.raises(ValueError):
        body_text(raw)
    with pytest.raises(ValueError, match="out of range"):
        body_text(raw.replace('"\\ud800"', "1e400"))
    with pytest.raises(ValueError):
        body_text("[1]")
    # `-0` is an f64 in serde_json (so `-0.0` in the body), and equal to it as a Value.
    assert body_text('{"x":-0}') == '{"x":-0.0}'
    assert serde_value("-0") == 0.0 and type(serde_value("-0")) is float


def test_header_run_block_and_trailer_lines() -> None:
    cp = Checkpoint("agentplane", 4, Digest.from_hex(D))
    assert header_line(cp, 1) == (
        '{"kind":"agentplane.export","version":1,'
        f'"checkpoint":{{"origin":"agentplane","size":4,"root":"{D}"}},"canon":1}}'
    )
    assert header_line(cp, 0).endswith('"canon":0}')
    run = RunId.parse(R)
    assert run_line(run, 3, Digest.from_hex(E)) == (
        f'{{"kind":"agentplane.export.run","run":"{R}","index":3,"seal":"{E}"}}'
    )
    assert run_line(run, None, None) == f'{{"kind":"agentplane.export.run","run":"{R}"}}'
    t = Trailer(2, 1, 7, 0, [Unreadable(run, 'bad "bytes"\n')])
    assert trailer_line(t) == (
        '{"kind":"agentplane.export.end","runs_requested":2,"runs_exported":1,"records":7,'
        f'"cases":0,"unreadable":[{{"run":"{R}","reason":"bad \\"bytes\\"\\n"}}]}}'
    )
    assert trailer_line(Trailer()).endswith('"cases":0,"unreadable":[]}')


@pytest.mark.parametrize("profile", [AGENTPLANE_0_4, AGENTPLANE_0_22], ids=["0.4", "0.22"])
async def test_a_store_export_writes_these_bodies_and_verifies(
    make_store: Callable[..., Any], tmp_path: Path, profile: WireProfile
) -> None:
    store = await make_store(profile=profile)
    run = RunId.generate()
    admitted = {"capability": "c", "input": {"y": 100.0, "x": 1e16}, "input_label": LABEL}
    effect = {
        "recovery": {"mode": "retry"},
        "descriptor": {"kind": "k", "args": {"n": -0.0}},
        "mutates": True,
        "attempt": 1,
        "backoff_ms": 0,
    }
    await store.append(
        1,
        [
            profile.append(run, "RunAdmitted", admitted),
            profile.append(run, "EffectStarted", effect, step=0, effect_key=E),
            profile.append(run, "BreakGlass", {"roles": ["sre"], "reason": "r", "actor": "ü"}),
        ],
    )
    path = tmp_path / "x.jsonl"
    with path.open("w", encoding="utf-8", newline="\n") as out:
        cp, _ = await write_export(store, out)
    lines = path.read_text(encoding="utf-8").splitlines()
    texts = [x.split(',"body":', 1)[1].split(',"prev_hash":', 1)[0] for x in lines[2:-1]]
    v = profile.record_version
    env = f'"run":"{run.ulid}","epoch":1,"v":{v}'
    if profile is AGENTPLANE_0_22:
        numbers, canon, zero = '{"x":10000000000000000,"y":100}', ',"canon":1', "0"
    else:
        numbers, canon, zero = '{"x":1e+16,"y":100.0}', "", "-0.0"
    assert texts == [
        f'{{"seq":1,{env},"kind":"RunAdmitted","capability":"c","input":{numbers},'
        f'"input_label":{LABEL_TEXT}{canon}}}',
        f'{{"seq":2,"run":"{run.ulid}","step":0,"epoch":1,"v":{v},"effect_key":"{E}",'
        f'"kind":"EffectStarted","descriptor":{{"kind":"k","args":{{"n":{zero}}}}},'
        '"recovery":{"mode":"retry"},"mutates":true,"attempt":1,"backoff_ms":0}',
        f'{{"seq":3,{env},"kind":"BreakGlass","actor":"ü","roles":["sre"],"reason":"r"}}',
    ]
    check = ExportVerifier(None)
    for line in lines:
        assert check.feed(line)
    report = check.finish(cp)
    assert report.is_sound, report.findings


@pytest.mark.parametrize("profile", [AGENTPLANE_0_4, AGENTPLANE_0_22], ids=["0.4", "0.22"])
def test_the_fast_writer_agrees_with_the_exact_one(profile: WireProfile) -> None:
    """json's C encoder writes most bodies; serde_json's layout (format_float) must agree
    for every float it is given: doubles across the whole exponent range, both profiles."""
    import random

    from agentplane_journal.exportfmt import body as export_body

    rng = random.Random(22)
    floats = [rng.uniform(1, 10) * 10.0 ** rng.randint(-3, 300) for _ in range(400)]
    floats += [-x for x in floats[:50]] + [2.0**53, 2.0**64, 1e-4, 1.5e-4, 0.1, 1 / 3]
    ints = [rng.randint(-(2**63), 2**64 - 1) for _ in range(100)]
    for chunk in range(0, len(floats), 40):
        payload = {"input": {"f": floats[chunk : chunk + 40], "i": ints}}
        raw = bytes(seal(profile, "RunAdmitted", payload).raw).decode()
        out: list[str] = []
        export_body._write(export_body._reordered(serde_value(raw)), out)
        assert body_text(raw) == "".join(out)
        assert serde_value(body_text(raw)) == serde_value(raw)


def test_a_file_from_the_previous_writer_still_verifies() -> None:
    """Files this package wrote before (``body`` = the wire text verbatim) equal their wire
    as serde_json values, so verify-export still finds nothing wrong with their bodies."""
    payload = {"input": {"f": [1e-6, 1e20, 100.0, -0.0], "i": [2**64 - 1, -(2**63)]}}
    rec = seal(AGENTPLANE_0_22, "RunAdmitted", {**payload, "canon": 1})
    raw = bytes(rec.raw).decode()
    new = record_line(rec)
    old = new.replace(new[new.index('"body":') : new.index(',"prev_hash"')], f'"body":{raw}')
    assert old != new
    cp = Checkpoint("agentplane", 0, Digest.from_hex(ZERO))
    for line in (new, old):
        check = ExportVerifier(None)
        lines = [header_line(cp, 1), run_line(RunId.parse(R), None, None), line]
        for x in [*lines, trailer_line(Trailer(1, 1, 1))]:
            assert check.feed(x)
        report = check.finish(None)
        assert not any("readable body" in f for f in report.findings), report.findings
