"""Witness policies' rules (c2sp.org/tlog-policy), each held by a test that fails without it
(tlog/policy.py; the policies witness rounds use are in tests/test_witness.py).

Written against the mutants that survived (tools/mutation.py policy).
"""

from __future__ import annotations

import pytest

from agentplane_journal.tlog.cosignature import Cosigner
from agentplane_journal.tlog.note import NoteSigner
from agentplane_journal.tlog.policy import Policy, PolicyWitness, parse_policy

LOG = NoteSigner("log.example/a", bytes(range(32)))
LOG2 = NoteSigner("log.example/b", bytes(range(4, 36)))
W = [Cosigner(f"witness.example/w{i}", bytes(range(i + 1, i + 33))) for i in range(4)]
LOG_LINE = f"log {LOG.verifier_key}"


def _witness(i: int, name: str | None = None, url: str = "") -> str:
    return f"witness {name or f'w{i}'} {W[i].key.vkey}" + (f" {url}" if url else "")


def _policy(*lines: str) -> Policy:
    return parse_policy("\n".join(lines) + "\n")


def test_a_policy_parses_logs_witnesses_groups_and_the_quorum() -> None:
    policy = _policy(
        "# a comment",
        "",
        f"  \t{LOG_LINE} https://log.example/a \t ",
        f"log\t{LOG2.verifier_key}",
        _witness(0, url="https://w0.example/"),
        _witness(1),
        _witness(2),
        "group g1 any w0 w1",
        "group g2 all g1 w2",
        "group g3 2 w0 w1 w2",
        "   # an indented comment",
        "quorum g2",
    )
    assert [(key.name, url) for key, url in policy.logs] == [
        ("log.example/a", "https://log.example/a"),
        ("log.example/b", None),
    ]
    assert policy.log_keys == (LOG.verifier, LOG2.verifier)
    assert policy.witnesses == (
        PolicyWitness("w0", W[0].key, "https://w0.example/"),
        PolicyWitness("w1", W[1].key, None),
        PolicyWitness("w2", W[2].key, None),
    )
    assert policy.groups == (
        ("g1", 1, ("w0", "w1")),
        ("g2", 2, ("g1", "w2")),
        ("g3", 2, ("w0", "w1", "w2")),
    )
    assert policy.quorum == "g2"
    assert policy.witness("w1") == policy.witnesses[1]
    assert policy.witness("g1") is None
    assert parse_policy(("\n".join([LOG_LINE, "quorum none"]) + "\n").encode()).quorum == "none"
    assert parse_policy("quorum none").quorum == "none"  # no final newline


def test_quorums_count_groups_of_groups() -> None:
    policy = _policy(
        _witness(0), _witness(1), _witness(2), _witness(3),
        "group g1 any w0 w1",
        "group g2 all g1 w2",
        "group g3 2 w0 w1 w3",
        "quorum g2",
    )  # fmt: skip
    assert not policy.quorum_met([])
    assert not policy.quorum_met(["w0", "w1"])
    assert not policy.quorum_met(["w2"])
    assert policy.quorum_met(["w0", "w2"])
    assert policy.quorum_met(iter(["w1", "w2", "w3"]))
    assert not policy.quorum_met(["g1", "g2", "w2"])  # group names are never cosigners
    two = Policy(policy.logs, policy.witnesses, policy.groups, "g3")
    assert not two.quorum_met(["w0"])
    assert two.quorum_met(["w0", "w3"])
    assert two.quorum_met(["w0", "w1", "w3"])
    single = Policy(policy.logs, policy.witnesses, policy.groups, "w3")
    assert single.quorum_met(["w3"]) and not single.quorum_met(["w0", "w1", "w2"])
    none = Policy(policy.logs, policy.witnesses, policy.groups, "none")
    assert none.quorum_met([])


