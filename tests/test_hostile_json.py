"""JSON nested 100,000 deep in a file a command reads is a refusal, never a traceback.

``verify-export`` and ``restore`` (an export line, and a record's wire bytes inside one) and
``verify-receipt`` (a receipt's ``extra`` line) on both dialects, through ``main`` in-process:
an uncaught ``RecursionError`` would end the test with it.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from agentplane_journal import RunId, SqlJournalStore
from agentplane_journal.core import jsonload
from agentplane_journal.tlog.note import NoteSigner
from agentplane_journal.tlog.policy import parse_policy
from agentplane_journal.tlog.receipt import HEADER, verify_receipt

from support.cli import CliResult
from support.helpers import admitted, note

DEEP = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 100_000 + "1" + "}" * 100_000


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_url(
    request: pytest.FixtureRequest, sqlite_database: Callable[..., str]
) -> Callable[[], str]:
    if request.param == "sqlite":
        return sqlite_database
    return request.getfixturevalue("pg_database")  # type: ignore[no-any-return]


async def _build(url: str) -> None:
    store = await SqlJournalStore.connect(url)
    try:
        run = RunId.generate()
        await store.append(1, [admitted(run), note(run, "n")])
        await store.seal(run, 1, "succeeded")
    finally:
        await store.close()


def test_loads_bounds_depth() -> None:
    for text in (DEEP, DEEP_OBJECT, "[" * 300 + "]" * 300):
        with pytest.raises(jsonload.JsonTooDeep, match="nested more than 256"):
            jsonload.loads(text)
    assert jsonload.loads("[" * 256 + "]" * 256) is not None
    assert jsonload.loads('{"a": "[[[[[[["}') == {"a": "[[[[[[["}


def test_decode_bounds_depth_at_the_edge() -> None:
    # decode counts brackets only in a text long enough to nest past the bound (2 x 257
    # brackets): the shortest too-deep text is refused, the deepest allowed one read.
    decoder = json.JSONDecoder()
    for text in ("[" * 257 + "]" * 257, '{"a":' * 257 + "1" + "}" * 257, DEEP):
        with pytest.raises(jsonload.JsonTooDeep, match="nested more than 256"):
            jsonload.decode(decoder, text)
    assert jsonload.decode(decoder, "[" * 256 + "]" * 256) is not None
    assert jsonload.decode(decoder, '{"a":' * 256 + "1" + "}" * 256) is not None


def test_deep_json_in_an_export_is_a_refusal(
    fresh_url: Callable[[], str], tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    url = fresh_url()
    asyncio.run(_build(url))
    export = tmp_path / "e.jsonl"
    assert (
        cli(
            "export", "--all", "--tenant", "default", "--url", url, "--output", str(export)
        ).returncode
        == 0
    )
    lines = export.read_text().splitlines()
    record = next(i for i, line in enumerate(lines) if '"raw"' in line)
    for hostile in (DEEP, json.dumps({**json.loads(lines[record]), "raw": DEEP_OBJECT})):
        edited = tmp_path / "edited.jsonl"
        edited.write_text("\n".join([*lines[:record], hostile, *lines[record + 1 :]]) + "\n")
        checked = cli("verify-export", str(edited))
        assert checked.returncode == 1, checked.out
        assert "Traceback" not in checked.out and "SOUND" not in checked.out.upper().replace(
            "UNSOUND", ""
        )
        restored = cli("restore", str(edited), "--url", fresh_url())
        assert restored.returncode in (1, 2), restored.out
        assert "Traceback" not in restored.out and "FAITHFUL" not in restored.out


def test_deep_json_in_a_receipt_is_a_failed_check(
    tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    log = NoteSigner("agentplane", bytes(range(1, 33)))
    policy = tmp_path / "policy"
    policy.write_text(f"log {log.verifier_key}\nquorum none\n")
    extra = base64.b64encode(DEEP_OBJECT.encode()).decode()
    receipt = tmp_path / "r.proof"
    receipt.write_text(f"{HEADER}\nextra {extra}\nindex 0\n\nagentplane\n1\nAAAA\n")
    report = verify_receipt(receipt.read_bytes(), parse_policy(policy.read_bytes()))
    assert not report.ok and "nested more than" in report.checks[0][1]
    done = cli("verify-receipt", str(receipt), "--policy", str(policy))
    assert done.returncode == 1 and "nested more than" in done.out
