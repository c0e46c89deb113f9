"""agentplane 0.4.0's PostgreSQL schema, for the compatibility tests, with or without its source.

Two forms:

* the reference source itself, ``seed-postgres-store-0.4.0.rs.txt`` (its ``SCHEMA``
  constant is the DDL 0.4.0 runs on connect), found in ``../shared/reference`` beside the
  repository or in ``$AGENTPLANE_JOURNAL_REFERENCE``. Not part of the repository: tests that
  need it skip without it, except under ``CI``, where its absence fails them;
* ``tests/data/agentplane-0.4.0-catalog.json``: the catalog (see ``migration_tools``) of a
  PostgreSQL database that 0.4.0's DDL created, committed, so the schema comparison runs
  from a fresh clone. Made once by ``python tests/data/make_catalog_040.py`` from the source;
  a test re-derives it whenever the source is present, so it cannot drift.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from migration_tools import REPO, Catalog

REFERENCE = "seed-postgres-store-0.4.0.rs.txt"
CATALOG_040 = REPO / "tests" / "data" / "agentplane-0.4.0-catalog.json"


def reference_dir() -> Path | None:
    """Where agentplane's reference sources are, if anywhere."""
    candidates = [REPO.parent / "shared" / "reference"]
    if os.environ.get("AGENTPLANE_JOURNAL_REFERENCE"):
        candidates.insert(0, Path(os.environ["AGENTPLANE_JOURNAL_REFERENCE"]))
    return next((c for c in candidates if (c / REFERENCE).is_file()), None)


def schema_040() -> str:
    """The ``SCHEMA`` constant of agentplane 0.4.0's PostgreSQL store, verbatim.

    Skips the calling test when the source is not beside the repository (a fresh clone);
    under ``CI`` that is a failure instead.
    """
    where = reference_dir()
    if where is None:
        message = (
            f"{REFERENCE} not found in ../shared/reference (or $AGENTPLANE_JOURNAL_REFERENCE): "
            "this check needs agentplane's reference source"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    source = (where / REFERENCE).read_text(encoding="utf-8")
    opening = 'const SCHEMA: &str = "'
    start = source.index(opening) + len(opening)
    end = source.index('";', start)
    ddl = source[start:end]
    # A plain Rust string: no escapes in it, so its text is the SQL agentplane sends.
    assert "\\" not in ddl and '"' not in ddl
    return ddl


def to_json(catalog: Catalog) -> dict[str, list[list[Any]]]:
    return {section: [list(row) for row in rows] for section, rows in sorted(catalog.items())}


def load_catalog_040() -> Catalog:
    """The committed catalog of a database created by 0.4.0's DDL."""
    data = json.loads(CATALOG_040.read_text(encoding="utf-8"))
    return {section: [tuple(row) for row in rows] for section, rows in data["catalog"].items()}
