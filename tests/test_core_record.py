"""Reading a stored record: every envelope check, every edge, every refusal's seq
(core/record.py), each held by a test that fails without it.

Written against the mutants that survived the older tests (tools/mutation.py). Each hostile
body here carries a valid hash: whoever can write the table can compute one.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentplane_journal.core.append import Append
from agentplane_journal.core.canon import MAX_DEPTH, canonical_bytes
from agentplane_journal.core.ids import CaseId, Digest, EffectKey, RunId
from agentplane_journal.core.record import (
    MAX_RECORD_BYTES,
    Attestation,
    Record,
    check_envelope,
    is_canonical_ulid,
)
from agentplane_journal.core.signing import Ed25519Signer
from agentplane_journal.errors import CorruptRecordError, RecordTooLargeError

RUN = RunId.parse("01ARZ3NDEKTSV4RRFFQ69G5FAV")
CASE = CaseId.parse("01BX5ZZKBKACTAV9WEVGEMMVRZ")
KEY = EffectKey(bytes(range(32)))
I64 = 2**63 - 1
U32 = 2**32 - 1
DROP: Any = object()


def body(**changes: Any) -> dict[str, Any]:
    out = Append(RUN, "EffectStarted", {"text": "hi"}, case=CASE, step=3, effect_key=KEY).body(7, 2)
    for name, value in changes.items():
        if value is DROP:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def raw_of(value: dict[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def read(raw: bytes, seq: int | None = None) -> Record:
    """``Record.from_stored`` of ``raw`` with a hash that covers it."""
    return Record.from_stored(raw, Digest.ZERO, Digest.chain(Digest.ZERO, raw), seq=seq)


def refused(raw: bytes, seq: int | None = None) -> CorruptRecordError:
    with pytest.raises(CorruptRecordError) as info:
        read(raw, seq)
    return info.value


# --- check_envelope ----------------------------------------------------------------------------

PROBLEMS = {
    "seq": "record body has no integer 'seq' member in 1..2^63-1",
    "run": "record body has no string 'run' member",
    "kind": "record body has no string 'kind' member",
    "epoch": "record body has no integer 'epoch' member in 0..2^63-1",
    "v": "record body has no integer 'v' member in 0..65535",
    "case": "record body's 'case' member is not a bare upper-case ULID",
    "effect_key": "record body's 'effect_key' member is not 64 lower-case hex digits",
    "step": "record body's 'step' member is not an unsigned 32-bit integer",
    "phase": "record body's 'phase' member is not a known phase",
}


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("seq", 0),
        ("seq", -1),
        ("seq", I64 + 1),
        ("seq", True),
        ("seq", 7.0),
        ("seq", "7"),
        ("seq", DROP),
        ("run", None),
        ("run", 7),
        ("run", DROP),
        ("kind", ""),
        ("kind", None),
        ("kind", 7),
        ("kind", ["EffectStarted"]),
        ("kind", DROP),
        ("epoch", -1),
        ("epoch", I64 + 1),
        ("epoch", True),
        ("epoch", "2"),
        ("epoch", DROP),
        ("v", -1),
        ("v", 65536),
        ("v", True),
        ("v", 4.0),
        ("v", "4"),
        ("v", None),
        ("v", DROP),
        ("case", CASE.ulid.lower()),
        ("case", 7),
        ("case", None),
        ("effect_key", KEY.hex().upper()),
        ("effect_key", KEY.hex()[:-1]),
        ("effect_key", KEY.hex() + "0"),
        ("effect_key", "g" * 64),
        ("effect_key", None),
        ("effect_key", 7),
        ("step", -1),
        ("step", U32 + 1),
        ("step", True),
        ("step", 3.0),
        ("step", None),
        ("phase", "sideways"),
        ("phase", "Forward"),
        ("phase", None),
        ("phase", ["forward"]),
    ],
)
def test_check_envelope_refuses_each_bad_member_with_its_own_problem(
    member: str, value: Any
) -> None:
    assert check_envelope(body(**{member: value})) == PROBLEMS[member]
    error = refused(raw_of(body(**{member: value})), seq=5)
    assert (error.seq, error.detail) == (5, PROBLEMS[member])


@pytest.mark.parametrize(
    "changes",
    [
        {"seq": 1},
        {"seq": I64},
        {"epoch": 0},
        {"epoch": I64},
        {"v": 0},
        {"v": 65535},
        {"step": 0},
        {"step": U32},
        {"step": DROP, "effect_key": DROP, "case": DROP},
        {"phase": "compensating"},
        {"phase": "forward"},
        {"kind": "K"},
    ],
)
def test_check_envelope_accepts_each_range_edge(changes: dict[str, Any]) -> None:
    value = body(**changes)
    assert check_envelope(value) is None
    assert read(raw_of(value)).body == value


@pytest.mark.parametrize(
    "ulid",
    [
        RUN.ulid.lower(),
        "8" + RUN.ulid[1:],  # past the 128-bit range
        "I" + RUN.ulid[1:],
        RUN.ulid[:-1] + "L",
        RUN.ulid[:-1] + "O",
        RUN.ulid[:-1] + "U",
        RUN.ulid[:-1] + "-",
        "run_" + RUN.ulid[:22],  # 26 characters, not a ULID
        RUN.ulid[:-1],
        RUN.ulid + "0",
        " " * 26,
    ],
)
def test_only_a_bare_upper_case_ulid_is_a_run_or_a_case(ulid: str) -> None:
    assert not is_canonical_ulid(ulid)
    assert check_envelope(body(run=ulid)) == (
        f"record body's 'run' member {ulid[:40]!r} is not a bare upper-case ULID"
    )
    assert check_envelope(body(case=ulid)) == PROBLEMS["case"]


def test_a_canonical_ulid_is_accepted_from_the_smallest_to_the_largest() -> None:
    for ulid in ("0" * 26, "7" + "Z" * 25, RUN.ulid, CASE.ulid):
        assert is_canonical_ulid(ulid)
        assert check_envelope(body(run=ulid, case=ulid)) is None


# --- from_stored: what each refusal names -------------------------------------------------------


def test_a_hash_mismatch_names_the_column_seq_else_the_seq_the_bytes_claim_else_0() -> None:
    raw = raw_of(body())
    wrong = Digest.of(b"not it")
    for seq, expected in ((9, 9), (0, 0), (None, 7)):
        with pytest.raises(CorruptRecordError, match="hash mismatch") as info:
            Record.from_stored(raw, Digest.ZERO, wrong, seq=seq)
        assert info.value.seq == expected
    for claimed, expected in ((b"[7]", 0), (b'{"seq":-3}', 0), (b'{"seq":0}', 0), (b"[", 0)):
        with pytest.raises(CorruptRecordError, match="hash mismatch") as info:
            Record.from_stored(claimed, Digest.ZERO, wrong)
        assert info.value.seq == expected
    with pytest.raises(CorruptRecordError, match="hash mismatch") as info:
        Record.from_stored(b'{"seq":12}', Digest.ZERO, wrong)
    assert info.value.seq == 12
    with pytest.raises(CorruptRecordError, match="hash mismatch") as info:
        Record.from_stored(b'{"seq":' + b"[" * 5000 + b"}", Digest.ZERO, wrong)
    assert info.value.seq == 0


def test_a_bad_envelope_names_the_column_seq_else_the_body_seq_else_0() -> None:
    assert refused(raw_of(body(kind="")), seq=3).seq == 3
    assert refused(raw_of(body(kind=""))).seq == 7
    assert refused(raw_of(body(seq=True))).seq == 0
    assert refused(raw_of(body(seq="7"))).seq == 0
    assert refused(raw_of(body(seq=0))).seq == 0


@pytest.mark.parametrize(
    "raw",
    [b"\xff", b"{", b"[]", b"7", b'"x"', b"null", raw_of(body()) + b"x"],
)
def test_bytes_that_are_not_a_record_body_name_the_column_seq_else_0(raw: bytes) -> None:
    assert refused(raw).seq == 0
    assert refused(raw, seq=4).seq == 4


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_a_body_holding_nan_or_infinity_is_corrupt_not_null(constant: bytes) -> None:
    raw = raw_of(body())[:-1] + b',"x":' + constant + b"}"
    error = refused(raw, seq=2)
    assert error.seq == 2
    assert "not a JSON record body" in error.detail
    assert f"{constant.decode()} is not JSON" in error.detail


def test_an_escaped_case_member_is_refused_naming_the_seq() -> None:
    raw = raw_of(body()).replace(CASE.ulid.encode(), CASE.ulid[:-1].encode() + b"\\u005A")
    assert json.loads(raw)["case"] == CASE.ulid
    error = refused(raw)
    assert (error.seq, "'case' member is escaped" in error.detail) == (7, True)
    assert refused(raw, seq=3).seq == 3
    assert read(raw_of(body(case=DROP))).case is None


# --- depth: the exact limit, through lists and through objects --------------------------------


def nested(levels: int, container: str) -> Any:
    """``levels`` containers, one inside the other, innermost empty."""
    value: Any = [] if container == "list" else {}
    for _ in range(levels - 1):
        value = [value] if container == "list" else {"k": value}
    return value


@pytest.mark.parametrize("container", ["list", "object"])
def test_nesting_is_refused_one_past_the_limit_through_lists_and_objects(container: str) -> None:
    # The body is level 1: its member may nest MAX_DEPTH - 1 more on write.
    at_limit = body(deep=nested(MAX_DEPTH - 1, container))
    sealed = Record.seal(at_limit, Digest.ZERO)
    assert Record.from_stored(sealed.raw, sealed.prev_hash, sealed.hash).body == at_limit
    with pytest.raises(ValueError, match=f"nested more than {MAX_DEPTH} levels"):
        Record.seal(body(deep=nested(MAX_DEPTH, container)), Digest.ZERO)
    # Reading allows one more level (agentplane's decoder's limit), and refuses the next.
    assert read(raw_of(body(deep=nested(MAX_DEPTH, container)))).body["deep"] is not None
    error = refused(raw_of(body(deep=nested(MAX_DEPTH + 1, container))))
    assert error.seq == 7
    assert f"nested more than {MAX_DEPTH} levels deep" in error.detail
    assert refused(raw_of(body(deep=nested(MAX_DEPTH + 1, container))), seq=2).seq == 2


def test_many_small_containers_side_by_side_are_not_deep() -> None:
    """More brackets than the depth limit, none of them deep: an honest record."""
    for wide in ([{"n": i} for i in range(128)], [[i] for i in range(300)], {"a": [{}] * 200}):
        value = body(wide=wide)
        sealed = Record.seal(value, Digest.ZERO)
        assert Record.from_stored(sealed.raw, sealed.prev_hash, sealed.hash).body == value


def test_a_body_nested_past_the_decoders_own_limit_is_corrupt_naming_the_seq() -> None:
    raw = raw_of(body())[:-1] + b',"deep":' + b"[" * 5000 + b"]" * 5000 + b"}"
    error = refused(raw)
    assert error.seq == 0
    assert f"canonical records stop at {MAX_DEPTH} levels" in error.detail
    assert refused(raw, seq=6).seq == 6


# --- typed members of the wrong JSON type -------------------------------------------------------


def record_of(value: dict[str, Any]) -> Record:
    return read(raw_of(value))


@pytest.mark.parametrize("key", [7, True, ["k"], {"k": 1}, 1.5])
def test_an_idempotency_key_of_another_json_type_is_corrupt(key: Any) -> None:
    record = record_of(body(kind="RunAdmitted", idempotency_key=key))
    with pytest.raises(CorruptRecordError, match="idempotency_key member is a JSON") as info:
        _ = record.idempotency_key
    assert info.value.seq == 7
    assert record_of(body(kind="RunAdmitted", idempotency_key="k")).idempotency_key == "k"
    assert record_of(body(kind="RunAdmitted", idempotency_key=None)).idempotency_key is None
    assert record_of(body(kind="RunAdmitted")).idempotency_key is None
    assert record_of(body(kind="Note", idempotency_key=key)).idempotency_key is None


@pytest.mark.parametrize(
    ("kind", "member", "bad", "good", "read_as"),
    [
        ("EffectFailed", "permanent", "yes", True, True),
        ("EffectFailed", "permanent", 1, False, False),
        ("EffectDone", "declared", "trusted", {"trust": "t", "sensitivity": "s"}, None),
        ("EffectReconciled", "declared", {"trust": 1, "sensitivity": "s"}, None, None),
        ("CaseBound", "correlation", {"k": "v"}, ["a", 1], ["a", 1]),
        ("CaseBound", "correlation", "a", [], []),
        ("RunSealed", "reason", 7, "done", "done"),
        ("RunAdmitted", "canon", "1", 1, 1),
    ],
)
def test_a_typed_member_of_the_wrong_json_type_is_corrupt(
    kind: str, member: str, bad: Any, good: Any, read_as: Any
) -> None:
    attribute = member
    record = record_of(body(kind=kind, **{member: bad}))
    with pytest.raises(CorruptRecordError, match="no writer produces it") as info:
        getattr(record, attribute)
    assert info.value.seq == 7
    assert member in info.value.detail
    if good is not None:
        expected = good if read_as is None else read_as
        assert getattr(record_of(body(kind=kind, **{member: good})), attribute) == expected
    # another kind, or the member absent: nothing to check, the default is read
    absent = {"permanent": False, "correlation": []}.get(member)
    assert getattr(record_of(body(kind=kind)), attribute) == absent
    assert getattr(record_of(body(kind="Note", **{member: bad})), attribute) == absent


# --- sealing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"seq": 0}, ValueError, "body.seq must be a positive int, got 0"),
        ({"seq": True}, ValueError, "body.seq must be a positive int"),
        ({"seq": "1"}, ValueError, "body.seq must be a positive int"),
        ({"seq": DROP}, ValueError, "body.seq must be a positive int, got None"),
        ({"run": 7}, ValueError, "body.run must be a str, got 7"),
        ({"kind": None}, ValueError, "body.kind must be a str, got None"),
    ],
)
def test_seal_refuses_a_body_without_its_envelope(
    changes: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        Record.seal(body(**changes), Digest.ZERO)


def test_seal_checks_its_arguments_and_signs_the_records_hash() -> None:
    with pytest.raises(TypeError, match="a record body is a dict, not list"):
        Record.seal([], Digest.ZERO)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="prev_hash must be a Digest, not bytes"):
        Record.seal(body(), bytes(32))  # type: ignore[arg-type]
    signer = Ed25519Signer("w", bytes(range(32)))
    record = Record.seal(body(seq=1), Digest.ZERO, signer)
    assert record.seq == 1
    assert record.raw == canonical_bytes(body(seq=1))
    assert record.hash == Digest.chain(Digest.ZERO, record.raw)
    assert record.attestation is not None and record.attestation.key_id == "w"
    assert Record.seal(body(seq=1), Digest.ZERO).attestation is None


def test_the_size_limit_is_inclusive_and_reports_the_real_size() -> None:
    base = len(canonical_bytes(body(pad="")))
    exact = body(pad="x" * (MAX_RECORD_BYTES - base))
    assert len(Record.seal(exact, Digest.ZERO).raw) == MAX_RECORD_BYTES
    with pytest.raises(RecordTooLargeError) as info:
        Record.seal(body(pad="x" * (MAX_RECORD_BYTES - base + 1)), Digest.ZERO)
    assert info.value.size == MAX_RECORD_BYTES + 1


def test_an_attestation_takes_a_str_key_and_bytes_like_signature() -> None:
    assert Attestation("k", bytearray(b"s")).signature == b"s"
    assert Attestation("k", memoryview(b"s")).signature == b"s"
    with pytest.raises(TypeError, match="key_id must be a str, not bytes"):
        Attestation(b"k", b"s")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="signature must be bytes, not str"):
        Attestation("k", "s")  # type: ignore[arg-type]


def test_the_record_properties_read_the_checked_body() -> None:
    record = record_of(body(phase="compensating"))
    assert (record.seq, record.epoch, record.kind, record.step) == (7, 2, "EffectStarted", 3)
    assert (record.run, record.case, record.effect_key) == (RUN, CASE, KEY)
    assert record.phase == "compensating"
    plain = record_of(body(phase=DROP, step=DROP, case=DROP, effect_key=DROP))
    assert (plain.phase, plain.step, plain.case, plain.effect_key) == ("forward", None, None, None)


# --- the rarer paths: subclasses, driver types, the texts a reader sees -----------------------


class Seq(int):
    """An int subclass, as a driver or numpy may hand one over."""


class Text(str):
    pass


class SubDigest(Digest):
    __slots__ = ()


class MyRecord(Record):
    __slots__ = ()


def test_seal_takes_int_and_str_subclasses_as_their_values() -> None:
    value = body(seq=Seq(1), run=Text(RUN.ulid), kind=Text("Note"))
    record = Record.seal(value, Digest.ZERO)
    assert record.raw == Record.seal(body(seq=1, kind="Note"), Digest.ZERO).raw
    assert type(record) is Record


def test_seal_refuses_a_digest_subclass_as_digest_chain_always_has() -> None:
    prev = SubDigest(bytes(32))
    with pytest.raises(TypeError, match="prev must be a Digest, not SubDigest"):
        Record.seal(body(seq=1), prev)


def test_a_record_subclass_seals_into_itself() -> None:
    signer = Ed25519Signer("w", bytes(range(32)))
    signed = MyRecord.seal(body(seq=1), Digest.ZERO, signer)
    assert type(signed) is MyRecord
    assert signed.attestation == Record.seal(body(seq=1), Digest.ZERO, signer).attestation
    assert signed.attestation is not None
    record = MyRecord.seal(body(seq=1), Digest.ZERO)
    plain = Record.seal(body(seq=1), Digest.ZERO)
    assert type(record) is MyRecord
    assert (record.body, record.raw, record.prev_hash, record.hash, record.attestation) == (
        plain.body,
        plain.raw,
        plain.prev_hash,
        plain.hash,
        None,
    )


def test_from_stored_checks_its_argument_types() -> None:
    raw = raw_of(body())
    good = Digest.chain(Digest.ZERO, raw)
    with pytest.raises(TypeError, match="raw must be bytes, not str"):
        Record.from_stored(raw.decode(), Digest.ZERO, good)  # type: ignore[arg-type]
    assert Record.from_stored(bytearray(raw), Digest.ZERO, good).raw == raw  # type: ignore[arg-type]
    for prev, hash_ in (
        (bytes(32), good),
        (Digest.ZERO, bytes(good)),
        (SubDigest(bytes(32)), good),
    ):
        with pytest.raises(TypeError, match="prev_hash and hash must be Digests"):
            Record.from_stored(raw, prev, hash_)  # type: ignore[arg-type]


def test_each_read_refusal_says_what_is_wrong() -> None:
    raw = raw_of(body())
    wrong = Digest.of(b"not it")
    computed = Digest.chain(Digest.ZERO, raw)
    with pytest.raises(CorruptRecordError) as info:
        Record.from_stored(raw, Digest.ZERO, wrong)
    assert info.value.detail == (
        f"hash mismatch: stored {wrong.hex()[:8]}…, recomputed {computed.hex()[:8]}… "
        "— record was altered after it was written"
    )
    assert "not a JSON record body (Extra data" in refused(raw + b"x").detail
    assert "not a JSON record body (Expecting" in refused(b"{").detail
    assert refused(b"[7]").detail == "stored bytes hold a JSON list, not a record body object"
    assert refused(b'"x"').detail == "stored bytes hold a JSON str, not a record body object"
    long_run = "R" * 50
    assert check_envelope(body(run=long_run)) == (
        f"record body's 'run' member {'R' * 40!r} is not a bare upper-case ULID"
    )


@pytest.mark.parametrize(
    ("key", "json_type"),
    [(7, "number"), (1.5, "number"), (True, "boolean"), (["k"], "array"), ({"k": 1}, "object")],
)
def test_a_wrong_idempotency_key_names_its_json_type(key: Any, json_type: str) -> None:
    record = record_of(body(kind="RunAdmitted", idempotency_key=key))
    with pytest.raises(CorruptRecordError) as info:
        _ = record.idempotency_key
    assert info.value.detail == (
        f"the RunAdmitted record's idempotency_key member is a JSON {json_type}, not a "
        "string: no writer produces it"
    )


def test_reprs_are_short_and_say_who_signed() -> None:
    assert repr(Attestation("k", bytes(range(64)))) == (
        "Attestation(key_id='k', signature=00010203…(64 bytes))"
    )
    signer = Ed25519Signer("w", bytes(range(32)))
    record = Record.seal(body(seq=1, kind="Note"), Digest.ZERO, signer)
    assert repr(record) == (
        f"Record(seq=1, run={RUN.ulid}, kind='Note', hash={record.hash!r}, signed by 'w')"
    )
    unsigned = Record.seal(body(seq=1, kind="Note"), Digest.ZERO)
    assert repr(unsigned) == f"Record(seq=1, run={RUN.ulid}, kind='Note', hash={unsigned.hash!r})"
