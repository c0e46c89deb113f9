"""Witness cosignatures, policies, the add-checkpoint client and receipts, on both dialects.

The witness here is an in-process tlog-witness behind ``httpx.MockTransport`` (the
protocol's checks, made with this package's own Merkle and note code): it keeps one
(size, root) per origin as the spec says, so the client's old sizes, 409s and 422s are
real answers to real requests. ``tests/test_witness_aics.py`` runs the same client
against an independent witness (aics-witness) on a loopback port.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from agentplane_journal import Checkpoint, Digest, NoteSigner, SqlJournalStore
from agentplane_journal.errors import (
    WitnessForkedError,
    WitnessStaleError,
    WitnessUnavailableError,
)
from agentplane_journal.tlog.cosignature import Cosignature, Cosigner, CosignerKey
from agentplane_journal.tlog.merkle import verify_consistency
from agentplane_journal.tlog.note import open_note
from agentplane_journal.tlog.policy import parse_policy
from agentplane_journal.tlog.receipt import parse_receipt, verify_receipt
from agentplane_journal.tlog.witness_protocol import add_checkpoint_body, read_answer
from agentplane_journal.witness.client import witness_round

from support.witnesses import LOG_SEED, W1, FakeWitness, seal_runs, witness_policy

W2 = Cosigner("witness.example/w2", bytes(range(2, 34)))
W3 = Cosigner("witness.example/w3", bytes(range(3, 35)))


def _client(*witnesses: FakeWitness) -> httpx.AsyncClient:
    by_host = {f"w{i + 1}.test": w for i, w in enumerate(witnesses)}

    def handler(request: httpx.Request) -> httpx.Response:
        return by_host[request.url.host].handle(request)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


# -- pure: cosignatures, policies, answers ------------------------------------------------


def test_a_cosignature_round_trips_and_binds_key_checkpoint_and_time() -> None:
    body = Checkpoint("example.com/log", 5, Digest.of(b"r")).to_note()
    cosig = W1.cosign(body, 1_700_000_000)
    parsed = Cosignature.parse(cosig.line)
    assert parsed == cosig and W1.key.verify(body, parsed)
    assert CosignerKey.from_vkey(W1.key.vkey) == W1.key
    assert not W2.key.verify(body, parsed)  # another witness's key
    other = Checkpoint("example.com/log", 6, Digest.of(b"r")).to_note()
    assert not W1.key.verify(other, parsed)
    later = Cosignature(cosig.name, cosig.key_hash, cosig.timestamp + 1, cosig.signature)
    assert not W1.key.verify(body, later)  # the time is signed
    signer = NoteSigner("example.com/log", LOG_SEED)
    with pytest.raises(ValueError, match="type 0x01"):
        CosignerKey.from_vkey(signer.verifier_key)  # a log key is not a witness key
    for bad in ("— w AAAA", "no dash", "— w " + base64.b64encode(bytes(80)).decode()):
        with pytest.raises(ValueError):
            Cosignature.parse(bad)


def test_policies_parse_as_the_spec_says_and_quorums_count_groups() -> None:
    signer = NoteSigner("example.com/log", LOG_SEED)
    policy = parse_policy(
        f"# comment\nlog {signer.verifier_key} https://log.example\n"
        f"witness X1 {W1.key.vkey}\n\twitness X2 {W2.key.vkey} https://w2.example\n"
        f"witness Y1 {W3.key.vkey}\ngroup X 2 X1 X2\ngroup XY all X Y1\nquorum XY\n"
    )
    assert policy.log_keys == (signer.verifier,)
    assert policy.witness("X2") is not None and policy.witness("X2").url == "https://w2.example"  # type: ignore[union-attr]
    assert policy.quorum_met({"X1", "X2", "Y1"})
    assert not policy.quorum_met({"X1", "Y1"})
    assert parse_policy("quorum none\n").quorum_met(())
    problems = {
        "witness A {a}\ngroup G any A B\nquorum G\n": "not defined above",
        "witness A {a}\ngroup G 2 A\nquorum G\n": "not within 1..1",
        "witness A {a}\nwitness B {a}\nquorum A\n": "already defined",
        "witness A {a}\n": "no quorum line",
        "witness A {a}\nquorum A\nquorum A\n": "exactly one quorum",
        "witness A {a}\ngroup G any A A\nquorum G\n": "more than once",
        "witnes A {a}\nquorum none\n": "unknown keyword",
        "witness A {l}\nquorum A\n": "type 0x01",
    }
    for policy_text, message in problems.items():
        with pytest.raises(ValueError, match=message):
            parse_policy(policy_text.format(a=W1.key.vkey, l=signer.verifier_key))


def test_witness_answers_map_to_stale_forked_and_unavailable() -> None:
    cp = Checkpoint("example.com/log", 8, Digest.of(b"r"))
    good = W1.cosign(cp.to_note(), 1_700_000_000)

    def answer(status: int, body: bytes = b"", old: int = 4, ctype: str | None = None) -> Any:
        return read_answer("w1", W1.key, cp, old, status, ctype, body)

    noise = "— other " + base64.b64encode(bytes(70)).decode() + "\n"
    assert answer(200, (noise + good.line).encode()) == good  # other lines ignored
    with pytest.raises(WitnessUnavailableError, match="without a valid"):
        answer(200, W2.cosign(cp.to_note(), 1).line.encode())
    with pytest.raises(WitnessStaleError) as stale:
        answer(409, b"12\n", ctype="text/x.tlog.size")
    assert stale.value.witness_size == 12
    for junk in (b"", b"<html>busy</html>", b"012\n"):
        with pytest.raises(WitnessUnavailableError, match="not a tree size"):
            answer(409, junk)
    with pytest.raises(WitnessForkedError, match="inconsistent"):
        answer(422)
    with pytest.raises(WitnessForkedError, match="shrank"):
        answer(400, old=9)
    with pytest.raises(WitnessUnavailableError, match="400"):
        answer(400, old=4)
    with pytest.raises(WitnessUnavailableError, match="404"):
        answer(404)
    with pytest.raises(WitnessUnavailableError, match="403"):
        answer(403)
    body = add_checkpoint_body(3, [Digest.of(b"a")], "note\n")
    assert body.startswith(b"old 3\n") and b"\n\nnote\n" in body


# -- rounds against witnesses, on both dialects -------------------------------------------


async def test_a_round_cosigns_stores_and_later_rounds_send_consistency_proofs(
    store: SqlJournalStore,
) -> None:
    signer = NoteSigner(store.origin, LOG_SEED)
    w1, w2 = FakeWitness(W1, signer.verifier_key), FakeWitness(W2, signer.verifier_key)
    policy = witness_policy(
        ("a", W1, "http://w1.test"),
        ("b", W2, "http://w2.test"),
        quorum="group both all a b\nquorum both",
    )
    await seal_runs(store, 3)
    async with _client(w1, w2) as client:
        first = await witness_round(store, signer, policy, client=client)
        assert first.quorum_met and [o.status for o in first.outcomes] == ["cosigned"] * 2
        assert first.checkpoint.size == 3
        lines = await store.cosignature_lines(first.checkpoint)
        assert len(lines) == 2
        opened = open_note(first.signed_note + "".join(lines), [signer.verifier_key])
        assert {n for n, _ in opened.unverified} == {W1.key.name, W2.key.name}
        await seal_runs(store, 4)
        second = await witness_round(store, signer, policy, client=client)
        assert second.quorum_met and second.checkpoint.size == 7
        assert all(o.detail == "old size 3" for o in second.outcomes)
        # Someone else moved w2 on: 409, and the client retries from the size it names.
        await seal_runs(store, 2)
        cp9, proof = await store.checkpoint_at(9, 7)
        w2.state[store.origin] = (9, cp9.root)
        assert verify_consistency(7, second.checkpoint.root, 9, cp9.root, proof)
        await seal_runs(store, 1)
        third = await witness_round(store, signer, policy, client=client)
        assert [o.detail for o in third.outcomes] == ["old size 7", "old size 9"]
        assert third.quorum_met
        assert await store.witness_size(W2.key) == 10


async def test_a_forked_log_is_reported_forked_and_nothing_is_stored(
    make_store: Any,
) -> None:
    store = await make_store()
    signer = NoteSigner(store.origin, LOG_SEED)
    w1 = FakeWitness(W1, signer.verifier_key)
    policy = witness_policy(("a", W1, "http://w1.test"), quorum="quorum a")
    await seal_runs(store, 2)
    # The witness saw another log of this origin and key at size 2 (a split view).
    w1.state[store.origin] = (2, Digest.of(b"the other branch"))
    async with _client(w1) as client:
        result = await witness_round(store, signer, policy, client=client)
    assert result.forked and not result.quorum_met
    [outcome] = result.outcomes
    assert outcome.status == "forked" and "422" in outcome.detail
    assert await store.cosignature_lines(result.checkpoint) == []


async def test_a_witness_ahead_of_the_round_is_stale_if_the_log_grew_and_forked_if_it_shrank(
    store: SqlJournalStore,
) -> None:
    signer = NoteSigner(store.origin, LOG_SEED)
    w1 = FakeWitness(W1, signer.verifier_key)
    policy = witness_policy(("a", W1, "http://w1.test"), quorum="quorum a")
    await seal_runs(store, 3)
    async with _client(w1) as client:
        # A newer round (size 3) got there first; this round's checkpoint is of size 2.
        cp3, _ = await store.checkpoint_at(3)
        w1.state[store.origin] = (3, cp3.root)
        cp2, _ = await store.checkpoint_at(2)
        from agentplane_journal.witness.client import HttpWitness, _ask

        http = HttpWitness(policy.witnesses[0], "http://w1.test", client, 5.0)
        outcome = await _ask(store, http, cp2, cp2.to_signed_note(signer))
        assert outcome.status == "stale" and "run `witness` again" in outcome.detail
        # The witness saw 9 leaves of this origin and key; this log has 3: it shrank.
        w1.state[store.origin] = (9, Digest.of(b"a longer log"))
        result = await witness_round(store, signer, policy, client=client)
        assert result.forked and "shrank" in result.outcomes[0].detail


async def test_an_unreachable_witness_is_unavailable_and_a_url_less_one_not_asked(
    store: SqlJournalStore,
) -> None:
    signer = NoteSigner(store.origin, LOG_SEED)

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    policy = witness_policy(
        ("a", W1, "http://w1.test"), ("b", W2, None), quorum="group g any a b\nquorum g"
    )
    await seal_runs(store, 1)
    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as client:
        result = await witness_round(store, signer, policy, client=client)
    assert [(o.witness, o.status) for o in result.outcomes] == [
        ("a", "unavailable"),
        ("b", "no-url"),
    ]
    assert not result.quorum_met and not result.forked


# -- receipts and hostile stored cosignatures -----------------------------------------------


async def test_a_receipt_verifies_offline_and_every_tampering_is_a_failed_check(
    store: SqlJournalStore, tmp_path: Any
) -> None:
    from agentplane_journal.cli.witness import _receipt

    signer = NoteSigner(store.origin, LOG_SEED)
    w1, w2 = FakeWitness(W1, signer.verifier_key), FakeWitness(W2, signer.verifier_key)
    policy = witness_policy(
        ("a", W1, "http://w1.test"),
        ("b", W2, "http://w2.test"),
        quorum="group g 2 a b\nquorum g",
        logs=f"log {signer.verifier_key}",
    )
    runs = await seal_runs(store, 5)
    async with _client(w1, w2) as client:
        await witness_round(store, signer, policy, client=client)
    after = await seal_runs(store, 2)  # sealed after the cosigned checkpoint
    receipt, cosigned, _ = await _receipt(store, str(runs[3]), signer)
    assert cosigned == 2 and receipt.index == 3
    text = receipt.to_text()
    report = verify_receipt(text, policy, str(runs[3]))
    assert report.ok, report.checks
    assert parse_receipt(text).head == receipt.head
    assert not verify_receipt(text, policy, str(runs[0])).ok  # another run's
    one_witness = witness_policy(
        ("a", W1, None),
        ("c", W3, None),
        quorum="group g all a c\nquorum g",
        logs=f"log {signer.verifier_key}",
    )
    assert not verify_receipt(text, one_witness).ok  # quorum not met
    tampered = {
        "head": dataclasses.replace(receipt, head=Digest.of(b"another head")).to_text(),
        "index": dataclasses.replace(receipt, index=2).to_text(),
        "proof": dataclasses.replace(receipt, proof=receipt.proof[:-1]).to_text(),
        "root": text.replace(
            base64.b64encode(
                bytes(Checkpoint.from_note(receipt.note.split("\n\n")[0] + "\n").root)
            ).decode(),
            base64.b64encode(bytes(32)).decode(),
        ),
        "garbage": "c2sp.org/tlog-proof@v1\nnonsense\n\n",
        "binary": "\x00\xff",
    }
    for what, bad in tampered.items():
        report = verify_receipt(bad, policy)
        assert not report.ok, what
    # A hostile cosignature line in the file: reported, never a traceback.
    good_line = Cosignature.parse(receipt.note.rstrip("\n").split("\n")[-1])
    forged = Cosignature(
        good_line.name, good_line.key_hash, good_line.timestamp + 5, good_line.signature
    )
    hostile = text.replace(good_line.line, forged.line)
    report = verify_receipt(hostile, policy)
    assert not report.ok
    assert any(not ok and "verifies" in msg for ok, msg in report.checks)
    # A run sealed after the last witnessed checkpoint gets the log's signature only.
    late, cosigned, _ = await _receipt(store, str(after[-1]), signer)
    assert (
        cosigned == 0
        and verify_receipt(
            late.to_text(), parse_policy(f"log {signer.verifier_key}\nquorum none\n")
        ).ok
    )
    assert json.dumps([c for c in report.checks])  # plain data


async def test_a_hostile_stored_cosignature_is_reported_and_never_served(
    store: SqlJournalStore,
) -> None:
    signer = NoteSigner(store.origin, LOG_SEED)
    w1, w2 = FakeWitness(W1, signer.verifier_key), FakeWitness(W2, signer.verifier_key)
    policy = witness_policy(
        ("a", W1, "http://w1.test"),
        ("b", W2, "http://w2.test"),
        quorum="group g all a b\nquorum g",
    )
    await seal_runs(store, 2)
    async with _client(w1, w2) as client:
        result = await witness_round(store, signer, policy, client=client)
    cp = result.checkpoint
    forged = W2.cosign(Checkpoint(cp.origin, cp.size, Digest.of(b"x")).to_note(), 1)
    async with store.engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE log_cosignature SET line = :line, cosigned_at = 1 "
                "WHERE tenant = :t AND cosigner = :c"
            ),
            {"line": forged.line[:-1], "t": store.tenant, "c": W2.key.name},
        )
        await conn.execute(
            text(
                "UPDATE log_cosignature SET line = 'not a line' WHERE tenant = :t AND cosigner = :c"
            ),
            {"t": store.tenant, "c": W1.key.name},
        )
    read = await store.read_cosignatures(cp)
    assert read.valid == ()
    assert len(read.findings) == 2
    assert any("does not verify" in f for f in read.findings)
    assert await store.cosignature_lines(cp) == []
    from agentplane_journal.cli.witness import _receipt

    runs = [run for run, _ in await store.sealed_runs()]
    receipt, cosigned, findings = await _receipt(store, str(runs[0]), signer)
    assert cosigned == 0 and len(findings) == 2  # reported, left out, no traceback
    assert verify_receipt(receipt.to_text(), parse_policy("quorum none\n")).checks[0][0]
