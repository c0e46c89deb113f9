"""Write ``agentplane-0.22.0-catalog.json``: the catalog of a database made by 0.22.0's DDL.

Run once, from the repository root, where ``../shared/reference`` holds agentplane's
reference source (or point ``AGENTPLANE_JOURNAL_REFERENCE`` at it)::

    python tests/data/make_catalog_022.py

As ``make_catalog_040.py`` does for 0.4.0: a throwaway cluster (or
``AGENTPLANE_JOURNAL_TEST_PG_URL``), an empty database, 0.22.0's journal ``SCHEMA`` run
exactly as its store runs it on connect, and what the catalogs say about it. Commit the
result; ``tests/test_schema_compat_022.py`` checks it against the source whenever the source
is present.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from make_catalog_040 import run, write  # noqa: E402

from support.reference import CATALOG_022, REFERENCE_022, schema_022  # noqa: E402

if __name__ == "__main__":
    run(
        REFERENCE_022,
        lambda server: write(server, schema_022(), "0.22.0", REFERENCE_022, CATALOG_022),
    )
