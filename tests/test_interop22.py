"""agentplane 0.22.0's own code on our bytes, and ours on agentplane's (issue 36).

``tests/support/interop22.py`` builds agentplane's verifier from ``../shared`` (skipped in a fresh
clone, failed under CI when it cannot be built). Each test names the agreement it shows:
attestations as agentplane serialises them, numbers as agentplane formats them (exact ties
included), restores of agentplane-written exports byte for byte, and the steps layer's
records as agentplane's typed decode reads them.
"""

from __future__ import annotations

import json
import math
import random
import struct
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentplane_journal import AGENTPLANE_0_22, RunId, SqlJournalStore
from agentplane_journal.core.canon_v1 import (
    agentplane_number,
    canonical_bytes_rfc8785,
    canonical_bytes_v1,
    es_number,
)
from agentplane_journal.core.ids import EffectKey
from agentplane_journal.core.signing import Ed25519Verifier
from agentplane_journal.exportfmt.verify import ExportVerifier, VerifyReport
from agentplane_journal.journal.restore import restore_export
from agentplane_journal.tlog.checkpoint import Checkpoint

from support import interop22
from support.helpers import TRUSTED as TRUSTED_LABEL
from support.interop22_journals import (
    NUMBERS,
    export,
    key_arg,
    plain_journal,
    signer,
    steps_journal,
)

# slow: builds agentplane's verifier with cargo (left to the CI stage that installs it)
pytestmark = pytest.mark.slow

STARTED = {
    "descriptor": {"kind": "probe", "args": [1]},
    "recovery": {"mode": "retry"},
    "mutates": True,
    "attempt": 1,
    "backoff_ms": 0,
}


def verify_ours(path: Path, *keys: str, expected: Checkpoint | None = None) -> VerifyReport:
    """Our ``verify-export`` on a file, trusting ``ID=HEX`` keys."""
    verifier = None
    if keys:
        verifier = Ed25519Verifier()
        for entry in keys:
            key_id, _, public = entry.partition("=")
            verifier.trust(key_id, bytes.fromhex(public))
    check = ExportVerifier(verifier)
    with path.open("rb") as f:
        for line in f:
            if not check.feed(line.rstrip(b"\n")):
                break
    return check.finish(expected)


def agentplane_export(tmp_path: Path) -> tuple[Path, str]:
    """``interop22 write-export``: a signed file written by agentplane's own writer, and its
    key as ``ID=HEX``."""
    out = tmp_path / "ap"
    out.mkdir()
    interop22.run("write-export", str(out))
    return out / "agentplane-native.jsonl", (out / "agentplane-native.key").read_text().strip()


# -- 1. attestations ------------------------------------------------------------------------


async def test_agentplane_verifies_our_signed_export_with_the_key(
    make_store: Any, tmp_path: Path
) -> None:
    store: SqlJournalStore = await make_store(profile="agentplane-0.22", signer=signer())
    await plain_journal(store)
    path = await export(store, tmp_path / "signed.jsonl")
    report = interop22.check_export(path, key_arg())
    assert report["attestations"]["checks"] > 0
    assert report["attestations"]["disagreements"] == 0, report["attestations"]
    assert report["is_sound"], report["verify_report"]
    line = next(x for x in path.read_text().splitlines() if '"attestation":{' in x)
    signature = json.loads(line)["attestation"]["signature"]
    assert isinstance(signature, str) and bytes.fromhex(signature).hex() == signature
    assert verify_ours(path, key_arg()).is_sound


def test_we_verify_agentplanes_own_signed_export_with_its_key(tmp_path: Path) -> None:
    path, key = agentplane_export(tmp_path)
    report = verify_ours(path, key)
    assert report.is_sound, report.findings
    assert report.records > 0 and not any("signature" in n for n in report.not_checked)
    # and a key that did not sign it is a finding, not a pass
    other = "spiffe://interop/agentplane-0.22=" + bytes(32).hex()
    assert not verify_ours(path, other).is_sound


