"""One version source: ``agentplane_journal/__init__.py``'s ``__version__``.

The build reads it (``[tool.hatch.version]``), so the installed distribution's metadata and
the package's ``__version__`` never disagree, and pyproject.toml holds no second copy.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib

import agentplane_journal

from support.migration_tools import REPO


def test_the_installed_metadata_names_the_packages_version() -> None:
    assert importlib.metadata.version("agentplane_journal") == agentplane_journal.__version__


def test_the_version_is_written_once() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["hatch"]["version"]["path"] == "agentplane_journal/__init__.py"
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.dev\d+)?", agentplane_journal.__version__)
