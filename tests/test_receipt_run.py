"""``verify-receipt --run`` never says a receipt is a run's on the word of its ``extra`` line.

The run id is not in the log's leaf (the sealed head is), so a receipt cannot prove whose
run it is: run A's receipt with its ``extra`` line edited to name run B still verifies as
a receipt of A's head, and ``--run B`` must say the run id is the receipt's claim, not
"ok". A receipt naming another run than ``--run`` fails. On both dialects' receipts.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest

from agentplane_journal import NoteSigner, RunId, SqlJournalStore
from agentplane_journal.cli.main import main
from agentplane_journal.tlog.policy import parse_policy
from agentplane_journal.tlog.receipt import verify_receipt

from support.witnesses import LOG_SEED, seal_runs


async def test_the_run_of_a_receipt_is_a_claim_never_ok(
    store: SqlJournalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentplane_journal.cli.witness import _receipt

    signer = NoteSigner(store.origin, LOG_SEED)
    policy_text = f"log {signer.verifier_key}\nquorum none\n"
    policy = parse_policy(policy_text)
    run_a, run_b = await seal_runs(store, 2)
    receipt, _, _ = await _receipt(store, str(run_a), signer)
    text = receipt.to_text()
    line = text.split("\n")[1]
    extra = json.loads(base64.b64decode(line.removeprefix("extra ")))
    forged = {**extra, "run": str(run_b)}
    edited = text.replace(
        line,
        "extra "
        + base64.b64encode(
            json.dumps(forged, sort_keys=True, separators=(",", ":")).encode()
        ).decode(),
    )

    for file_text, run in ((text, run_a), (edited, run_b)):
        report = verify_receipt(file_text, policy, str(run))
        assert report.ok  # the head, its inclusion and the signature: all proven
        assert not any(str(run) in msg for ok, msg in report.checks if ok)
        assert any(str(run) in c and "unproven" in c for c in report.claims)
    # Naming another run than the one asked about is a failure, not a claim.
    assert not verify_receipt(edited, policy, str(run_a)).ok

    (tmp_path / "policy").write_text(policy_text)
    (tmp_path / "edited").write_text(edited)
    capsys.readouterr()  # main runs in a thread: it runs its own event loop
    argv = ["verify-receipt", str(tmp_path / "edited"), "--policy", str(tmp_path / "policy")]
    assert await asyncio.to_thread(main, [*argv, "--run", str(run_b)]) == 0
    out = capsys.readouterr().out
    assert not [x for x in out.splitlines() if x.startswith("ok") and str(run_b) in x], out
    assert f"claim  the receipt names run {run_b}, unproven" in out
    assert await asyncio.to_thread(main, [*argv, "--run", str(run_a), "--json"]) == 1
    assert not json.loads(capsys.readouterr().out)["run_proven"]
    assert await asyncio.to_thread(main, [*argv, "--run", str(RunId.generate())]) == 1
