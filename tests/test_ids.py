"""Digests, run/case ids, effect keys, tenants and step ids."""

from __future__ import annotations

import copy
import pickle
import struct

import pytest
from ulid import ULID

from agentplane_journal.core.ids import (
    DEFAULT_TENANT,
    CaseId,
    Digest,
    EffectKey,
    RunId,
    validate_step,
    validate_tenant,
)

ULID_TEXT = "01ARZ3NDEKTSV4RRFFQ69G5FAV"

# --- Digest ----------------------------------------------------------------------------------


def test_digest_known_answers_from_the_wire_format() -> None:
    empty = Digest.of(b"")
    assert empty.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert (
        Digest.of(b"agentplane").hex()
        == "c0f8f77669f4860960387db0dc9984894587bcfcc75d1846ffd3574563833443"
    )
    assert (
        Digest.chain(empty, b"agentplane").hex()
        == "171c5eddf30189b0efde9c71eb14f77685fab77d7750152d032f9e7cf4181159"
    )


def test_zero_digest_is_32_zero_bytes() -> None:
    assert bytes(Digest.ZERO) == bytes(32)
    assert Digest.ZERO.hex() == "0" * 64


def test_digest_round_trips_through_hex_and_bytes() -> None:
    d = Digest.of(b"x")
    assert Digest.from_hex(d.hex()) == d
    assert Digest.from_hex(d.hex().upper()) == d
    assert Digest(bytes(d)) == d
    assert Digest(bytearray(bytes(d))) == d


@pytest.mark.parametrize("size", [0, 31, 33, 64])
def test_a_digest_is_exactly_32_bytes(size: int) -> None:
    with pytest.raises(ValueError, match="exactly 32 bytes"):
        Digest(bytes(size))


def test_a_digest_is_not_built_from_text() -> None:
    with pytest.raises(TypeError):
        Digest("00" * 32)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "00" * 31,
        "00" * 33,
        "0" * 63,
        "g" * 64,
        " " + "0" * 63,
        "00 " * 21 + "0",
        "ek:" + "0" * 64,
    ],
)
def test_digest_hex_must_be_exactly_64_hex_digits(text: str) -> None:
    with pytest.raises(ValueError, match="64 hex digits"):
        Digest.from_hex(text)


def test_digests_compare_by_value_hash_and_are_immutable() -> None:
    a, b = Digest.of(b"a"), Digest.of(b"a")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != Digest.of(b"b")
    assert a != bytes(a)
    with pytest.raises(AttributeError):
        a._bytes = b"x" * 32  # type: ignore[misc]
    with pytest.raises(AttributeError):
        a.other = 1  # type: ignore[attr-defined]


def test_digest_survives_pickle_and_copy() -> None:
    d = Digest.of(b"p")
    assert pickle.loads(pickle.dumps(d)) == d
    assert copy.deepcopy(d) == d


def test_digest_repr_is_short() -> None:
    assert repr(Digest.from_hex("2895d243" + "0" * 56)) == "Digest(2895d243…)"


def test_a_digest_never_equals_an_effect_key_with_the_same_bytes() -> None:
    raw = bytes(range(32))
    assert Digest(raw) != EffectKey(raw)
    assert len({Digest(raw), EffectKey(raw)}) == 2


# --- RunId / CaseId --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        ULID_TEXT,
        "run_" + ULID_TEXT,
        ULID_TEXT.lower(),
        "run_" + ULID_TEXT.lower(),
        "RUN_" + ULID_TEXT,
    ],
)
def test_run_ids_parse_prefixed_or_bare_in_either_case(text: str) -> None:
    run = RunId.parse(text)
    assert run.ulid == ULID_TEXT
    assert str(run) == "run_" + ULID_TEXT
    assert run == RunId(text)


def test_case_ids_use_the_case_prefix() -> None:
    case = CaseId.parse("case_" + ULID_TEXT)
    assert str(case) == "case_" + ULID_TEXT
    assert case.ulid == ULID_TEXT
    assert CaseId.parse(ULID_TEXT) == case
    assert repr(case) == f"CaseId('case_{ULID_TEXT}')"
    assert repr(RunId.parse(ULID_TEXT)) == f"RunId('run_{ULID_TEXT}')"