async def test_files_we_wrote_before_with_signatures_as_byte_arrays_still_verify(
    make_store: Any, tmp_path: Path
) -> None:
    store: SqlJournalStore = await make_store(profile="agentplane-0.22", signer=signer())
    await plain_journal(store, runs=2)
    path = await export(store, tmp_path / "signed.jsonl")
    lines = []
    for line in path.read_text().splitlines():
        value = json.loads(line)
        att = value.get("attestation")
        if att:  # the array spelling this package wrote before issue 36
            old = json.dumps(list(bytes.fromhex(att["signature"])), separators=(",", ":"))
            line = line.replace(f'"{att["signature"]}"', old)
        lines.append(line)
    old_file = tmp_path / "old.jsonl"
    old_file.write_text("".join(x + "\n" for x in lines))
    assert '"signature":[' in old_file.read_text()
    assert verify_ours(old_file, key_arg()).is_sound
    # not what agentplane reads (it counts those records unsigned): why the writer changed
    assert not interop22.check_export(old_file, key_arg())["is_sound"]


# -- 2. numbers as agentplane formats them, exact ties included -----------------------------


def fuzzed_doubles(n: int, seed: int = 36) -> list[float]:
    """``n`` doubles, seeded: random bit patterns, and the families exact ties live in
    (odd multiples of 2^-1 .. 2^-4 near 2^50..2^53, powers of two and their neighbours,
    subnormals), the [2^53, 1e21) integers, short decimals and the layout boundaries."""
    rng = random.Random(seed)
    out: list[float] = list(NUMBERS_EDGE)
    while len(out) < n:
        family = rng.randrange(6)
        if family == 0:
            x = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
            if not math.isfinite(x):
                continue
        elif family == 1:  # m / 2^j with m odd, magnitude 2^48..2^53: 1973340522371668.25
            j = rng.randrange(1, 5)
            x = math.ldexp(rng.randrange(2**48, 2**53) | 1, -j)
        elif family == 2:  # 2^e and its neighbours: 2^-25 = 2.98023223876953125e-8
            x = math.ldexp(1.0, rng.randrange(-1074, 1024))
            x = rng.choice([x, math.nextafter(x, 0.0), math.nextafter(x, math.inf)])
        elif family == 3:  # subnormals
            x = math.ldexp(rng.randrange(1, 2**52), -1074)
        elif family == 4:  # integers as doubles up to and beyond 1e21 (2^64, 1e20 ...)
            x = float(rng.randrange(2**53, 2 * 10**21))
        else:  # short decimals
            x = round(rng.uniform(-1e6, 1e6), rng.randrange(0, 8))
            x = x * 10.0 ** rng.randrange(-30, 30)
            if not math.isfinite(x):
                continue
        out.append(-x if rng.random() < 0.3 else x)
    return out[:n]


NUMBERS_EDGE = [
    *NUMBERS[:10],
    1424953923781206.25,  # RFC 8785 Appendix B's one exact tie
    2.0**-25,
    1e16,
    2.0**53,
    float(2**64),
    1e21 - 2**17,
    sys.float_info.max,
    sys.float_info.min,
]


def test_canon_v1_is_agentplanes_canon_on_a_fuzzed_set() -> None:
    doubles = fuzzed_doubles(100_000)
    lines = [repr(x) for x in doubles]
    # and compound values, where the fast path writes plain dicts and lists
    compound = [{"a": doubles[i], "b": [doubles[i + 1], "s", 1]} for i in range(0, 4000, 2)]
    lines += [json.dumps(v) for v in compound]
    theirs = interop22.run("canon", stdin="\n".join(lines) + "\n").splitlines()
    ours = [canonical_bytes_v1(x).decode() for x in doubles]
    ours += [canonical_bytes_v1(v).decode() for v in compound]
    assert len(theirs) == len(ours)
    ties = sum(es_number(x) != agentplane_number(x) for x in doubles)
    differ = [(line, o, t) for line, o, t in zip(lines, ours, theirs, strict=True) if o != t]
    assert not differ, differ[:10]
    # the set holds ties (on which RFC 8785's even digits would have disagreed)
    standard = [canonical_bytes_rfc8785(x).decode() for x in doubles]
    assert ties > 100 and sum(s != t for s, t in zip(standard, theirs, strict=False)) == ties


