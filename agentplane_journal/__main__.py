"""``python -m agentplane_journal``: the ``agentplane-journal`` command."""

import sys

from agentplane_journal.cli.main import main

sys.exit(main())