def test_a_prefix_of_the_other_kind_is_refused_not_stripped() -> None:
    with pytest.raises(ValueError, match=f"'case_{ULID_TEXT}' is not a RunId"):
        RunId.parse("case_" + ULID_TEXT)
    with pytest.raises(ValueError, match="is not a CaseId"):
        CaseId.parse("run_" + ULID_TEXT)
    with pytest.raises(ValueError, match="is a CaseId, not a RunId"):
        RunId.parse(CaseId.parse(ULID_TEXT))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "run_",
        "nope",
        ULID_TEXT[:-1],
        ULID_TEXT + "0",
        "8" + ULID_TEXT[1:],  # 130-bit overflow: a ULID starts with 0-7
        ULID_TEXT[:-1] + "I",  # not in Crockford's alphabet
        ULID_TEXT[:-1] + "U",
        ULID_TEXT.replace("S", "\u017f"),  # long s: upper-cases to S, still not ASCII
        " run_" + ULID_TEXT,
        "run-" + ULID_TEXT,
        "run_run_" + ULID_TEXT,
    ],
)
def test_malformed_run_ids_are_a_value_error_naming_the_text(text: str) -> None:
    with pytest.raises(ValueError) as info:
        RunId.parse(text)
    assert repr(text) in str(info.value)


def test_run_id_rejects_non_text() -> None:
    with pytest.raises(TypeError):
        RunId.parse(42)  # type: ignore[arg-type]


def test_parsing_an_existing_id_returns_it() -> None:
    run = RunId.generate()
    assert RunId.parse(run) is run
    assert RunId(run) == run


def test_ids_accept_a_ulid_object() -> None:
    u = ULID.from_str(ULID_TEXT)
    assert RunId(u).ulid == ULID_TEXT


def test_generated_ids_are_distinct_and_parse_back() -> None:
    runs = {RunId.generate() for _ in range(200)}
    assert len(runs) == 200
    for run in runs:
        assert RunId.parse(str(run)) == run
        assert RunId.parse(run.ulid) == run


def test_run_ids_order_by_their_text_and_hash_by_value() -> None:
    texts = [
        "01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "01BX5ZZKBKACTAV9WEVGEMMVRZ",
        "7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
    ]
    runs = [RunId.parse(t) for t in reversed(texts)]
    assert [r.ulid for r in sorted(runs)] == texts
    assert sorted(runs) == sorted(runs, key=lambda r: str(r).encode())
    assert runs[0] > runs[1] >= runs[1]
    assert RunId.parse(texts[0]) <= RunId.parse(texts[0].lower())
    assert hash(RunId.parse(texts[0])) == hash(RunId.parse("run_" + texts[0]))
    assert RunId.parse(texts[0]) != CaseId.parse(texts[0])


def test_ids_are_immutable_and_pickle() -> None:
    run = RunId.parse(ULID_TEXT)
    with pytest.raises(AttributeError):
        run._ulid = "x"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(run)) == run


# --- EffectKey -------------------------------------------------------------------------------

# The conformance battery's key(n): step 0, forward, ordinal n, attempt 1, kind "probe",
# args = the single byte n. The digest lists first and last hex digits; these are whole.
KEY_N = {
    1: "0e1b3df3a102a6e236149179fab2d4a7b83ed7426835eee6f27dbd07d020e4da",
    2: "6c3cc8fee84a003f51cbeeac338a3f4771e0f50db7dc71272fbd460ca1e1d471",
    3: "44ae3c69c1474f86884373049434169f9044c8baf16aa8ceab292059653e8070",
    201: "954456f3316e0bd2c9ec0150c3336fd94310a6d7412a8752d55b1c36cedef30f",
}


@pytest.mark.parametrize("n", sorted(KEY_N))
def test_effect_key_derivation_matches_the_battery_fixture(n: int) -> None:
    key = EffectKey.derive(0, "forward", n, 1, "probe", bytes([n]))
    assert key.hex() == KEY_N[n]


