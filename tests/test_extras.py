"""An adapter imported without its framework says which extra to install.

Each case runs in a fresh interpreter whose ``sys.meta_path`` starts with a finder that
refuses the framework's modules, as if the extra were not installed, and imports the
adapter: the ``ImportError`` must name the ``pip install`` command for that extra, word for
word. Seen red before: ``ModuleNotFoundError: No module named 'pydantic_ai'`` (and the
OpenAI Agents session imported without complaint, to fail at the first run).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent

_HIDE_AND_IMPORT = """
import importlib, sys

hidden = sys.argv[1].split(",")


class Absent:
    def find_spec(self, name, path=None, target=None):
        if any(name == h or name.startswith(h + ".") for h in hidden):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Absent())
try:
    importlib.import_module(sys.argv[2])
except ImportError as exc:
    print(exc)
    sys.exit(3)
print("imported")
"""


@pytest.mark.parametrize(
    ("module", "hidden", "extra"),
    [
        ("agentplane_journal.adapters.pydantic_ai", "pydantic_ai", "pydantic-ai"),
        ("agentplane_journal.adapters.pydantic_ai", "pydantic,pydantic_ai", "pydantic-ai"),
        ("agentplane_journal.adapters.openai_agents", "agents", "openai-agents"),
        ("agentplane_journal.langgraph", "langgraph", "langgraph"),
        ("agentplane_journal.langgraph.saver", "langgraph,langchain_core", "langgraph"),
    ],
)
def test_an_adapter_without_its_framework_names_the_extra_to_install(
    module: str, hidden: str, extra: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _HIDE_AND_IMPORT, hidden, module],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert f'pip install "agentplane_journal[{extra}]"' in result.stdout, result.stdout


def test_with_the_framework_installed_each_adapter_imports() -> None:
    for module in ("pydantic_ai", "openai_agents"):
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                _HIDE_AND_IMPORT,
                "nothing_hidden",
                f"agentplane_journal.adapters.{module}",
            ],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.stdout.strip() == "imported", result.stdout + result.stderr
