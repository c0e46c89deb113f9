"""Receipts' rules, each held by a test that fails without it (tlog/receipt.py; the receipt a
sealed run gets from a store is in tests/test_witness.py and tests/test_receipt_run.py).

Written against the mutants that survived (tools/mutation.py receipt). Pure: the log is a
list of leaves in memory, signed and cosigned here.
"""

from __future__ import annotations

import base64
import json

import pytest

from agentplane_journal.core.ids import Digest
from agentplane_journal.tlog.checkpoint import Checkpoint
from agentplane_journal.tlog.cosignature import Cosigner
from agentplane_journal.tlog.merkle import inclusion_proof, leaf_hash, root
from agentplane_journal.tlog.note import NoteSigner
from agentplane_journal.tlog.policy import Policy, parse_policy
from agentplane_journal.tlog.receipt import (
    HEADER,
    Receipt,
    ReceiptReport,
    parse_receipt,
    verify_receipt,
)

ORIGIN = "log.example/receipts"
LOG = NoteSigner(ORIGIN, bytes(range(32)))
W1 = Cosigner("witness.example/w1", bytes(range(1, 33)))
W2 = Cosigner("witness.example/w2", bytes(range(2, 34)))
W3 = Cosigner("witness.example/w3", bytes(range(3, 35)))
RUN = "run_01JABCDEFGHJKMNPQRSTVWXYZ0"
HEADS = [Digest.of(f"head {i}".encode()) for i in range(5)]
LEAVES = [leaf_hash(h) for h in HEADS]
CHECKPOINT = Checkpoint(ORIGIN, len(LEAVES), root(LEAVES))


def _policy(quorum: str = "quorum w1", *, log: NoteSigner = LOG) -> Policy:
    lines = [
        f"log {log.verifier_key}",
        f"witness w1 {W1.key.vkey}",
        f"witness w2 {W2.key.vkey}",
        f"witness w3 {W3.key.vkey}",
        quorum,
    ]
    return parse_policy("\n".join(lines) + "\n")


def _receipt(
    index: int = 2,
    *,
    cosigners: tuple[Cosigner, ...] = (W1,),
    log: NoteSigner = LOG,
    checkpoint: Checkpoint = CHECKPOINT,
    extra_lines: str = "",
) -> Receipt:
    body = checkpoint.to_note()
    note = checkpoint.to_signed_note(log) + extra_lines
    note += "".join(c.cosign(body, 1_700_000_000).line for c in cosigners)
    proof = tuple(inclusion_proof(LEAVES, index))
    return Receipt(RUN, HEADS[index], index, proof, note)


def _extra(data: object) -> str:
    return "extra " + base64.b64encode(json.dumps(data).encode()).decode()


def _text(*lines: str, note: str | None = None) -> str:
    return "\n".join(lines) + "\n\n" + (note if note is not None else _receipt().note)


GOOD_EXTRA = _extra({"head": HEADS[2].hex(), "run": RUN})


def test_a_receipt_round_trips_through_its_text() -> None:
    receipt = _receipt()
    text = receipt.to_text()
    assert text.startswith(HEADER + "\nextra ")
    assert parse_receipt(text) == receipt
    assert parse_receipt(text.encode()) == receipt
    lines = text.split("\n")
    assert lines[2] == "index 2"
    extra = json.loads(base64.b64decode(lines[1][6:]))
    assert extra == {"head": HEADS[2].hex(), "run": RUN}
    assert base64.b64decode(lines[1][6:]) == json.dumps(
        extra, sort_keys=True, separators=(",", ":")
    ).encode("utf-8")


def test_an_index_of_zero_and_an_empty_proof_parse() -> None:
    receipt = parse_receipt(_text(HEADER, GOOD_EXTRA, "index 0"))
    assert (receipt.index, receipt.proof, receipt.run, receipt.head) == (0, (), RUN, HEADS[2])
    assert parse_receipt(_text(HEADER, GOOD_EXTRA, "index 10")).index == 10