def test_effect_key_derivation_lays_out_fields_big_endian() -> None:
    args = b'{"q":1}'
    layout = struct.pack(">IBIIQ", 7, 1, 2, 3, len("ħ".encode())) + "ħ".encode() + args
    assert EffectKey.derive(7, "compensating", 2, 3, "ħ", args) == EffectKey(
        bytes(Digest.of(layout))
    )
    assert EffectKey.derive(7, "forward", 2, 3, "x", b"") != EffectKey.derive(
        7, "compensating", 2, 3, "x", b""
    )


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((2**32, "forward", 0, 1), ValueError),
        ((-1, "forward", 0, 1), ValueError),
        ((0, "forward", 2**32, 1), ValueError),
        ((0, "forward", 0, -1), ValueError),
        ((0, "sideways", 0, 1), ValueError),
        ((True, "forward", 0, 1), TypeError),
        ((0, "forward", 1.0, 1), TypeError),
        ((0, None, 0, 1), TypeError),
    ],
)
def test_effect_key_derivation_refuses_out_of_range_input(
    args: tuple[object, ...], error: type[Exception]
) -> None:
    with pytest.raises(error):
        EffectKey.derive(*args, "probe", b"")  # type: ignore[arg-type]


def test_effect_key_hex_has_no_ek_prefix() -> None:
    key = EffectKey.from_hex(KEY_N[1])
    assert key.hex() == KEY_N[1]
    assert bytes(key) == bytes.fromhex(KEY_N[1])
    assert repr(key) == "EffectKey(ek:0e1b3df3…)"
    with pytest.raises(ValueError, match="64 hex digits"):
        EffectKey.from_hex("ek:" + KEY_N[1])
    with pytest.raises(ValueError):
        EffectKey(bytes(31))


# --- tenants and steps -----------------------------------------------------------------------


def test_the_default_tenant_is_named_default() -> None:
    assert DEFAULT_TENANT == "default"
    assert validate_tenant(DEFAULT_TENANT) == "default"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("  acme  ", "acme"),
        ("\tacme\n", "acme"),
        ("\u3000acme\u00a0", "acme"),
        ("a" * 64, "a" * 64),
        ("ünïcödé", "ünïcödé"),
        ("team.one-2_x", "team.one-2_x"),
    ],
)
def test_tenant_names_are_trimmed(name: str, expected: str) -> None:
    assert validate_tenant(name) == expected


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("a/b", "'/'"),
        ("a:b", "':'"),
        ("a\x00b", "U\\+0000"),
        ("a\nb", "U\\+000A"),
        ("a\x7fb", "U\\+007F"),
        ("\x1cacme", "U\\+001C"),  # str.strip() would drop it; Rust's trim does not
        ("a" * 65, "65 characters"),
        ("\U0001f600" * 17, "68 bytes"),
    ],
)
def test_bad_tenant_names_are_refused_naming_the_problem(name: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        validate_tenant(name)


def test_a_tenant_name_must_be_text() -> None:
    with pytest.raises(TypeError):
        validate_tenant(b"acme")  # type: ignore[arg-type]


def test_step_ids_are_u32() -> None:
    assert validate_step(0) == 0
    assert validate_step(2**32 - 1) == 2**32 - 1
    for bad in (-1, 2**32):
        with pytest.raises(ValueError, match="step"):
            validate_step(bad)
    for wrong in (True, 1.0, "1", None):
        with pytest.raises(TypeError, match="step"):
            validate_step(wrong)


def test_chaining_needs_a_digest_not_raw_bytes() -> None:
    with pytest.raises(TypeError, match="prev must be a Digest"):
        Digest.chain(bytes(32), b"x")  # type: ignore[arg-type]


# --- equality is type-strict: an id never equals its text -----------------------------------


@pytest.mark.parametrize("cls", [RunId, CaseId])
def test_an_id_never_equals_its_text_either_way(cls: type[RunId] | type[CaseId]) -> None:
    ident = cls.parse(ULID_TEXT)
    for text in (str(ident), ident.ulid, str(ident).upper()):
        assert (ident == text) is False and (text == ident) is False
        assert ident != text and text != ident
        assert ident.__eq__(text) is NotImplemented
    assert ident != ULID.from_str(ULID_TEXT)
    assert str(ident) in {str(ident)} and ident not in {str(ident)}
    assert ident not in [str(ident), ident.ulid]
    assert {ident: 1}.get(str(ident)) is None  # hash differs from the text's, so no dict aliasing
    with pytest.raises(TypeError):
        _ = ident < str(ident)  # type: ignore[operator]


def test_a_run_id_never_equals_a_case_id_with_the_same_ulid() -> None:
    assert RunId.parse(ULID_TEXT) != CaseId.parse(ULID_TEXT)
    assert CaseId.parse(ULID_TEXT) != RunId.parse(ULID_TEXT)
