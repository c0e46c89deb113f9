"""Records: known answers for bodies, bytes and hashes; appends; reading; chain checks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentplane_journal.core.append import RECORD_VERSION, RESERVED_MEMBERS, Append
from agentplane_journal.core.chain import verify_chain
from agentplane_journal.core.ids import PHASES, CaseId, Digest, EffectKey, RunId
from agentplane_journal.core.record import MAX_RECORD_BYTES, Record
from agentplane_journal.errors import CorruptRecordError, RecordTooLargeError

RUN = RunId.parse("01ARZ3NDEKTSV4RRFFQ69G5FAV")
CASE = CaseId.parse("01BX5ZZKBKACTAV9WEVGEMMVRZ")
TRUSTED = {"provenance": [], "sensitivity": "public", "trust": "trusted"}

ADMITTED_RAW = (
    b'{"capability":"conformance","epoch":1,"input":null,"input_label":{"provenance":[],'
    b'"sensitivity":"public","trust":"trusted"},"kind":"RunAdmitted",'
    b'"run":"01ARZ3NDEKTSV4RRFFQ69G5FAV","seq":1,"v":4}'
)
HASH1 = "2895d2438a27e13c3d825753bf22466bf517515edd723caf8c879e35e051a31b"
SEALED_RAW = (
    b'{"chain_head":"' + b"0" * 64 + b'","epoch":1,"kind":"RunSealed","outcome":"succeeded",'
    b'"run":"01ARZ3NDEKTSV4RRFFQ69G5FAV","seq":2,"v":4}'
)
HASH2 = "5d865793cc141aa089f1fabd4315b643a6fcadce797d687c75406bf935f19174"


def admitted(run: RunId = RUN) -> Append:
    payload = {"capability": "conformance", "input": None, "input_label": TRUSTED}
    return Append(run, "RunAdmitted", payload)


def concluded(run: RunId = RUN, outcome: str = "succeeded") -> Append:
    return Append(run, "RunSealed", {"outcome": outcome, "chain_head": Digest.ZERO.hex()})


def chain(appends: list[Append], epoch: int = 1) -> list[Record]:
    records: list[Record] = []
    prev = Digest.ZERO
    for seq, item in enumerate(appends, start=1):
        record = Record.seal(item.body(seq, epoch), prev)
        records.append(record)
        prev = record.hash
    return records


def notes(n: int) -> list[Record]:
    return chain([Append(RUN, "Note", {"text": f"note {i}"}) for i in range(n)])


# --- known answers ---------------------------------------------------------------------------


def test_the_admitted_fixture_has_the_digests_raw_bytes_and_hash() -> None:
    record = Record.seal(admitted().body(1, 1), Digest.ZERO)
    assert record.raw == ADMITTED_RAW
    assert record.hash.hex() == HASH1
    assert record.prev_hash == Digest.ZERO


def test_the_run_sealed_record_chains_from_the_first() -> None:
    first, second = chain([admitted(), concluded()])
    assert second.raw == SEALED_RAW
    assert second.prev_hash == first.hash
    assert second.hash.hex() == HASH2
    assert verify_chain([first, second]).hex() == HASH2


def test_the_started_fixture_lays_out_step_and_effect_key() -> None:
    key = EffectKey(b"\xab" * 32)
    payload = {
        "descriptor": {"kind": "probe", "args": None},
        "recovery": {"mode": "retry"},
        "mutates": True,
        "attempt": 1,
        "backoff_ms": 0,
    }
    body = Append(RUN, "EffectStarted", payload, step=0, effect_key=key).body(3, 1)
    expected = (
        '{"attempt":1,"backoff_ms":0,"descriptor":{"args":null,"kind":"probe"},'
        '"effect_key":"' + "ab" * 32 + '","epoch":1,"kind":"EffectStarted","mutates":true,'
        '"recovery":{"mode":"retry"},"run":"01ARZ3NDEKTSV4RRFFQ69G5FAV","seq":3,"step":0,"v":4}'
    )
    assert Record.seal(body, Digest.ZERO).raw == expected.encode()


# --- Append ----------------------------------------------------------------------------------


def test_append_normalises_text_ids_and_defaults() -> None:
    item = Append(str(RUN), "Note", case=f"case_{CASE.ulid}", effect_key="ab" * 32)  # type: ignore[arg-type]
    assert item.run == RUN and isinstance(item.run, RunId)
    assert item.case == CASE
    assert item.effect_key == EffectKey(b"\xab" * 32)
    assert item.payload == {}
    assert item.phase == "forward" and item.v == RECORD_VERSION == 4
    assert PHASES == ("forward", "compensating")


def test_append_copies_the_payload_so_later_edits_do_not_leak_in() -> None:
    payload = {"text": "before"}
    item = Append(RUN, "Note", payload)
    payload["text"] = "after"
    assert item.payload == {"text": "before"}


@pytest.mark.parametrize("member", sorted(RESERVED_MEMBERS))
def test_a_payload_field_named_like_a_body_member_is_refused(member: str) -> None:
    with pytest.raises(ValueError, match=f"'{member}' collides with the record body's own"):
        Append(RUN, "Note", {"text": "x", member: 1})


def test_the_reserved_members_are_exactly_the_envelope() -> None:
    assert RESERVED_MEMBERS == {
        "seq",
        "run",
        "case",
        "step",
        "phase",
        "epoch",
        "v",
        "effect_key",
        "kind",
    }


def test_a_payload_that_is_not_json_is_refused_at_construction_naming_the_path() -> None:
    with pytest.raises(ValueError, match=r"^payload\.items\[3\]: NaN"):
        Append(RUN, "Note", {"items": [1, 2, 3, float("nan")]})
    with pytest.raises(TypeError, match=r"^payload\.when: datetime"):
        import datetime

        Append(RUN, "Note", {"when": datetime.datetime.now()})
    with pytest.raises(TypeError, match="payload must be a dict"):
        Append(RUN, "Note", [1, 2])  # type: ignore[arg-type]


@pytest.mark.parametrize("phase", ["", "Forward", "compensate", "backward"])
def test_an_unknown_phase_is_refused_naming_it(phase: str) -> None:
    with pytest.raises(ValueError, match=f"unknown phase '{phase}'"):
        Append(RUN, "Note", phase=phase)


@pytest.mark.parametrize(
    ("step", "error"), [(-1, ValueError), (2**32, ValueError), (True, TypeError), ("1", TypeError)]
)
def test_a_step_outside_u32_is_refused(step: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="step"):
        Append(RUN, "Note", step=step)  # type: ignore[arg-type]


@pytest.mark.parametrize("run", ["nope", f"case_{RUN.ulid}", "", RUN.ulid[:-1]])
def test_a_bad_run_id_is_refused(run: str) -> None:
    with pytest.raises(ValueError, match="is not a RunId"):
        Append(run, "Note")  # type: ignore[arg-type]


def test_kind_and_version_are_checked() -> None:
    with pytest.raises(ValueError, match="kind must not be empty"):
        Append(RUN, "")
    with pytest.raises(TypeError, match="kind must be a str"):
        Append(RUN, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"v 65536 is outside"):
        Append(RUN, "Note", v=65536)
    with pytest.raises(TypeError, match="v must be an int"):
        Append(RUN, "Note", v=True)
    with pytest.raises(ValueError, match="64 hex digits"):
        Append(RUN, "Note", effect_key="ek:" + "ab" * 32)  # type: ignore[arg-type]


def test_body_omits_unset_optional_members() -> None:
    body = Append(RUN, "Note", {"text": "hi"}).body(5, 2)
    assert body == {"text": "hi", "seq": 5, "run": RUN.ulid, "epoch": 2, "v": 4, "kind": "Note"}


def test_body_carries_every_optional_member_when_set_with_bare_ids() -> None:
    key = EffectKey(b"\x01" * 32)
    body = Append(
        RUN,
        "StepCompensated",
        {"outcome": None},
        case=CASE,
        step=9,
        phase="compensating",
        effect_key=key,
    ).body(1, 0)
    assert body == {
        "outcome": None,
        "seq": 1,
        "run": RUN.ulid,
        "case": CASE.ulid,
        "step": 9,
        "phase": "compensating",
        "epoch": 0,
        "v": 4,
        "effect_key": "01" * 32,
        "kind": "StepCompensated",
    }


@pytest.mark.parametrize(
    ("seq", "epoch", "error"),
    [
        (0, 1, ValueError),
        (-1, 1, ValueError),
        (2**63, 1, ValueError),
        (1, -1, ValueError),
        (1, 2**63, ValueError),
        (True, 1, TypeError),
        (1, False, TypeError),
        (1.0, 1, TypeError),
    ],
)
def test_body_refuses_a_bad_seq_or_epoch(
    seq: object, epoch: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        Append(RUN, "Note").body(seq, epoch)  # type: ignore[arg-type]


# --- sealing and size ------------------------------------------------------------------------


def _padded_body(size: int) -> dict[str, Any]:
    body = Append(RUN, "Note", {"text": ""}).body(1, 1)
    base = len(Record.seal(body, Digest.ZERO).raw)
    body["text"] = "x" * (size - base)
    return body


def test_a_record_of_exactly_the_limit_is_accepted() -> None:
    record = Record.seal(_padded_body(MAX_RECORD_BYTES), Digest.ZERO)
    assert len(record.raw) == MAX_RECORD_BYTES == 1_048_576


def test_an_oversized_record_reports_its_real_size_and_the_limit() -> None:
    with pytest.raises(RecordTooLargeError) as info:
        Record.seal(_padded_body(MAX_RECORD_BYTES + 1), Digest.ZERO)
    assert info.value.size == MAX_RECORD_BYTES + 1
    assert info.value.limit == MAX_RECORD_BYTES
    with pytest.raises(RecordTooLargeError) as info:
        Record.seal(_padded_body(3 * MAX_RECORD_BYTES), Digest.ZERO)
    assert info.value.size == 3 * MAX_RECORD_BYTES


def test_seal_refuses_a_body_a_reader_could_not_decode() -> None:
    with pytest.raises(ValueError, match=r"body\.seq"):
        Record.seal({"run": RUN.ulid, "kind": "Note"}, Digest.ZERO)
    with pytest.raises(ValueError, match=r"body\.kind"):
        Record.seal({"seq": 1, "run": RUN.ulid}, Digest.ZERO)
    with pytest.raises(ValueError, match=r"^body\.x: Infinity"):
        Record.seal({"seq": 1, "run": RUN.ulid, "kind": "Note", "x": float("inf")}, Digest.ZERO)


def test_record_accessors_read_the_body() -> None:
    key = EffectKey(b"\x02" * 32)
    item = Append(
        RUN, "EffectStarted", {"a": 1}, case=CASE, step=4, phase="compensating", effect_key=key
    )
    record = Record.seal(item.body(7, 3), Digest.ZERO)
    assert (record.seq, record.epoch, record.kind, record.step, record.phase) == (
        7,
        3,
        "EffectStarted",
        4,
        "compensating",
    )
    assert record.run == RUN and record.case == CASE and record.effect_key == key
    plain = Record.seal(Append(RUN, "Note").body(1, 0), Digest.ZERO)
    assert plain.case is None and plain.effect_key is None and plain.step is None
    assert plain.phase == "forward" and plain.attestation is None


def test_record_repr_is_short_and_has_no_raw_bytes() -> None:
    record = Record.seal(_padded_body(10_000), Digest.ZERO)
    text = repr(record)
    assert len(text) < 200
    assert "xxxx" not in text and "seq=1" in text and "Note" in text


# --- reading back ----------------------------------------------------------------------------


def test_a_stored_record_reads_back_equal_to_the_written_one() -> None:
    for written in chain([admitted(), concluded()]):
        read = Record.from_stored(written.raw, written.prev_hash, written.hash)
        assert read == written and hash(read) == hash(written)
        assert read.body == json.loads(written.raw)


def test_tuples_in_a_payload_read_back_as_lists_and_the_records_still_compare_equal() -> None:
    written = Record.seal(Append(RUN, "Note", {"xs": (1, 2)}).body(1, 1), Digest.ZERO)
    read = Record.from_stored(written.raw, written.prev_hash, written.hash)
    assert read.body["xs"] == [1, 2] and read == written


def test_overwritten_bytes_with_the_old_hash_are_refused_naming_the_seq() -> None:
    # agentplane's durability test: raw replaced, hash left alone.
    with pytest.raises(CorruptRecordError) as info:
        Record.from_stored(b'{"seq":1,"tampered":true}', Digest.ZERO, Digest.from_hex(HASH1))
    assert info.value.seq == 1
    assert "hash mismatch: stored 2895d243…, recomputed " in info.value.detail
    assert "altered after it was written" in info.value.detail


def test_a_mismatch_in_unreadable_bytes_names_seq_zero_unless_the_caller_knows_it() -> None:
    with pytest.raises(CorruptRecordError) as info:
        Record.from_stored(b"\xff garbage", Digest.ZERO, Digest.from_hex(HASH1))
    assert info.value.seq == 0
    with pytest.raises(CorruptRecordError) as info:
        Record.from_stored(b"\xff garbage", Digest.ZERO, Digest.from_hex(HASH1), seq=12)
    assert info.value.seq == 12


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[1,2]",
        b'"text"',
        b'{"seq":1,"run":"x"}',
        b'{"run":"x","kind":"Note"}',
        b'{"seq":"1","run":"x","kind":"Note"}',
        b'{"seq":1,"run":"x","kind":"Note","n":NaN}',
        b'{"seq":1,"run":"x","kind":"Note"} trailing',
        b'{"seq":1,"run":"\xff","kind":"Note"}',
    ],
)
def test_hash_covered_bytes_that_are_not_a_record_body_are_corrupt(raw: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        Record.from_stored(raw, Digest.ZERO, Digest.chain(Digest.ZERO, raw))


def test_a_body_missing_a_member_is_named_by_its_seq() -> None:
    raw = b'{"seq":4,"run":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}'
    with pytest.raises(CorruptRecordError, match="no string 'kind'") as info:
        Record.from_stored(raw, Digest.ZERO, Digest.chain(Digest.ZERO, raw))
    assert info.value.seq == 4


def test_from_stored_accepts_memoryview_bytes_from_a_driver() -> None:
    (written,) = chain([admitted()])
    read = Record.from_stored(memoryview(written.raw), written.prev_hash, written.hash)  # type: ignore[arg-type]
    assert read == written and type(read.raw) is bytes


# --- verify_chain ----------------------------------------------------------------------------


def test_an_empty_chain_verifies_to_its_start() -> None:
    assert verify_chain([]) == Digest.ZERO
    start = Digest.of(b"s")
    assert verify_chain([], start) == start


def test_a_slice_from_the_middle_verifies_against_its_predecessors_hash() -> None:
    records = notes(6)
    assert verify_chain(records[2:], records[1].hash) == records[-1].hash
    with pytest.raises(CorruptRecordError, match="broken link") as info:
        verify_chain(records[2:])
    assert info.value.seq == 3


def test_a_gap_a_broken_link_and_an_uncovered_hash_have_their_own_messages() -> None:
    r = notes(4)
    with pytest.raises(CorruptRecordError, match="sequence gap: expected 3, found 4") as info:
        verify_chain([r[0], r[1], r[3]])
    assert info.value.seq == 4
    forged = Record(r[2].body, r[2].raw, Digest.of(b"elsewhere"), r[2].hash)
    with pytest.raises(
        CorruptRecordError, match="broken link: prev_hash does not match predecessor"
    ) as info:
        verify_chain([r[0], r[1], forged, r[3]])
    assert info.value.seq == 3
    edited = Record(r[1].body, r[1].raw.replace(b"note 1", b"note X"), r[1].prev_hash, r[1].hash)
    with pytest.raises(CorruptRecordError, match="hash does not cover the stored bytes") as info:
        verify_chain([r[0], edited, r[2], r[3]])
    assert info.value.seq == 2


# --- properties: every alteration is caught, naming the first record out of place ------------


def _first_out_of_place(original: list[Record], altered: list[Record]) -> int | None:
    for position, record in enumerate(altered):
        if position >= len(original) or record != original[position]:
            return position
    return None


def _flip(raw: bytes, index: int, bit: int) -> bytes:
    data = bytearray(raw)
    data[index] ^= 1 << bit
    return bytes(data)


def _seq_claimed_by(raw: bytes) -> int:
    try:
        body = json.loads(raw)
    except ValueError:
        return 0
    seq = body.get("seq") if isinstance(body, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0 else 0


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 8), st.data())
def test_a_flipped_bit_is_caught_on_read_and_by_verify_chain(n: int, data: st.DataObject) -> None:
    records = notes(n)
    target = data.draw(st.integers(0, n - 1), label="record")
    victim = records[target]
    index = data.draw(st.integers(0, len(victim.raw) - 1), label="byte")
    bit = data.draw(st.integers(0, 7), label="bit")
    tampered = _flip(victim.raw, index, bit)

    # Reading: the row's hash no longer covers its bytes. With the seq column the error
    # names the row; without it, it names whatever seq the edited bytes claim (or 0), as
    # agentplane does — a flip inside the seq digits itself would otherwise mislead.
    with pytest.raises(CorruptRecordError, match="hash mismatch") as info:
        Record.from_stored(tampered, victim.prev_hash, victim.hash, seq=victim.seq)
    assert info.value.seq == victim.seq
    with pytest.raises(CorruptRecordError) as info:
        Record.from_stored(tampered, victim.prev_hash, victim.hash)
    assert info.value.seq == _seq_claimed_by(tampered)

    # Verifying records already in memory (body intact, raw edited) names the record.
    altered = list(records)
    altered[target] = Record(victim.body, tampered, victim.prev_hash, victim.hash)
    with pytest.raises(CorruptRecordError, match="hash does not cover") as info:
        verify_chain(altered)
    assert info.value.seq == victim.seq


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 10), st.data())
def test_a_deleted_duplicated_or_swapped_record_is_caught_naming_the_first_out_of_place(
    n: int, data: st.DataObject
) -> None:
    records = notes(n)
    head = records[-1].hash
    operation = data.draw(st.sampled_from(["delete", "duplicate", "swap"]), label="operation")
    if operation == "delete":
        i = data.draw(st.integers(0, n - 1), label="i")
        altered = records[:i] + records[i + 1 :]
    elif operation == "duplicate":
        i = data.draw(st.integers(0, n - 1), label="i")
        altered = [*records[: i + 1], records[i], *records[i + 1 :]]
    else:
        i = data.draw(st.integers(0, n - 2), label="i")
        altered = list(records)
        altered[i], altered[i + 1] = altered[i + 1], altered[i]

    position = _first_out_of_place(records, altered)
    if position is None:
        # Dropping the last record leaves a valid, shorter chain: only comparing with a
        # known head (the store's head, a seal, a checkpoint) shows the truncation.
        assert operation == "delete"
        assert verify_chain(altered) != head
        return
    with pytest.raises(CorruptRecordError) as info:
        verify_chain(altered)
    assert info.value.seq == altered[position].seq
