"""``python -m agentplane_journal``: the ``agentplane-journal`` command."""

import sys

from .cli import main

sys.exit(main())
