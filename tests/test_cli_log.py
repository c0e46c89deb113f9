"""The command line on the log's stored tree: `verify --all` names the first bad position,
`reindex-log` rebuilds it (and says so), and both are quiet on an intact log. SQLite files
tampered with straight SQL, as an attacker with write access would."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable

import pytest

from support.cli import add_runs, db_path, run_cli

pytestmark = pytest.mark.slow


def test_verify_all_names_the_first_bad_log_position_and_reindex_log_repairs_it(
    sqlite_database: Callable[..., str],
) -> None:
    url = sqlite_database()
    asyncio.run(add_runs(url, sealed=6, open_=1))
    intact = run_cli("verify", "--all", "--url", url)
    assert intact.returncode == 0, intact.stdout + intact.stderr
    assert "log: 6 leaves, stored tree matches the seals" in intact.stdout
    note = run_cli("checkpoint", "--url", url).stdout

    with sqlite3.connect(db_path(url)) as db:
        db.execute("UPDATE log_tree SET hash = zeroblob(32) WHERE level = 1 AND idx = 2")
    broken = run_cli("verify", "--all", "--url", url)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "FAILED log position 4: stored node (level 1, index 2)" in broken.stdout
    assert "verified 7 runs of tenant 'default': all intact" in broken.stdout  # runs are fine
    report = json.loads(run_cli("verify", "--all", "--url", url, "--json").stdout)
    assert report["log"] == {
        "ok": False,
        "leaves": 6,
        "position": 4,
        "error": "stored node (level 1, index 2) does not hash its children",
        "unrepairable": 0,
    }
    assert run_cli("checkpoint", "--url", url).stdout != note  # the lie shows in the root

    fixed = run_cli("reindex-log", "--url", url)
    assert fixed.returncode == 0, fixed.stderr
    assert "rebuilt from position 4 (1 stored nodes rewritten)" in fixed.stdout
    assert run_cli("checkpoint", "--url", url).stdout == note
    again = run_cli("reindex-log", "--url", url, "--json")
    assert json.loads(again.stdout)["rewritten"] == 0
    assert run_cli("verify", "--all", "--url", url).returncode == 0
