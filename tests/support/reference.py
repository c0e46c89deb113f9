"""agentplane's PostgreSQL schemas (0.4.0's, 0.22.0's), for the compatibility tests, with or
without their source.

Two forms of each:

* the reference source itself (its ``SCHEMA`` constant is the DDL that version runs on
  connect): ``seed-postgres-store-0.4.0.rs.txt`` and
  ``agentplane-0.22.0/src_store_postgres.rs.txt``, found in ``../shared/reference`` beside
  the repository or in ``$AGENTPLANE_JOURNAL_REFERENCE``. Not part of the repository: tests
  that need it skip without it, except under ``CI``, where its absence fails them;
* ``tests/data/agentplane-0.4.0-catalog.json`` and ``agentplane-0.22.0-catalog.json``: the
  catalog (see ``migration_tools``) of a PostgreSQL database that version's DDL created,
  committed, so the schema comparisons run from a fresh clone. Made once by ``python
  tests/data/make_catalog_040.py`` (``make_catalog_022.py``) from the source; a test
  re-derives each whenever the source is present, so it cannot drift.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from support.migration_tools import REPO, Catalog

REFERENCE = "seed-postgres-store-0.4.0.rs.txt"
CATALOG_040 = REPO / "tests" / "data" / "agentplane-0.4.0-catalog.json"
REFERENCE_022 = "agentplane-0.22.0/src_store_postgres.rs.txt"
CATALOG_022 = REPO / "tests" / "data" / "agentplane-0.22.0-catalog.json"


def reference_dir(name: str = REFERENCE) -> Path | None:
    """Where agentplane's reference sources are (the folder holding ``name``), if anywhere."""
    candidates = [REPO.parent / "shared" / "reference"]
    if os.environ.get("AGENTPLANE_JOURNAL_REFERENCE"):
        candidates.insert(0, Path(os.environ["AGENTPLANE_JOURNAL_REFERENCE"]))
    return next((c for c in candidates if (c / name).is_file()), None)


def schema_040() -> str:
    """The ``SCHEMA`` constant of agentplane 0.4.0's PostgreSQL store, verbatim.

    Skips the calling test when the source is not beside the repository (a fresh clone);
    under ``CI`` that is a failure instead.
    """
    return _schema(REFERENCE)


def schema_022() -> str:
    """The ``SCHEMA`` constant of agentplane 0.22.0's PostgreSQL store, verbatim (the journal
    store's own; the case, authority and memory stores' schemas it also runs on connect are
    not the journal's). Skips, or fails under ``CI``, as :func:`schema_040` does."""
    return _schema(REFERENCE_022)


def _schema(name: str) -> str:
    where = reference_dir(name)
    if where is None:
        message = (
            f"{name} not found in ../shared/reference (or $AGENTPLANE_JOURNAL_REFERENCE): "
            "this check needs agentplane's reference source"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    source = (where / name).read_text(encoding="utf-8")
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
    return _load(CATALOG_040)


def load_catalog_022() -> Catalog:
    """The committed catalog of a database created by 0.22.0's DDL."""
    return _load(CATALOG_022)


def _load(path: Path) -> Catalog:
    data = json.loads(path.read_text(encoding="utf-8"))
    return {section: [tuple(row) for row in rows] for section, rows in data["catalog"].items()}
