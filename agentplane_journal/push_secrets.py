"""A push registration row's secrets: sealed as it is written, opened as it is read.

Tokens and credentials are sealed bound to their row (tenant, task, config id, column, url
and auth scheme; see :mod:`.sealing`). This is the one place that knows which columns hold
secrets, what each is bound to, and how a stored row becomes a :class:`PushConfig`, so the
store's statements (:mod:`.push`) and the secrets' binding cannot drift apart. No SQL here:
a row is whatever the store's statement returned.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .errors import CorruptRegistrationError
from .ids import RunId
from .push_rows import check_row, row_names
from .push_values import PushAuthentication, PushConfig
from .push_values import build_unchecked as _build
from .sealing import Keyring, open_secret, seal_secret

__all__ = ["CREDENTIALS", "TOKEN", "Binding", "RowSecrets"]

# The columns that hold secrets (a column's name is also part of what its value is bound to).
TOKEN = "token"
CREDENTIALS = "auth_credentials"


class Binding(NamedTuple):
    """What a sealed value is bound to, besides the tenant and the column."""

    task_id: str
    config_id: str
    url: str
    auth_scheme: str | None


class RowSecrets:
    """One tenant's secrets under one keyring: sealing a row's values, opening them again.

    Without a keyring, values are stored and read as plain text (as agentplane 0.4.0 does);
    with one, plaintext in a sealed column is refused unless ``accept_plaintext``.
    """

    __slots__ = ("_accept_plaintext", "_keyring", "_tenant")

    def __init__(self, keyring: Keyring | None, tenant: str, accept_plaintext: bool) -> None:
        self._keyring = keyring
        self._tenant = tenant
        self._accept_plaintext = accept_plaintext

    def open(self, row: Any, column: str, stored: str | None) -> str | None:
        """The secret ``stored`` in ``column`` of ``row``, or :class:`SecretUnavailableError`."""
        return open_secret(
            self._keyring,
            stored,
            **self._binding(row, column),
            accept_plaintext=self._accept_plaintext,
        )

    def seal(self, row: Any, column: str, value: str | None) -> str | None:
        """``value`` as ``column`` of ``row`` stores it: sealed, or plain without a key."""
        return seal_secret(self._keyring, value, **self._binding(row, column))

    def _binding(self, row: Any, column: str) -> dict[str, Any]:
        """What a sealed value is bound to (its associated data): the row and the column."""
        return {
            "tenant": self._tenant,
            "task_id": row.task_id,
            "config_id": row.config_id,
            "column": column,
            "url": row.url,
            "auth_scheme": row.auth_scheme,
        }

    def config(self, row: Any, *, cursor: bool = False) -> PushConfig:
        """The row as a configuration, or a :class:`StoreError` naming what is wrong with it."""
        check_row(row, cursor=cursor)
        try:
            task = RunId.parse(row.task_id)
        except ValueError:
            raise CorruptRegistrationError(
                *row_names(row), "its task_id is not a run id (run_<ULID>)"
            ) from None
        token = self.open(row, TOKEN, row.token)
        authentication = None
        if row.auth_scheme is not None and row.auth_credentials is not None:
            credentials = self.open(row, CREDENTIALS, row.auth_credentials)
            authentication = _build(
                PushAuthentication, scheme=row.auth_scheme, credentials=credentials
            )
        return _build(
            PushConfig,
            id=row.config_id,
            task=task,
            url=row.url,
            token=token,
            authentication=authentication,
        )