def test_the_quorum_is_described_in_words() -> None:
    policy = _policy(_witness(0), _witness(1), "group g any w0 w1", "group h all w0 w1", "quorum h")
    assert policy.describe_quorum() == "group h: 2 of w0, w1"
    assert Policy((), policy.witnesses, policy.groups, "g").describe_quorum() == (
        "group g: 1 of w0, w1"
    )
    assert Policy((), policy.witnesses, policy.groups, "w1").describe_quorum() == "witness w1"
    assert Policy((), (), (), "none").describe_quorum() == "no cosignature required (quorum none)"


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ((LOG_LINE,), "the policy has no quorum line ('quorum none' requires no witness)"),
        (("log", "quorum none"), "policy line 1: expected 'log <vkey> [<url>]'"),
        ((f"{LOG_LINE} u x", "quorum none"), "policy line 1: expected 'log <vkey> [<url>]'"),
        (("log x+1+AA==", "quorum none"), "policy line 1: 'x+1+AA==' is not"),
        ((LOG_LINE, LOG_LINE, "quorum none"), "policy line 2: a log or witness with this public"),
        (("witness w0", "quorum none"), "policy line 1: expected 'witness <name> <vkey> [<url>]'"),
        (
            (_witness(0) + " u x", "quorum none"),
            "policy line 1: expected 'witness <name> <vkey> [<url>]'",
        ),
        ((_witness(0), _witness(0), "quorum none"), "policy line 2: the name 'w0' is already"),
        ((_witness(0, "none"), "quorum none"), "policy line 1: the name 'none' is already"),
        (("witness w0 x+1+AA==", "quorum none"), "policy line 1: 'x+1+AA==' is not a cosigner"),
        (
            (_witness(0), f"witness w1 {W[0].key.vkey}", "quorum none"),
            "policy line 2: a log or witness with this public key is already defined",
        ),
        (
            (f"log {NoteSigner('log.example/c', bytes(range(1, 33))).verifier_key}", _witness(0)),
            "policy line 2: a log or witness with this public key is already defined",
        ),
        ((_witness(0), "group g any", "quorum g"), "policy line 2: expected 'group <name>"),
        ((_witness(0), "group g", "quorum g"), "policy line 2: expected 'group <name>"),
        ((_witness(0), "group w0 any w0", "quorum w0"), "policy line 2: the name 'w0' is already"),
        ((_witness(0), "group none any w0", "quorum w0"), "policy line 2: the name 'none'"),
        ((_witness(0), "group g any w1", "quorum g"), "policy line 2: group member 'w1' is not"),
        (
            (_witness(0), "group g any w0", "group g any w0", "quorum g"),
            "policy line 3: the name 'g' is already defined",
        ),
        ((_witness(0), "group g any w0 w0", "quorum g"), "policy line 2: a group lists a member"),
        (
            (_witness(0), _witness(1), "group g 3 w0 w1", "quorum g"),
            "line 3: threshold 3 is not within 1..2",
        ),
        (
            (_witness(0), _witness(1), "group g 0 w0 w1", "quorum g"),
            "line 3: threshold '0' is not all",
        ),
        ((_witness(0), _witness(1), "group g 01 w0 w1", "quorum g"), "threshold '01' is not"),
        ((_witness(0), _witness(1), "group g -1 w0 w1", "quorum g"), "threshold '-1' is not"),
        ((_witness(0), _witness(1), "group g \u0661 w0 w1", "quorum g"), "is not all, any or"),
        ((_witness(0), _witness(1), "group g ALL w0 w1", "quorum g"), "threshold 'ALL' is not"),
        (("quorum",), "policy line 1: expected 'quorum <name>'"),
        (("quorum none none",), "policy line 1: expected 'quorum <name>'"),
        (("quorum none", "quorum none"), "policy line 2: a policy has exactly one quorum line"),
        (("quorum w0", _witness(0)), "policy line 1: the quorum 'w0' is not defined above"),
        (("Quorum none",), "policy line 1: unknown keyword 'Quorum' (log, witness, group, quorum)"),
        (("quorum none", "x\x01"), "the policy contains U+0001; only tab, newline and printable"),
        (("quorum none\r",), "the policy contains U+000D"),
        (("quorum none", "\x1f"), "U+001F"),
        (("quorum none", "#\x7f"), "U+007F"),
        (("\u00a0# not a comment", "quorum none"), "policy line 1: unknown keyword '#'"),
        (("Xquorum none",), "policy line 1: unknown keyword 'Xquorum'"),
        (("quorum noneX",), "policy line 1: the quorum 'noneX' is not defined above"),
        (("quorum XX\tXXnone",), "policy line 1: expected 'quorum <name>'"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_line_and_rule(
    lines: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ValueError) as info:
        _policy(*lines)
    assert message in str(info.value)


def test_a_threshold_at_the_edges_parses() -> None:
    policy = _policy(_witness(0), _witness(1), "group a 1 w0 w1", "group b 2 w0 w1", "quorum b")
    assert policy.groups == (("a", 1, ("w0", "w1")), ("b", 2, ("w0", "w1")))


def test_printable_and_unicode_characters_and_tabs_are_allowed() -> None:
    policy = parse_policy(f"# caf\u00e9 ~ \x20\nquorum\tnone\t\n{LOG_LINE}\n")
    assert policy.quorum == "none" and len(policy.logs) == 1


def test_a_policy_that_is_not_utf8_is_refused() -> None:
    with pytest.raises(ValueError, match="the policy is not UTF-8"):
        parse_policy(b"quorum none\n\xff\n")


def test_a_line_of_other_whitespace_is_blank_never_a_crash() -> None:
    # str.split() (like Go's strings.Fields) splits on any Unicode space, which the strip of
    # spaces and tabs leaves: such a line has no keyword, and once crashed with IndexError.
    for space in ("\u00a0", "\u3000", "\x85", " \u2003\t"):
        assert _policy(space, "quorum none", space).quorum == "none"