FIELDS = ("step", "phase", "ordinal", "attempt", "kind", "args")


def test_effect_keys_are_agentplanes_for_arguments_with_ties() -> None:
    doubles = [x for x in fuzzed_doubles(30_000, seed=7) if es_number(x) != agentplane_number(x)]
    rng = random.Random(3)
    calls = []
    for i in range(3000):
        args = {"args": [f"o{i}", rng.choice(doubles), rng.random()], "kwargs": {"n": i}}
        step, ordinal, attempt = rng.randrange(5), rng.randrange(8), rng.randrange(1, 4)
        phase = rng.choice(["forward", "compensating"])
        calls.append((step, phase, ordinal, attempt, "pay", args))
    lines = [json.dumps(dict(zip(FIELDS, c, strict=True))) for c in calls]
    theirs = interop22.run("effect-key", stdin="\n".join(lines) + "\n").split()
    ours = [AGENTPLANE_0_22.effect_key(*c).hex() for c in calls]
    assert ours == theirs
    # with RFC 8785's even digits, every one of these keys would differ
    standard = [
        EffectKey.derive(s, p, o, a, k, canonical_bytes_rfc8785(args)).hex()
        for s, p, o, a, k, args in calls
    ]
    assert sum(x != y for x, y in zip(standard, theirs, strict=True)) == len(calls)


async def test_agentplane_reseals_our_records_with_ties_to_the_same_bytes(
    make_store: Any, tmp_path: Path
) -> None:
    """Records holding every number layout, ties included: agentplane's canon over the
    parsed value, and its typed re-seal, give back the stored bytes; its effect keys agree."""
    store: SqlJournalStore = await make_store(profile="agentplane-0.22")
    await plain_journal(store)
    report = interop22.check_export(await export(store, tmp_path / "numbers.jsonl"))
    for section in ("canon_value_roundtrip", "typed_roundtrip", "effect_keys_rederive"):
        assert report[section]["checks"] > 0, section
        assert report[section]["disagreements"] == 0, report[section]
    assert report["is_sound"], report["verify_report"]


async def test_body_is_agentplanes_writer_text_for_our_records(
    make_store: Any, tmp_path: Path
) -> None:
    """``body`` as agentplane's writer prints ``RecordBody`` (``Label`` in its declaration
    order: provenance, trust, sensitivity). The harness's serde_json (1.0.87, Debian's) writes
    ``1e20`` where agentplane 0.22's pinned 1.0.151 writes ``1e+20``, hence the section that
    reads the two alike."""
    store: SqlJournalStore = await make_store(profile="agentplane-0.22")
    await plain_journal(store)
    report = interop22.check_export(await export(store, tmp_path / "body.jsonl"))
    section = report["body_text_equals_agentplane_writer_modulo_exponent_plus"]
    assert section["checks"] > 0 and section["disagreements"] == 0, section


# -- 3. numbers read back as their writer wrote them ----------------------------------------


