"""The ``agentplane-journal`` command line."""
