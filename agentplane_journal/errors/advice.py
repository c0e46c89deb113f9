"""What every error shares: the run it names, and the command its advice names (for the
database the caller used, ready to paste)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from agentplane_journal.core.ids import RunId


def _run(run: RunId | str) -> RunId:
    """The run as a :class:`RunId`; text (``run_<ULID>``) is parsed, for callers that had it."""
    return RunId.parse(run)


@dataclass(frozen=True)
class Database:
    """The database an error's advice is about, as the command line names it.

    ``url`` is the URL the application used, its password replaced by ``***`` (``masked``
    says so) and a SQLite file's path made absolute, so the advice works from any directory;
    ``schema`` and ``tenant`` (``None``: the defaults) become ``--schema`` and ``--tenant``.
    """

    url: str
    masked: bool = False
    schema: str | None = None
    tenant: str | None = None

    def command(self, words: str, *, tenant: bool = True) -> str:
        """```agentplane-journal WORDS --url '...'``` and the options, ready to paste."""
        line = f"agentplane-journal {words} --url {shlex.quote(self.url)}"
        if self.schema is not None:
            line += f" --schema {shlex.quote(self.schema)}"
        if tenant and self.tenant not in (None, "default"):
            line += f" --tenant {shlex.quote(str(self.tenant))}"
        note = " (with the password in place of ***)" if self.masked else ""
        return f"`{line}`{note}"


def command(words: str, database: Database | None, *, tenant: bool = True) -> str:
    """Advice naming a command: for ``database`` when known, else with a placeholder."""
    if database is None:
        return f"`agentplane-journal {words} --url URL` (URL: the database's)"
    return database.command(words, tenant=tenant)


def database_of(store: object) -> Database | None:
    """A store's :class:`Database` for advice (a SQL store's ``database``), else ``None``."""
    found = getattr(store, "database", None)
    return found if isinstance(found, Database) else None
