"""Admission keys' rules (core/admission.py), each held by a test that fails without it; the
claims against a store are in tests/test_admissions.py. Written against the mutants that
survived (tools/mutation.py admission). Pure.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from agentplane_journal.core.admission import (
    IDEMPOTENCY_KEY,
    MAX_ADMISSION_KEY_BYTES,
    RUN_ADMITTED,
    check_admission_key,
    check_cutoff,
    claimed_keys,
)
from agentplane_journal.core.append import Append
from agentplane_journal.core.ids import RunId


def test_the_names_and_the_limit_are_agentplanes() -> None:
    assert (RUN_ADMITTED, IDEMPOTENCY_KEY, MAX_ADMISSION_KEY_BYTES) == (
        "RunAdmitted",
        "idempotency_key",
        512,
    )


def test_a_key_is_non_blank_text_of_at_most_512_bytes() -> None:
    assert check_admission_key("k" * 512) == "k" * 512
    assert check_admission_key("\u00e9" * 256) == "\u00e9" * 256
    with pytest.raises(ValueError) as info:
        check_admission_key("k" * 513)
    assert str(info.value).startswith("idempotency_key is 513 bytes in UTF-8; the limit is 512:")
    with pytest.raises(ValueError, match="key is 514 bytes in UTF-8"):
        check_admission_key("\u00e9" * 257, "key")
    with pytest.raises(ValueError, match="idempotency_key must not be empty"):
        check_admission_key(" ")
    with pytest.raises(ValueError, match="must not contain NUL"):
        check_admission_key("a\x00")
    with pytest.raises(TypeError) as type_info:
        check_admission_key(None)
    assert str(type_info.value).startswith("idempotency_key is None: for an admission without")
    with pytest.raises(TypeError, match="key must be a string, not int"):
        check_admission_key(1, "key")


def test_a_cutoff_is_whole_seconds_or_an_aware_datetime_truncated() -> None:
    assert check_cutoff(0) == 0
    assert check_cutoff(1_700_000_000) == 1_700_000_000
    moment = datetime(2026, 1, 2, 3, 4, 5, 999_999, tzinfo=UTC)
    assert check_cutoff(moment) == int(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp())
    east = moment.astimezone(timezone(timedelta(hours=5)))
    assert check_cutoff(east) == check_cutoff(moment)
    before_epoch = datetime(1969, 12, 31, 23, 59, 59, 500_000, tzinfo=UTC)
    with pytest.raises(ValueError, match="older_than must be between 0 and"):
        check_cutoff(before_epoch)  # -0.5 s truncates down to -1, never up to 0
    with pytest.raises(ValueError) as info:
        check_cutoff(datetime(2026, 1, 1), "when")
    assert str(info.value).startswith("when is a naive datetime (no timezone)")
    for bad in (True, 1.5, "1"):
        with pytest.raises(TypeError) as type_info:
            check_cutoff(bad)
        assert str(type_info.value).startswith("older_than must be whole seconds")
        assert str(type_info.value).endswith(f"not {type(bad).__name__}")
    with pytest.raises(ValueError, match="older_than must be between 0 and"):
        check_cutoff(-1)


def test_a_batch_claims_each_key_once_sorted() -> None:
    run, other = RunId.generate(), RunId.generate()
    items = [
        Append(run, RUN_ADMITTED, {IDEMPOTENCY_KEY: "b"}),
        Append(run, "Note", {IDEMPOTENCY_KEY: "ignored"}),
        Append(other, RUN_ADMITTED, {IDEMPOTENCY_KEY: "a"}),
        Append(other, RUN_ADMITTED, {}),
        Append(run, RUN_ADMITTED, {IDEMPOTENCY_KEY: "b"}),
    ]
    assert claimed_keys(items) == ["a", "b"]
    assert claimed_keys([]) == []
    assert claimed_keys(iter(items[3:4])) == []
    edited = Append(run, RUN_ADMITTED, {IDEMPOTENCY_KEY: "k"})
    edited.payload[IDEMPOTENCY_KEY] = ""
    with pytest.raises(ValueError, match="RunAdmitted's idempotency_key must not be empty"):
        claimed_keys([edited])
