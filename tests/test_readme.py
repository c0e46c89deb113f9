"""The README's example is code a new user will paste: it must run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_example_runs_as_written(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"## Using it\n\n```python\n(.*?)```", text, re.S)
    assert match, "the README lost its 'Using it' example"
    result = subprocess.run(
        [sys.executable, "-c", match.group(1)], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("agentplane\n1\n")
