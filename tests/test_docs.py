"""The documentation site builds with warnings as errors, and says what the package holds.

Its code blocks are run by tests/test_docs_examples.py (the markers: tests/support/docblocks.py and
docs/tests.md).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.docblocks import blocks

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _env() -> dict[str, str]:
    """This source tree first on the path, so the examples run against it."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), path]))}


def test_the_site_builds_strict(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env={**_env(), "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    assert (tmp_path / "reference" / "api" / "index.html").is_file()
    api = (tmp_path / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="agentplane_journal.journal.store.SqlJournalStore.append_atomic"' in api
    assert 'id="agentplane_journal.journal.store.SqlJournalStore.verify"' in api  # inherited


def test_the_tutorial_example_is_the_readmes() -> None:
    """One example, shown twice: tests/test_docs_examples.py runs it (twice, in one place)."""
    [tutorial] = [b.code for b in blocks(DOCS / "tutorial.md") if b.lang == "python"]
    [readme] = [b.code for b in blocks(ROOT / "README.md") if b.lang == "python"]
    assert tutorial == readme


def test_the_module_map_names_every_module() -> None:
    design = (DOCS / "design.md").read_text(encoding="utf-8")
    tree = design.split("## Module map", 1)[1].split("```", 2)[1]
    package = ROOT / "agentplane_journal"
    for module in sorted(package.rglob("*.py")):
        rel = module.relative_to(package)
        # the map indents each module under its folder, so check the name and its folder
        assert re.search(rf"^\s+{re.escape(rel.name)}\s", tree, re.M), rel
        for folder in rel.parts[:-1]:
            assert re.search(rf"^\s+{re.escape(folder)}/", tree, re.M), rel


def test_the_api_reference_lists_every_public_name() -> None:
    init = ROOT / "agentplane_journal" / "__init__.py"
    tree = ast.parse(init.read_text(encoding="utf-8"))
    exports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_EXPORTS":
            exports = ast.literal_eval(node.value)
    assert exports
    api = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    for name, module in exports.items():
        assert f"::: agentplane_journal.{module}.{name}\n" in api, name
