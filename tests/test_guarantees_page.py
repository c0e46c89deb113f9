"""The guarantees page (docs/concepts/guarantees.md) names only tests that exist.

Each promise there names the test that must fail without it; a renamed or deleted test would
leave the promise pointing at nothing, so every ``tests/<file>.py::<name>`` on the page must
be a test function of that file.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "concepts" / "guarantees.md"
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")


def _tests_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


def test_every_test_the_guarantees_page_names_exists() -> None:
    references = REFERENCE.findall(PAGE.read_text("utf-8"))
    assert len(references) >= 40
    missing = [
        f"{file}::{name}"
        for file, name in references
        if not (ROOT / file).is_file() or name not in _tests_of(ROOT / file)
    ]
    assert not missing, missing


def test_every_row_of_the_guarantees_page_names_a_test() -> None:
    for line in PAGE.read_text("utf-8").splitlines():
        if line.startswith("| ") and not line.startswith(("| promise", "|---")):
            assert REFERENCE.search(line), line