async def test_we_restore_agentplanes_export_byte_for_byte(make_store: Any, tmp_path: Path) -> None:
    """agentplane's own writer's file (every number layout: 1e20 and 1.2345678901234568e20
    as integers, 1e16, 1e+21, 1e-7, 0.000001, u64::MAX, i64::MIN ...) restores faithfully,
    and every record comes back with the file's bytes."""
    path, _ = agentplane_export(tmp_path)
    text = path.read_text()
    assert "100000000000000000000" in text and "123456789012345680000" in text
    store: SqlJournalStore = await make_store()
    target = store.for_tenant(f"r{uuid.uuid4().hex[:10]}")
    report = await restore_export(target, path)
    assert report.is_faithful, report.to_json()
    run: RunId | None = None
    compared = 0
    for line in filter(None, text.split("\n")):  # (not splitlines: U+2028 is in a string)
        value = json.loads(line)
        if value.get("kind") == "agentplane.export.run":
            run = RunId.parse(value["run"])
            rows = await target.read(run)
        elif value.get("kind") is None:
            assert rows[value["seq"] - 1].raw == value["raw"].encode(), value["seq"]
            compared += 1
    assert compared == report.records > 0


async def test_agentplane_restores_our_export_with_every_number_layout(
    make_store: Any, tmp_path: Path
) -> None:
    store: SqlJournalStore = await make_store(profile="agentplane-0.22")
    await plain_journal(store)
    report = interop22.restore(await export(store, tmp_path / "numbers.jsonl"))
    assert report["faithful"]["disagreements"] == 0, report["restore"]
    assert report["record_bytes"]["checks"] > 0
    assert report["record_bytes"]["disagreements"] == 0, report["record_bytes"]


# -- 5. what agentplane 0.22 accepts from an agentplane-0.4 tenant ----------------------------


async def test_what_agentplane_022_says_of_a_04_tenants_export(
    make_store: Any, tmp_path: Path
) -> None:
    """The backup page's account, pinned: 0.22 lists derived digests as not checked for
    canon 0, decodes each record as its own RecordBody, finds a 0.4 RunAdmitted malformed (no
    `canon`) and then reports the rest of that run as tampered; the root holds; its restore
    refuses. Ours calls the same file sound and restores it."""
    store: SqlJournalStore = await make_store(profile="agentplane-0.4")
    await plain_journal(store, runs=2)
    path = await export(store, tmp_path / "p04.jsonl")
    report = interop22.check_export(path)
    assert report["header"]["canon"] == 0
    assert any(n.startswith("derived digests") for n in report["verify_report"]["not_checked"])
    assert report["merkle_root"]["disagreements"] == 0 and report["chains"]["disagreements"] == 0
    errors = {d["error"].split(" at ")[0] for d in report["typed_decode"]["detail"]}
    assert errors == {"missing field `canon`"}
    findings = report["verify_report"]["findings"]
    assert len(findings) == 2 * 7  # per run: malformed, a gap, 3 "edited", chain head, leaf
    assert sum("edited after it was sealed" in f for f in findings) == 2 * 3
    refused = interop22.restore(path)["restore"]
    assert "missing field `canon`" in refused["error"]
    assert verify_ours(path).is_sound


# -- 4. the steps layer's records as agentplane 0.22 reads them --------------------------------


async def test_agentplane_reads_the_steps_layers_journal(make_store: Any, tmp_path: Path) -> None:
    """Every record decodes as agentplane's typed RecordBody and re-seals to its bytes, its
    verify calls the file sound, its restore rebuilds it byte for byte."""
    store: SqlJournalStore = await make_store(profile="agentplane-0.22")
    await steps_journal(store)
    path = await export(store, tmp_path / "steps.jsonl")
    report = interop22.check_export(path)
    for section in ("typed_decode", "typed_roundtrip", "canon_value_roundtrip"):
        assert report[section]["checks"] > 0, section
        assert report[section]["disagreements"] == 0, report[section]["detail"][:3]
    assert report["is_sound"], report["verify_report"]["findings"]
    assert not interop22.disagreements(
        report,
        ignore=("body_text_equals_agentplane_writer",),  # serde_json 1.0.87's `1e20`
    )
    restored = interop22.restore(path)
    assert restored["faithful"]["disagreements"] == 0, restored["restore"]
    assert restored["record_bytes"]["disagreements"] == 0, restored["record_bytes"]
    assert verify_ours(path).is_sound


