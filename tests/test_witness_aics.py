"""Independent verifiers of our witnessing: aics-witness cosigns through our client, and
aics-tlog checks our notes, proofs and cosigned checkpoints. Neither is ours.

Both need Python >= 3.12; they are installed from PyPI into a virtual environment of their
own, made once under ``.ci-cache/aics-venv`` from pyenv's 3.12.1 (or any ``python3.12``).
Skipped when that Python or PyPI is missing, except under CI, where ``.ci/run`` makes sure
of it and a skip would hide a regression.

What each shows:

* ``aics-witness`` on a loopback port is the witness our ``agentplane-journal witness``
  talks to: it cosigns the first checkpoint (old size 0) and a later one (with our
  consistency proof from its size), it refuses a forked log of the same origin and key
  (422), which our client reports as ``FORKED`` and exit 1, and the cosignatures we stored
  verify;
* ``aics-tlog`` verifies our signed checkpoint note, our cosigned note against a witness
  policy (its JSON k-of-n form: it does not read c2sp.org/tlog-policy files), a sealed
  run's inclusion proof from our receipt, and our consistency proof between two sizes;
  and, reading our exported tlog-tiles directory, the cosigned checkpoint the tiles carry,
  an entry's inclusion and the log's consistency, each computed from our hash tiles.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentplane_journal import NoteSigner, SqlJournalStore
from agentplane_journal.cli.main import main
from agentplane_journal.tlog.merkle import leaf_hash
from agentplane_journal.tlog.receipt import parse_receipt

from support.cli import add_runs

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("AGENTPLANE_AICS_VENV", ROOT / ".ci-cache" / "aics-venv"))
PACKAGES = ("aics-tlog==0.2.1", "aics-witness==0.1.0")
SEED = bytes(range(32))


def _python312() -> str | None:
    pyenv = Path.home() / ".pyenv" / "versions" / "3.12.1" / "bin" / "python"
    if pyenv.is_file():
        return str(pyenv)
    return shutil.which("python3.12")


def _unavailable(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the aics-tlog / aics-witness interop tests: {message}")
    pytest.skip(message)


@pytest.fixture(scope="module")
def aics() -> Path:
    """The venv's bin directory, with aics-tlog and aics-witness installed."""
    bin_dir = VENV / "bin"
    if not ((bin_dir / "aics-tlog").is_file() and (bin_dir / "aics-witness").is_file()):
        python = _python312()
        if python is None:
            _unavailable("no Python 3.12 (pyenv 3.12.1 or python3.12) for aics-tlog/aics-witness")
        made = subprocess.run(
            [python, "-m", "venv", "--clear", str(VENV)], capture_output=True, text=True
        )
        if made.returncode != 0:
            _unavailable(f"cannot make the venv: {made.stderr[-500:]}")
        pip = subprocess.run(
            [str(bin_dir / "pip"), "install", "-q", *PACKAGES],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if pip.returncode != 0:
            _unavailable(f"pip install {' '.join(PACKAGES)} failed: {pip.stderr[-800:]}")
    return bin_dir


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def witness(aics: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """An aics-witness serving on loopback that trusts log 'agentplane' under SEED's key:
    (its submission URL, its cosigner vkey)."""
    home = tmp_path / "witness"
    home.mkdir()
    config = str(home / "witness.json")
    port = _free_port()
    tool = str(aics / "aics-witness")
    init = subprocess.run(
        [
            tool,
            "init",
            "--config",
            config,
            "--name",
            "witness.test/w1",
            "--listen",
            f"127.0.0.1:{port}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    vkey = init.stdout.strip().splitlines()[-1]
    log_vkey = NoteSigner("agentplane", SEED).verifier_key
    subprocess.run(
        [tool, "add-log", "--config", config, "--origin", "agentplane", "--vkey", log_vkey],
        capture_output=True,
        text=True,
        check=True,
    )
    server = subprocess.Popen(
        [tool, "serve", "--config", config],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if server.poll() is not None:
                    pytest.fail(
                        f"aics-witness exited: {server.stderr.read() if server.stderr else ''}"
                    )
                time.sleep(0.1)
        else:
            pytest.fail("aics-witness did not answer /healthz")
        yield url, vkey
    finally:
        server.terminate()
        server.wait(timeout=10)


class _Result:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> _Result:
    """The command line in this process (a subprocess per command costs a second each)."""
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return _Result(code, out, err)


def _tlog(aics: Path, *args: str) -> dict[str, Any]:
    result = subprocess.run(
        [str(aics / "aics-tlog"), *args], capture_output=True, text=True, timeout=60
    )
    try:
        report: dict[str, Any] = json.loads(result.stdout)
    except ValueError:
        report = {"stdout": result.stdout}
    report["_rc"] = result.returncode
    report["_stderr"] = result.stderr
    return report


def test_aics_witness_cosigns_our_checkpoints_refuses_a_fork_and_aics_tlog_verifies_them(
    aics: Path,
    witness: tuple[str, str],
    sqlite_database: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, witness_vkey = witness
    signer = NoteSigner("agentplane", SEED)
    key_file = tmp_path / "log.key"
    key_file.write_text(SEED.hex())
    key_file.chmod(0o600)
    policy = tmp_path / "policy"
    policy.write_text(f"log {signer.verifier_key}\nwitness w1 {witness_vkey} {url}\nquorum w1\n")
    db = sqlite_database()
    runs = asyncio.run(add_runs(db, sealed=3))
    keys = ["--sign-key-file", str(key_file)]

    first = _cli(capsys, "witness", "--url", db, "--policy", str(policy), *keys, "--json")
    assert first.returncode == 0, first.stdout + first.stderr
    report = json.loads(first.stdout)
    assert report["quorum_met"] and report["witnesses"][0]["status"] == "cosigned"
    assert report["witnesses"][0]["detail"] == "old size 0"
    note3 = tmp_path / "cp3.note"
    note3.write_text(report["note"])

    asyncio.run(add_runs(db, sealed=4))
    second = _cli(capsys, "witness", "--url", db, "--policy", str(policy), *keys, "--json")
    assert second.returncode == 0, second.stdout + second.stderr
    report = json.loads(second.stdout)
    assert report["witnesses"][0] == {
        "witness": "w1",
        "status": "cosigned",
        "detail": "old size 3",
    }  # our consistency proof from the witness's size convinced it
    note7 = tmp_path / "cp7.note"
    note7.write_text(report["note"])

    # Our tlog-tiles, read by aics-tlog: the exported checkpoint carries the witness's
    # cosignature (the policy's quorum is met from the tiles' own checkpoint), a sealed
    # run's entry is proved from our hash tiles, and the log grew consistently from 3.
    tiles = tmp_path / "tiles"
    exported = _cli(capsys, "tiles", "export", str(tiles), "--url", db, *keys)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    aics_policy_tiles = tmp_path / "aics-policy-tiles.json"
    aics_policy_tiles.write_text(json.dumps({"quorum": 1, "witnesses": [witness_vkey]}))
    from_tiles = _tlog(
        aics,
        "verify-checkpoint",
        "--tiles",
        str(tiles),
        "--log-key",
        signer.verifier_key,
        "--policy-file",
        str(aics_policy_tiles),
        "--origin",
        "agentplane",
    )
    assert from_tiles["_rc"] == 0, from_tiles

    async def entry(run: str) -> Any:
        store = await SqlJournalStore.connect(db)
        try:
            return await store.inclusion_proof(run)
        finally:
            await store.close()

    inclusion = asyncio.run(entry(runs[1]))
    proved = _tlog(
        aics,
        "verify-inclusion",
        "--tiles",
        str(tiles),
        "--leaf-hash",
        leaf_hash(inclusion.seal).hex(),
        "--index",
        str(inclusion.index),
        "--log-key",
        signer.verifier_key,
    )
    assert proved["_rc"] == 0, proved
    grew = _tlog(
        aics,
        "verify-consistency",
        "--tiles",
        str(tiles),
        "--old-checkpoint",
        str(note3),
        "--log-key",
        signer.verifier_key,
    )
    assert grew["_rc"] == 0, grew

    # aics-tlog: the log's signature and the witness's cosignature, against a policy.
    aics_policy = tmp_path / "aics-policy.json"
    aics_policy.write_text(json.dumps({"quorum": 1, "witnesses": [witness_vkey]}))
    for note in (note3, note7):
        checked = _tlog(
            aics,
            "verify-checkpoint",
            "--note",
            str(note),
            "--log-key",
            signer.verifier_key,
            "--policy-file",
            str(aics_policy),
            "--origin",
            "agentplane",
        )
        assert checked["_rc"] == 0, checked
    unsigned = tmp_path / "log-only.note"
    unsigned.write_text(note7.read_text().split("\u2014 witness.test/w1")[0])
    refused = _tlog(
        aics,
        "verify-checkpoint",
        "--note",
        str(unsigned),
        "--log-key",
        signer.verifier_key,
        "--policy-file",
        str(aics_policy),
    )
    assert refused["_rc"] != 0, refused  # no cosignature: the quorum is not met

    # A receipt: ours verifies it offline, aics-tlog verifies its inclusion proof.
    receipt_file = tmp_path / "run.tlog-proof"
    made = _cli(capsys, "receipt", runs[1], "--url", db, *keys, "-o", str(receipt_file))
    assert made.returncode == 0, made.stderr
    ours = _cli(
        capsys, "verify-receipt", str(receipt_file), "--policy", str(policy), "--run", runs[1]
    )
    assert ours.returncode == 0, ours.stdout + ours.stderr
    receipt = parse_receipt(receipt_file.read_text())
    checkpoint_file = tmp_path / "receipt.note"
    checkpoint_file.write_text(receipt.note)
    proof_file = tmp_path / "inclusion.proof"
    proof_file.write_text(
        "".join(base64.b64encode(bytes(h)).decode() + "\n" for h in receipt.proof)
    )
    included = _tlog(
        aics,
        "verify-inclusion",
        "--leaf-hash",
        leaf_hash(receipt.head).hex(),
        "--index",
        str(receipt.index),
        "--checkpoint",
        str(checkpoint_file),
        "--proof",
        str(proof_file),
        "--log-key",
        signer.verifier_key,
        "--policy-file",
        str(aics_policy),
    )
    assert included["_rc"] == 0, included

    # Our consistency proof from 3 to 7, checked by aics-tlog.
    async def consistency() -> tuple[Any, Any, list[Any]]:
        store = await SqlJournalStore.connect(db)
        try:
            old, _ = await store.checkpoint_at(3)
            new, proof = await store.checkpoint_at(7, 3)
            return old, new, proof
        finally:
            await store.close()

    old, new, proof = asyncio.run(consistency())
    cproof = tmp_path / "consistency.proof"
    cproof.write_text("".join(base64.b64encode(bytes(h)).decode() + "\n" for h in proof))
    consistent = _tlog(
        aics,
        "verify-consistency",
        "--old-size",
        "3",
        "--new-size",
        "7",
        "--old-root",
        base64.b64encode(bytes(old.root)).decode(),
        "--new-root",
        base64.b64encode(bytes(new.root)).decode(),
        "--proof",
        str(cproof),
    )
    assert consistent["_rc"] == 0, consistent

    # A fork: another database, same origin and key, a different history of 8 runs.
    fork = sqlite_database()
    asyncio.run(add_runs(fork, sealed=8))
    forked = _cli(capsys, "witness", "--url", fork, "--policy", str(policy), *keys)
    assert forked.returncode == 1, forked.stdout + forked.stderr
    assert "FORKED" in forked.stdout and "w1" in forked.stdout
    assert "a witness reports a fork" in forked.stderr
    # The honest log is still cosigned from where the witness is.
    asyncio.run(add_runs(db, sealed=1))
    third = _cli(capsys, "witness", "--url", db, "--policy", str(policy), *keys, "--json")
    assert third.returncode == 0, third.stdout + third.stderr
    assert json.loads(third.stdout)["witnesses"][0]["detail"] == "old size 7"
