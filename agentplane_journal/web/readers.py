"""Who may read a tenant's content on ``serve``: per-tenant reader tokens.

The server's threat model: tiles, checkpoints and inclusion proofs carry only hashes and
are public by design (anyone may audit the log); what a tenant wrote (record bodies, run
ids and outcomes, the list of tenants itself) is not. Those are served only to a reader
holding a token for that tenant, and not at all unless the operator gives
``serve --reader-token-file``. The file holds one ``TENANT TOKEN`` pair a line (``*`` for
every tenant; ``#`` starts a comment); only the tokens' SHA-256 is kept in memory and
compared in constant time. A reader sends the token as ``Authorization: Bearer TOKEN``, or
as the password of HTTP Basic (what a browser asks for at ``/signin``; the user name is
ignored). Tokens travel in a header, never in a URL (which ends up in logs): put ``serve``
behind TLS when it is reached over a network.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ALL_TENANTS", "MIN_TOKEN", "Readers", "parse_readers", "request_token"]

ALL_TENANTS = "*"
MIN_TOKEN = 16
"""The shortest token accepted: guessing one must not be a matter of a few requests."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


@dataclass(frozen=True, slots=True)
class Readers:
    """The reader tokens: ``(tenant or "*", SHA-256 of the token)`` pairs."""

    entries: tuple[tuple[str, bytes], ...] = ()

    def tenants(self, token: str | None) -> frozenset[str]:
        """The tenants ``token`` may read (``{"*"}``: every one); empty for no token."""
        if token is None or not self.entries:
            return frozenset()
        mine = _digest(token)
        # Every entry is compared (no early exit): the time says nothing about which matched.
        found = [t for t, d in self.entries if hmac.compare_digest(d, mine)]
        return frozenset(found)

    def may_read(self, token: str | None, tenant: str) -> bool:
        allowed = self.tenants(token)
        return ALL_TENANTS in allowed or tenant in allowed


def parse_readers(text: str) -> Readers:
    """Parse a reader token file; ``ValueError`` naming the line (never echoing a token)."""
    entries: list[tuple[str, bytes]] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"line {number}: expected 'TENANT TOKEN' (or '* TOKEN')")
        tenant, token = parts
        if len(token) < MIN_TOKEN:
            raise ValueError(
                f"line {number}: the token for {tenant!r} is shorter than {MIN_TOKEN} "
                "characters; use a random one (e.g. `openssl rand -hex 24`)"
            )
        entries.append((tenant, _digest(token)))
    return Readers(tuple(entries))


def request_token(headers: Mapping[str, str]) -> str | None:
    """The token a request carries in ``Authorization`` (Bearer, or Basic's password)."""
    value = headers.get("authorization")
    if not value:
        return None
    scheme, _, rest = value.partition(" ")
    scheme, rest = scheme.lower(), rest.strip()
    if scheme == "bearer" and rest:
        return rest
    if scheme == "basic" and rest:
        try:
            decoded = base64.b64decode(rest, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return None
        _, sep, password = decoded.partition(":")
        return password if sep and password else None
    return None