#: Wire bodies (kind, payload, env) in and out of agentplane 0.22's RecordBody.
TYPED_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("RunAdmitted", {"capability": "c", "input": None, "input_label": TRUSTED_LABEL}, {}),
    ("RunAdmitted", {"capability": "c", "input": None}, {}),  # no input_label
    ("RunAdmitted", {"capability": "c", "input": 1, "input_label": {"trust": "trusted"}}, {}),
    ("EffectStarted", {**STARTED, "recovery": {"mode": "reconcile"}}, {"step": 0}),
    ("EffectStarted", {**STARTED, "recovery": "reconcile"}, {"step": 0}),  # bare string
    ("EffectStarted", {**STARTED, "recovery": {"mode": "idempotent"}}, {"step": 0}),  # no key
    ("EffectStarted", {**STARTED, "recovery": {"mode": "idempotent", "key": "k"}}, {"step": 0}),
    ("EffectStarted", {**STARTED, "ordinal": 3}, {"step": 0}),  # readable; re-seal drops it
    (
        "EffectDone",
        {"output": 1, "declared": {"trust": "untrusted", "sensitivity": "internal"}},
        {},
    ),
    ("EffectFailed", {"error": "e", "disposition": "did_not_happen"}, {}),
    ("EffectFailed", {"error": "e", "disposition": "gone"}, {}),
    ("EffectReconciled", {"disposition": "landed", "output": 2}, {}),
    ("Note", {"text": "n"}, {}),
    ("StepFinished", {}, {}),  # no outcome
    ("CustomKind", {"x": 1}, {}),  # a kind 0.22 does not define
]


async def test_our_typed_decode_agrees_with_agentplanes(make_store: Any, tmp_path: Path) -> None:
    """Record by record, verify-export's typed decode (canon 1) reads what agentplane's reads
    and refuses what it refuses; the export is SOUND for one exactly when for the other."""
    from agentplane_journal.exportfmt.typed_022 import decode_problem

    store: SqlJournalStore = await make_store(profile="agentplane-0.22")
    p = store.profile
    runs = []
    for kind, payload, env in TYPED_CASES:
        run = RunId.generate()
        runs.append(run)
        key = EffectKey.derive(0, "forward", len(runs), 1, "probe", b"1")
        await store.append(1, [p.append(run, kind, payload, effect_key=key, **env)])
    path = await export(store, tmp_path / "typed.jsonl")
    theirs = interop22.check_export(path)
    refused = {json.loads(d["raw"])["run"] for d in theirs["typed_decode"]["detail"]}
    ours = {
        json.loads(json.loads(line)["raw"])["run"]
        for line in path.read_text().split("\n")
        if line.startswith('{"seq"') and decode_problem(json.loads(json.loads(line)["raw"]))
    }
    assert ours == refused, (ours, refused)
    assert len(refused) == 7, [d["error"] for d in theirs["typed_decode"]["detail"]]
    assert verify_ours(path).is_sound is theirs["is_sound"] is False


async def test_verify_export_is_never_sound_where_agentplanes_verify_is_not(
    make_store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A steps journal written the way the layer wrote before issue 36 (no input_label, a
    bare-string recovery): agentplane's verify rejects it, and verify-export now says so
    too (it called it SOUND); the same journal written now is sound for both."""
    from agentplane_journal.steps import records as steps_records

    old_store: SqlJournalStore = await make_store(profile="agentplane-0.22")
    with monkeypatch.context() as old:
        old.setattr(steps_records, "_is_022", lambda _: False)
        await steps_journal(old_store)
    old_file = await export(old_store, tmp_path / "old.jsonl")
    assert not interop22.check_export(old_file)["is_sound"]
    report = verify_ours(old_file)
    assert not report.is_sound
    assert any("input_label" in f for f in report.findings)
    assert any("Recovery" in f for f in report.findings)
