"""A PostgreSQL URL as people have it: libpq's query parameters, for asyncpg.

Managed PostgreSQL (RDS, Cloud SQL, Neon, Supabase) hands out libpq URLs such as
``postgresql://user:pw@host/db?sslmode=require``. SQLAlchemy passes a URL's query to
``asyncpg.connect`` as keyword arguments, which asyncpg does not take (``TypeError:
connect() got an unexpected keyword argument 'sslmode'``). :func:`libpq_options` takes
them out of the URL and hands them to asyncpg in the forms it understands:

* ``sslmode``, ``sslrootcert``, ``sslcert``, ``sslkey``, ``sslcrl``, ``sslpassword``,
  ``ssl_min_protocol_version``, ``ssl_max_protocol_version`` and ``target_session_attrs``
  go into asyncpg's own libpq-style DSN (the ``dsn`` argument; host, port, user, password
  and database still come from the URL), so the TLS decisions are asyncpg's implementation
  of libpq's: ``disable``, ``allow``, ``prefer`` (the default), ``require``, ``verify-ca``,
  ``verify-full``. A URL that demands TLS (``require``, ``verify-*``) is refused when the
  server does not offer it, never downgraded; ``verify-full`` checks the host name;
* ``application_name`` and ``options`` (``-c name=value ...``) are startup parameters,
  sent as ``server_settings``;
* ``connect_timeout`` (whole seconds; 0: no limit) is asyncpg's ``timeout``.

``host=/var/run/postgresql`` (a unix socket's directory) and ``port`` are SQLAlchemy's
and work as they are. Every value is checked here, so a wrong one is a ``ValueError``
naming the parameter, never a driver's ``TypeError``; the message never repeats the URL.
"""

from __future__ import annotations

import os
import urllib.parse
from typing import Any

from sqlalchemy.engine import URL

__all__ = ["LIBPQ_PARAMETERS", "SSLMODES", "libpq_options"]

#: libpq's ``sslmode`` values, weakest first.
SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
#: libpq's ``target_session_attrs`` values (PostgreSQL 14's set; asyncpg takes the same).
_SESSION_ATTRS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")
_TLS_VERSIONS = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")
_FILES = ("sslrootcert", "sslcert", "sslkey", "sslcrl")
# Handed to asyncpg's DSN parser, which implements them as libpq does.
_IN_DSN = (
    "sslmode",
    *_FILES,
    "sslpassword",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "target_session_attrs",
)
_STARTUP = ("application_name", "options")
#: Every libpq parameter a URL may carry here.
LIBPQ_PARAMETERS = (*_IN_DSN, *_STARTUP, "connect_timeout")


def _value(url: URL, name: str) -> str:
    raw = url.query[name]
    value = raw[-1] if isinstance(raw, tuple) else raw  # libpq: the last one wins
    return str(value)


def _check(name: str, value: str) -> None:
    """Refuse a value libpq would refuse, naming the parameter (never the URL)."""
    choices = {
        "sslmode": SSLMODES,
        "target_session_attrs": _SESSION_ATTRS,
        "ssl_min_protocol_version": _TLS_VERSIONS,
        "ssl_max_protocol_version": _TLS_VERSIONS,
    }.get(name)
    if choices is not None and value not in choices:
        raise ValueError(f"?{name}= must be one of {', '.join(choices)}, not {value!r}")
    if name in _FILES and not os.path.isfile(os.path.expanduser(value)):
        raise ValueError(f"?{name}={value}: no such file")
    if name == "connect_timeout":
        try:
            int(value)
        except ValueError:
            raise ValueError(
                f"?connect_timeout= must be a whole number of seconds, not {value!r}"
            ) from None
    if name == "application_name" and not value.isprintable():
        raise ValueError("?application_name= must be printable text")


def libpq_options(url: URL) -> tuple[URL, dict[str, Any]]:
    """The URL without its libpq parameters, and the ``connect_args`` that carry them.

    Raises ``ValueError`` naming a parameter whose value libpq would refuse.
    """
    found = {name: _value(url, name) for name in LIBPQ_PARAMETERS if name in url.query}
    if not found:
        return url, {}
    for name, value in found.items():
        _check(name, value)
    args: dict[str, Any] = {}
    dsn = {name: value for name, value in found.items() if name in _IN_DSN}
    if dsn:
        # No host or user here: those stay the URL's (asyncpg's arguments win over the DSN).
        args["dsn"] = "postgresql://?" + urllib.parse.urlencode(dsn)
    startup = {name: value for name, value in found.items() if name in _STARTUP}
    if startup:
        args["server_settings"] = startup
    if "connect_timeout" in found:
        seconds = int(found["connect_timeout"])
        # libpq: zero or less waits indefinitely, and at least 2 seconds otherwise.
        args["timeout"] = None if seconds <= 0 else max(seconds, 2)
    return url.difference_update_query(list(found)), args