HASH = base64.b64encode(bytes(32)).decode()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"\xff\n\n", "the receipt is not UTF-8"),
        (f"{HEADER}\n{GOOD_EXTRA}\nindex 0\n", "no blank line between the proof and the"),
        (_text("c2sp.org/tlog-proof@v2", GOOD_EXTRA, "index 0"), "the first line is not"),
        (_text(HEADER, GOOD_EXTRA), "no 'extra' line"),
        (_text(HEADER, "index 0", GOOD_EXTRA), "no 'extra' line"),
        (_text(HEADER, "extra !!", "index 0"), "the extra line is not base64 of JSON"),
        (
            _text(HEADER, "extra " + base64.b64encode(b"\xff").decode(), "index 0"),
            "the extra line is not base64 of JSON",
        ),
        (
            _text(HEADER, "extra " + base64.b64encode(b"{").decode(), "index 0"),
            "the extra line is not base64 of JSON",
        ),
        (_text(HEADER, _extra([1]), "index 0"), "the extra data is not {"),
        (_text(HEADER, _extra({"head": HEADS[0].hex()}), "index 0"), "the extra data is not {"),
        (
            _text(HEADER, _extra({"head": HEADS[0].hex(), "run": RUN, "x": 1}), "index 0"),
            "the extra data is not {",
        ),
        (
            _text(HEADER, _extra({"head": HEADS[0].hex(), "run": 1}), "index 0"),
            "the extra data's run and head are not text",
        ),
        (
            _text(HEADER, _extra({"head": 1, "run": RUN}), "index 0"),
            "the extra data's run and head are not text",
        ),
        (
            _text(HEADER, _extra({"head": "ab", "run": RUN}), "index 0"),
            "the extra data's head is not a 32-byte hex digest",
        ),
        (_text(HEADER, GOOD_EXTRA, "index0"), "the line after 'extra' is not 'index <n>'"),
        (_text(HEADER, GOOD_EXTRA, "index 01"), "index '01' is not a decimal"),
        (_text(HEADER, GOOD_EXTRA, "index -1"), "index '-1' is not a decimal"),
        (_text(HEADER, GOOD_EXTRA, "index "), "index '' is not a decimal"),
        (_text(HEADER, GOOD_EXTRA, "index \u0661"), "is not a decimal"),
        (_text(HEADER, GOOD_EXTRA, "index 1", "!!"), "proof line 4 is not canonical base64"),
        (
            _text(HEADER, GOOD_EXTRA, "index 1", HASH, base64.b64encode(bytes(31)).decode()),
            "proof line 5 is 31 bytes, not a 32-byte hash",
        ),
        (
            _text(HEADER, GOOD_EXTRA, "index 1", base64.b64encode(bytes(33)).decode()),
            "proof line 4 is 33 bytes",
        ),
        (_text(HEADER, GOOD_EXTRA, "index 1", *[HASH] * 64), "at most 63 hashes"),
    ],
)
def test_a_malformed_receipt_is_refused_naming_the_rule(text: str | bytes, message: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        parse_receipt(text)
    assert message in str(info.value)
    report = verify_receipt(text, _policy())
    assert not report.ok
    assert report.checks == ((False, f"the receipt is well formed ({info.value})"),)
    assert (report.receipt, report.checkpoint, report.cosigned_by) == (None, None, ())


def test_sixty_three_proof_hashes_parse() -> None:
    assert len(parse_receipt(_text(HEADER, GOOD_EXTRA, "index 1", *[HASH] * 63)).proof) == 63


def test_an_honest_receipt_verifies_and_names_its_cosigners() -> None:
    receipt = _receipt(cosigners=(W2, W1))
    report = verify_receipt(receipt.to_text(), _policy("group g 2 w1 w2 w3\nquorum g"))
    assert report.ok, report.checks
    assert report.receipt == receipt
    assert report.checkpoint == CHECKPOINT
    assert report.cosigned_by == ("w1", "w2")  # in the policy's order
    assert report.claims == ()
    assert report.checks == (
        (True, "the receipt is well formed (leaf 2)"),
        (True, f"the checkpoint ({ORIGIN}, size 5) is signed by the policy's log key {ORIGIN!r}"),
        (True, "valid cosignatures from: w1, w2"),
        (True, "the witness quorum is met (group g: 2 of w1, w2, w3)"),
        (True, f"the sealed head {HEADS[2].hex()[:16]}… is leaf 2 of the checkpoint"),
    )


def test_every_leaf_verifies_and_a_wrong_index_or_head_does_not() -> None:
    policy = _policy()
    for index in range(len(HEADS)):
        assert verify_receipt(_receipt(index).to_text(), policy).ok
    honest = _receipt(2)
    moved = Receipt(honest.run, honest.head, 3, honest.proof, honest.note)
    other_head = Receipt(honest.run, HEADS[3], 2, honest.proof, honest.note)
    for receipt in (moved, other_head):
        report = verify_receipt(receipt.to_text(), policy)
        assert not report.ok
        assert report.checks[-1][0] is False
        assert [ok for ok, _ in report.checks[:-1]] == [True, True, True, True]


def test_the_run_is_a_claim_and_another_run_a_failed_check() -> None:
    text = _receipt().to_text()
    same = verify_receipt(text, _policy(), run=RUN)
    assert same.ok
    assert len(same.claims) == 1 and f"names run {RUN}, unproven" in same.claims[0]
    assert all(RUN not in message for _, message in same.checks)
    other = "run_01JABCDEFGHJKMNPQRSTVWXYZ1"
    report = verify_receipt(text, _policy(), run=other)
    assert not report.ok
    assert (False, f"the receipt names run {other} (it names {RUN})") in report.checks
    assert report.claims == ()
    assert verify_receipt(text, _policy(), run=None).claims == ()


def test_a_policy_without_a_log_fails_and_stops() -> None:
    policy = parse_policy(f"witness w1 {W1.key.vkey}\nquorum w1\n")
    report = verify_receipt(_receipt().to_text(), policy, run=RUN)
    assert not report.ok
    assert report.checks[-1] == (False, "the policy names a log key (it lists no 'log' line)")
    assert len(report.checks) == 2
    assert (report.checkpoint, report.cosigned_by) == (None, ())
    assert report.receipt is not None


def test_a_checkpoint_signed_by_another_log_fails_and_stops() -> None:
    other = NoteSigner(ORIGIN, bytes(range(5, 37)))
    report = verify_receipt(_receipt(log=other).to_text(), _policy())
    assert not report.ok
    assert len(report.checks) == 2
    assert report.checks[1][0] is False
    assert report.checks[1][1].startswith("the checkpoint is signed by a log of the policy (")
    assert (report.checkpoint, report.cosigned_by) == (None, ())
    assert report.receipt == _receipt(log=other)


def test_a_malformed_checkpoint_note_fails_and_stops() -> None:
    honest = _receipt()
    broken = Receipt(honest.run, honest.head, honest.index, honest.proof, "not a note")
    report = verify_receipt(broken.to_text(), _policy())
    assert not report.ok
    assert len(report.checks) == 2
    assert report.checks[1][0] is False
    assert report.checks[1][1].startswith("the checkpoint is a well-formed signed note (")
    assert report.checkpoint is None and report.receipt == broken
    assert report.cosigned_by == ()


def test_a_log_key_not_named_for_the_origin_fails() -> None:
    renamed = NoteSigner("another.example/log", bytes(range(32)))
    report = verify_receipt(_receipt(log=renamed).to_text(), _policy(log=renamed))
    assert not report.ok
    failed = [message for ok, message in report.checks if not ok]
    assert failed == [
        f"the log key's name 'another.example/log' is the checkpoint's origin {ORIGIN!r} "
        "(c2sp.org/tlog-policy: a log key is named for its origin)"
    ]
    assert report.checkpoint == CHECKPOINT


def test_a_forged_cosignature_fails_and_counts_for_nothing() -> None:
    honest = _receipt(cosigners=())
    forged = W1.cosign("another body\n", 1_700_000_000).line
    receipt = Receipt(honest.run, honest.head, honest.index, honest.proof, honest.note + forged)
    report = verify_receipt(receipt.to_text(), _policy())
    assert not report.ok
    assert (False, "the cosignature claiming witness 'w1' verifies") in report.checks
    assert report.cosigned_by == ()
    assert (False, "the witness quorum is met (witness w1)") in report.checks
    assert not any(message.startswith("valid cosignatures") for _, message in report.checks)


def test_a_forged_cosignature_before_a_valid_one_does_not_hide_it() -> None:
    honest = _receipt(cosigners=())
    body = CHECKPOINT.to_note()
    forged = W1.cosign("another body\n", 1).line
    lines = forged + W2.cosign(body, 1).line + W1.cosign(body, 2).line
    receipt = Receipt(honest.run, honest.head, honest.index, honest.proof, honest.note + lines)
    report = verify_receipt(receipt.to_text(), _policy("group g all w1 w2\nquorum g"))
    assert report.cosigned_by == ("w1", "w2")
    assert (True, "the witness quorum is met (group g: 2 of w1, w2)") in report.checks
    assert (False, "the cosignature claiming witness 'w1' verifies") in report.checks


def test_cosignatures_of_unknown_witnesses_and_other_lines_are_skipped() -> None:
    stranger = Cosigner("witness.example/stranger", bytes(range(9, 41)))
    same_name = Cosigner("witness.example/w1", bytes(range(7, 39)))  # other key, same name
    extra_log = NoteSigner("other.example/log", bytes(range(4, 36)))
    body = CHECKPOINT.to_note()
    note = CHECKPOINT.to_signed_note(LOG, extra_log)
    note += stranger.cosign(body, 1).line + same_name.cosign(body, 1).line
    other_type = base64.b64encode(bytes(68)).decode()  # a 4 + 64-byte note signature
    note += f"— witness.example/w2 {other_type}\n" + W3.cosign(body, 1).line
    honest = _receipt()
    receipt = Receipt(honest.run, honest.head, honest.index, honest.proof, note)
    report = verify_receipt(receipt.to_text(), _policy("quorum w3"))
    assert report.ok, report.checks
    assert report.cosigned_by == ("w3",)
    short = verify_receipt(receipt.to_text(), _policy("group g any w1 w2\nquorum g"))
    assert not short.ok
    assert short.cosigned_by == ("w3",)
    assert [ok for ok, _ in short.checks] == [True, True, True, False, True]


def test_a_quorum_of_none_needs_no_cosignature() -> None:
    report = verify_receipt(_receipt(cosigners=()).to_text(), _policy("quorum none"))
    assert report.ok
    assert report.cosigned_by == ()
    assert (True, "the witness quorum is met (no cosignature required (quorum none))") in (
        report.checks
    )


def test_a_report_without_checks_is_not_ok() -> None:
    assert not ReceiptReport((), None, None, ()).ok
    assert ReceiptReport(((True, "x"),), None, None, ()).ok
    assert not ReceiptReport(((True, "x"), (False, "y")), None, None, ()).ok


def test_a_cosignature_first_after_the_blank_line_counts() -> None:
    body = CHECKPOINT.to_note()
    note = body + "\n" + W1.cosign(body, 1).line + LOG.signature_line(body)
    honest = _receipt()
    receipt = Receipt(honest.run, honest.head, honest.index, honest.proof, note)
    report = verify_receipt(receipt.to_text(), _policy())
    assert report.ok, report.checks
    assert report.cosigned_by == ("w1",)
