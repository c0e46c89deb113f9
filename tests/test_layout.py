"""The package's shape, held by tests: layer contracts, no Alembic at run time, no cycles."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_the_layer_contracts_hold() -> None:
    """``pyproject.toml``'s import-linter contracts: core is pure, the runtime never imports
    Alembic, layers import only downwards (seen red with an upward import from db/)."""
    lint = shutil.which("lint-imports")
    assert lint, "import-linter is a test dependency: pip install -e '.[test]'"
    result = subprocess.run(
        [lint], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_opening_a_store_and_appending_loads_no_alembic(
    sqlite_database: Callable[..., str],
) -> None:
    url = sqlite_database()
    script = f"""
import asyncio, sys
from agentplane_journal import Append, RunId, SqlJournalStore

async def main():
    store = await SqlJournalStore.connect({url!r})
    run = RunId.generate()
    await store.append(0, [Append(run, "Note", {{"text": "hi"}})])
    await store.verify(run)
    await store.close()

asyncio.run(main())
print(sorted(m for m in sys.modules if m.split(".")[0] == "alembic"))
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout
