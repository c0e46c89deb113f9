"""The audits' pure rules, without a database: what a stored log position, counter or seal
must be for the log audit to accept it, which stored nodes a batch of new leaves completes,
and what an admission row must hold.

tests/test_log_audit*.py and tests/test_admission*.py hold the audits on both dialects; these
hold the rules they apply to each row, so that ``tools/mutation.py log_audit admission_audit``
can run every mutant of them in seconds.
"""

from __future__ import annotations

import pytest

from agentplane_journal.journal.admission_audit import _row_problem, _show
from agentplane_journal.journal.log_audit import (
    MAX_LOG_INDEX,
    _completed_ranges,
    _Finding,
    _good_counter,
    _good_index,
    _seal_problem,
)
from agentplane_journal.tlog import tree

HEAD = bytes(range(32))


def test_a_log_index_is_an_int_within_the_log() -> None:
    for good in (0, 1, MAX_LOG_INDEX):
        assert _good_index(good)
    for bad in (-1, MAX_LOG_INDEX + 1, True, 1.0, "1", None):
        assert not _good_index(bad)


def test_the_counter_is_null_or_minus_one_up_to_the_last_index() -> None:
    for good in (None, -1, 0, MAX_LOG_INDEX):
        assert _good_counter(good)
    for bad in (-2, MAX_LOG_INDEX + 1, False, "0", 0.0):
        assert not _good_counter(bad)


def test_a_seal_is_32_bytes_at_its_runs_last_record() -> None:
    assert _seal_problem(HEAD, HEAD, HEAD) is None
    assert _seal_problem(HEAD, HEAD, None) is None  # a log adopted without its journal
    assert _seal_problem(HEAD, HEAD, bytearray(HEAD)) is None
    assert _seal_problem(HEAD, HEAD, memoryview(HEAD)) is None
    assert _seal_problem(None, None, HEAD) == "holds NULL as its chain head, not 32 bytes"
    assert _seal_problem(None, "x", HEAD) == "holds text as its chain head, not 32 bytes"
    assert _seal_problem(None, 7, HEAD) == "holds no bytes as its chain head, not 32 bytes"
    assert _seal_problem(HEAD[:31], HEAD, HEAD) == "holds a chain head of 31 bytes, not 32"
    assert _seal_problem(HEAD + b"x", HEAD, HEAD) == "holds a chain head of 33 bytes, not 32"
    edited = (
        "holds a chain head its run's records do not end at (the seal or the records were edited)"
    )
    assert _seal_problem(HEAD, HEAD, bytes(32)) == edited
    assert _seal_problem(HEAD, HEAD, HEAD.hex()) == edited


def test_the_first_bad_position_is_kept() -> None:
    finding = _Finding()
    assert (finding.position, finding.detail) == (None, None)
    finding.add(5, "five")
    finding.add(7, "seven")
    assert (finding.position, finding.detail) == (5, "five")
    finding.add(5, "again")
    assert finding.detail == "five"
    finding.add(0, "zero")
    assert (finding.position, finding.detail) == (0, "zero")


def _brute(a: int, b: int) -> list[tuple[int, int, int]]:
    """Per level, the nodes whose leaves all exist at size b and did not all exist at a."""
    out = []
    for level in range(tree.MAX_LEVEL + 1):
        width = 1 << level
        done = [i for i in range(b // width) if (i + 1) * width > a]
        if done:
            out.append((level, done[0], done[-1]))
    return out


@pytest.mark.parametrize("b", range(1, 70))
def test_the_nodes_new_leaves_complete(b: int) -> None:
    for a in range(b):
        assert _completed_ranges(a, b) == _brute(a, b), (a, b)


def test_the_nodes_completed_high_in_the_tree() -> None:
    top = 1 << 40
    assert _completed_ranges(top - 1, top) == [
        (level, (1 << (40 - level)) - 1, (1 << (40 - level)) - 1) for level in range(41)
    ]
    assert _completed_ranges(0, top)[-1] == (40, 0, 0)
    # The log's last position completes the root of the largest tree it can hold.
    last = MAX_LOG_INDEX + 1
    assert _completed_ranges(last - 1, last)[-1] == (tree.MAX_LEVEL, 0, 0)
    assert _completed_ranges(top, top + 3) == [(0, top, top + 2), (1, top // 2, top // 2)]


def test_an_admission_row_holds_a_text_key_and_a_run_id() -> None:
    run = "run_01ARZ3NDEKTSV4RRFFQ69G5FAV"
    assert _row_problem("k", run) is None
    assert _row_problem(b"k", run) == "the key column holds b'k', not text"
    assert _row_problem(7, run) == "the key column holds 7, not text"
    assert _row_problem(b"x" * 200, run) == (
        f"the key column holds {repr(b'x' * 200)[:80]}, not text"
    )
    assert _row_problem("k", "run_nope") == (
        "the run_admission.run_id column holds 'run_nope', not a run id"
    )
    assert _row_problem("k", None) == "the run_admission.run_id column holds None, not a run id"
    assert _show("s") == "s" and _show(b"s") == "b's'" and _show(None) == "None"
