"""Alembic: the commands and the host recipe (the runtime never imports these)."""
