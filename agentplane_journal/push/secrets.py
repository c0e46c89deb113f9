"""A push registration row's secrets: encrypted as it is written, opened as it is read.

Tokens and credentials are encrypted bound to their row (tenant, task, config id, column, url,
auth scheme, and whether the row has credentials; see :mod:`.secretbox`). This is the one
place that knows which columns hold secrets, what each is bound to, and how a stored row
becomes a :class:`PushConfig`, so the store's statements (:mod:`.push`) and the secrets'
binding cannot drift apart. No SQL here: a row is whatever the store's statement returned.

Blanking. With a key, the token column *always* holds an envelope: a registration without a
token holds the encrypted absence marker there. So a NULL token column on a keyed store is a
row someone blanked (or one written before format v3, or without a key, which the store
cannot tell apart): it is refused like plaintext, and adopted the same way
(``accept_plaintext=True``, then ``reencrypt()``). Blanking the credentials column breaks the
token's binding (it is bound to whether the row has credentials), and blanking the scheme
breaks both. So no edit of a v3 row turns it into a registration with fewer secrets; rows
still in format v1 or v2 prove none of this until ``reencrypt()`` rewrites them. Without a key
there is nothing to prove it with: whoever can write the table can read its tokens anyway.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from agentplane_journal.core.ids import RunId
from agentplane_journal.errors import CorruptRegistrationError, SecretUnavailableError
from agentplane_journal.push.rows import check_row, row_names
from agentplane_journal.push.secretbox import Keyring, encrypt_secret, is_current, open_secret
from agentplane_journal.push.values import PushAuthentication, PushConfig
from agentplane_journal.push.values import build_unchecked as _build

__all__ = ["CREDENTIALS", "TOKEN", "Binding", "RowSecrets"]

# The columns that hold secrets (a column's name is also part of what its value is bound to).
TOKEN = "token"
CREDENTIALS = "auth_credentials"


class Binding(NamedTuple):
    """What an encrypted value is bound to, besides the tenant and the column.

    ``auth_credentials`` is what the row's credentials column holds or will hold: only
    whether it is set is bound (so blanking it is seen), never the value.
    """

    task_id: str
    config_id: str
    url: str
    auth_scheme: str | None
    auth_credentials: str | None


class RowSecrets:
    """One tenant's secrets under one keyring: encrypting a row's values, opening them again.

    Without a keyring, values are stored and read as plain text (as agentplane 0.4.0 does);
    with one, plaintext in an encrypted column is refused unless ``accept_plaintext``.
    """

    __slots__ = ("_accept_plaintext", "_keyring", "_tenant")

    def __init__(self, keyring: Keyring | None, tenant: str, accept_plaintext: bool) -> None:
        self._keyring = keyring
        self._tenant = tenant
        self._accept_plaintext = accept_plaintext

    def open(self, row: Any, column: str, stored: str | None) -> str | None:
        """The secret ``stored`` in ``column`` of ``row``, or :class:`SecretUnavailableError`."""
        if stored is None and column == TOKEN and self._keyring is not None:
            if not self._accept_plaintext:
                where = (
                    f"registration {row.config_id!r} of task {row.task_id} in tenant "
                    f"{self._tenant!r}"
                )
                detail = (
                    f"{where} holds no encrypted token, where this store, which has a key, always "
                    "encrypts one (an absence marker when there is no token): its token was "
                    "removed (blanked), or the row was written before format v3, by agentplane "
                    "or by a store without a key. To adopt such rows, open the store with "
                    "accept_plaintext=True and run reencrypt()"
                )
                raise SecretUnavailableError(None, column, detail)
            return None
        return open_secret(
            self._keyring,
            stored,
            **self._binding(row, column),
            accept_plaintext=self._accept_plaintext,
        )

    def encrypt(self, row: Any, column: str, value: str | None) -> str | None:
        """``value`` as ``column`` of ``row`` stores it: encrypted, or plain without a key."""
        return encrypt_secret(
            self._keyring, value, **self._binding(row, column), mark_absent=column == TOKEN
        )

    def current(self, row: Any) -> bool:
        """Whether ``row``'s secrets are all in the current format under the current key
        (a keyed row's token column is never empty: see the module's note on blanking)."""
        keyring = self._keyring
        return (
            keyring is not None
            and row.token is not None
            and is_current(keyring, row.token)
            and is_current(keyring, row.auth_credentials)
        )

    def _binding(self, row: Any, column: str) -> dict[str, Any]:
        """What an encrypted value is bound to (its associated data): the row and the column."""
        return {
            "tenant": self._tenant,
            "task_id": row.task_id,
            "config_id": row.config_id,
            "column": column,
            "url": row.url,
            "auth_scheme": row.auth_scheme,
            "with_credentials": row.auth_credentials is not None,
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
