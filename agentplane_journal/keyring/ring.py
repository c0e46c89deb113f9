"""Sealing an append's payload fields, and opening a record's, under a key source.

:class:`Keyring` applies :mod:`agentplane_journal.core.sealed`'s field list with
:mod:`agentplane_journal.core.envelope`'s construction: one fresh data key per payload,
wrapped under the scope's key, associated data binding tenant, run, kind and effect.
Opening yields the plaintext, :class:`~agentplane_journal.core.sealed.Erased` where the
scope's key was destroyed, and raises :class:`EnvelopeRefusedError` for damage or a moved
envelope, :class:`UnknownEnvelopeFormatError` for a version this build does not read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentplane_journal.core.append import Append
from agentplane_journal.core.canon_v1 import canonical_bytes_v1
from agentplane_journal.core.envelope import (
    EnvelopeRefusedError,
    ScopeErasedError,
    build_envelope,
    open_envelope,
    parse_envelope,
)
from agentplane_journal.core.record import Record
from agentplane_journal.core.sealed import (
    Erased,
    get_at,
    is_sealed,
    journal_aad,
    sealed_fields,
    set_at,
    unwrap_text,
    unwrap_value,
    wrap_text,
    wrap_value,
)
from agentplane_journal.keyring.sources import KeySource

__all__ = ["Keyring", "OpenedRecord"]


@dataclass(frozen=True, slots=True)
class OpenedRecord:
    """A record as written (``record``: its bytes and hashes untouched) and its payload
    opened (``payload``: sealed fields in plaintext, or :class:`Erased`). ``erased`` lists
    the fields (dotted paths) whose scope was erased; ``sealed`` those that were sealed."""

    record: Record
    payload: dict[str, Any]
    sealed: tuple[str, ...]
    erased: tuple[str, ...]


_ROUTING = frozenset({"seq", "run", "case", "step", "phase", "epoch", "v", "effect_key", "kind"})


class Keyring:
    """Seals and opens journal payloads under a :class:`KeySource`'s scopes."""

    def __init__(
        self, source: KeySource, *, canon: Callable[..., bytes] = canonical_bytes_v1
    ) -> None:
        if not isinstance(source, KeySource):
            raise TypeError("source must be a KeySource (data_key, open, destroy)")
        self.source = source
        self._canon = canon

    def __repr__(self) -> str:
        return f"Keyring({self.source!r})"

    async def seal_append(self, item: Append, *, tenant: str, scope: str) -> Append:
        """``item`` with its payload fields sealed under ``scope`` (routing untouched)."""
        fields = sealed_fields(item.kind, item.payload)
        if not fields:
            return item
        effect = None if item.effect_key is None else item.effect_key.hex()
        aad = journal_aad(tenant, str(item.run), item.kind, effect)
        payload: dict[str, Any] = dict(item.payload)
        for field in fields:
            value = get_at(payload, field.path)
            plain = value.encode() if field.text else self._canon(value, path="payload")
            data_key, wrapped = await self.source.data_key(scope)
            envelope = build_envelope(wrapped, data_key, aad, plain)
            sealed: Any = wrap_text(envelope) if field.text else wrap_value(envelope)
            payload = set_at(payload, field.path, sealed)
        return Append(
            item.run,
            item.kind,
            payload,
            case=item.case,
            step=item.step,
            phase=item.phase,
            effect_key=item.effect_key,
            v=item.v,
        )

    async def open_payload(
        self,
        tenant: str,
        body: Mapping[str, Any],
        *,
        scope: str | None = None,
    ) -> tuple[dict[str, Any], list[str], list[str]]:
        """A record body's payload opened: (payload, sealed paths, erased paths).

        ``scope``: when given, an envelope whose wrapped key names another scope is refused
        (a foreign-scope envelope is tampering, even where its key still exists).
        """
        kind = str(body.get("kind"))
        payload = {k: v for k, v in body.items() if k not in _ROUTING}
        effect = body.get("effect_key")
        aad = journal_aad(tenant, f"run_{body.get('run')}", kind, effect)
        sealed: list[str] = []
        erased: list[str] = []
        for field in sealed_fields(kind, payload):
            value = get_at(payload, field.path)
            envelope = unwrap_text(value) if field.text else unwrap_value(value)
            if envelope is None:
                if not field.text and is_sealed(value):  # the sealed shape, not base64
                    raise EnvelopeRefusedError(f"{kind}.{'.'.join(field.path)} is not base64")
                continue  # written clear
            name = ".".join(field.path)
            sealed.append(name)
            parsed = parse_envelope(envelope)
            if scope is not None and parsed.wrapped.scope != scope:
                raise EnvelopeRefusedError(
                    f"{kind}.{name} is sealed under scope {parsed.wrapped.scope!r}, not {scope!r}"
                )
            try:
                data_key = await self.source.open(parsed.wrapped)
            except ScopeErasedError as gone:
                erased.append(name)
                payload = set_at(payload, field.path, Erased(gone.scope, gone.at, gone.reason))
                continue
            plain = open_envelope(parsed, data_key, aad)
            if field.text:
                try:
                    opened: Any = plain.decode()
                except UnicodeDecodeError:
                    raise EnvelopeRefusedError(f"{kind}.{name} opened to non-UTF-8 text") from None
            else:
                try:
                    opened = json.loads(plain)
                except ValueError:
                    raise EnvelopeRefusedError(f"{kind}.{name} opened to non-JSON") from None
            payload = set_at(payload, field.path, opened)
        return payload, sealed, erased

    async def open_record(
        self, tenant: str, record: Record, *, scope: str | None = None
    ) -> OpenedRecord:
        """:meth:`open_payload` of a stored record."""
        payload, sealed, erased = await self.open_payload(tenant, record.body, scope=scope)
        return OpenedRecord(record, payload, tuple(sealed), tuple(erased))
