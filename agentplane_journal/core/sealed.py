"""Which fields of a record are sealed, how a sealed field is marked, and what it is bound
to. Pure: no I/O, no keys (the keyring seals and opens; this says what and where).

agentplane 0.22's rule (``journal/payload.rs``): *what a store is asked questions about
stays readable; what it merely holds is sealed.* So the variant and every routing member
(``seq``, ``run``, ``case``, ``step``, ``phase``, ``epoch``, ``effect_key``, ``kind``) stay
clear, and exactly-once, the case scan, the outcome index and the chain work with no key.
The sealed fields, per record kind:

=====================  ===================================================================
kind                   sealed
=====================  ===================================================================
``RunAdmitted``        ``input``
``PlanFrozen``         ``plan``
``EffectStarted``      ``descriptor.args``
``EffectDone``         ``output``
``EffectReconciled``   ``output`` (when not null), ``detail`` (text, when present)
``GroupSettled``       ``detail`` (text, when present)
``EffectFailed``       ``error`` (text)
``Note``               ``text`` (text)
``RunSealed``          ``reason`` (text, when present); ``output`` (this package's 0.4
                       profile: the durable steps' run result; 0.22 has no such member)
=====================  ===================================================================

This package's own record kinds (the adapters'; agentplane has none of them) follow the
same rule. What stays clear is what a reader routes on: the thread or conversation a
record belongs to (checked on every read), checkpoint ids and parents, namespaces, task
ids, revisions, and the tombstones (``LangGraphDeleted``, ``LangGraphCopied``,
``SessionItemPopped``, ``SessionCleared``, ``ConversationDeleted``), which name ids only:

=========================  ===============================================================
kind                       sealed
=========================  ===============================================================
``LangGraphCheckpoint``    ``checkpoint``, ``metadata``, ``blobs`` (the channel values)
``LangGraphWrites``        ``writes`` (a task's pending writes)
``SessionItemsAdded``      ``items`` (OpenAI Agents session items)
``ConversationSaved``      ``record``, ``entries`` (Pydantic AI's record and messages)
=========================  ===============================================================

A JSON field becomes ``{"$sealed": "<base64 envelope>"}``; a text field stays a string,
``"$sealed:<base64 envelope>"``, so the record has the same shape sealed or clear and 0.22's
typed reader accepts it. The chain hashes the record as written, so it commits to the
ciphertext: an auditor with no keys verifies a run whose payloads were erased.

The associated data binds an envelope to its tenant, run, record kind and effect
(``journal:{tenant}:{run}:{kind}:{effect key hex or -}``, agentplane's ``SealedJournal``),
so an envelope moved to another tenant, run, record or effect does not authenticate.
"""

from __future__ import annotations

import base64
import binascii
import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SEALED",
    "Erased",
    "SealedField",
    "get_at",
    "is_sealed",
    "is_sealed_text",
    "journal_aad",
    "scope",
    "sealed_fields",
    "set_at",
    "still_sealed",
    "unwrap_text",
    "unwrap_value",
    "wrap_text",
    "wrap_value",
]

SEALED = "$sealed"
"""The reserved member (and text prefix, with ``:``) marking a sealed payload."""


@dataclass(frozen=True, slots=True)
class SealedField:
    """One sealable field of a record's payload: where it is and whether it is text."""

    path: tuple[str, ...]
    text: bool


@dataclass(frozen=True, slots=True)
class Erased:
    """What a read returns in place of a payload whose scope was erased.

    A value, not an error: erasure is a completed operation, and a run whose data is gone
    must still be listable, verifiable and auditable. ``at``/``reason`` when known.
    """

    scope: str
    at: float | None = None
    reason: str | None = None

    def __repr__(self) -> str:
        return f"Erased(scope={self.scope!r})"


def scope(tenant: str, unit: str) -> str:
    """The erasure scope of ``unit`` (a run, a case, a conversation) within ``tenant``:
    ``{tenant}/{unit}`` as agentplane derives it (a tenant name cannot hold ``/``). One
    derivation for writes and erasures, so both name the same key."""
    return f"{tenant}/{unit}"


def journal_aad(tenant: str, run: str, kind: str, effect_key: str | None) -> bytes:
    """The associated data a journal payload is sealed under (agentplane's, byte for byte)."""
    return f"journal:{tenant}:{run}:{kind}:{effect_key or '-'}".encode()


def _value(path: tuple[str, ...]) -> SealedField:
    return SealedField(path, False)


def _text(path: tuple[str, ...]) -> SealedField:
    return SealedField(path, True)


def sealed_fields(kind: str, payload: Mapping[str, Any]) -> list[SealedField]:
    """The fields of a ``kind`` record's payload that are sealed, those present only.

    One list for both directions: a field sealed on the way in and forgotten on the way
    out is a record nobody can read, and the reverse a payload never sealed.
    """
    fields: list[SealedField] = []
    if kind == "RunAdmitted" and "input" in payload:
        fields.append(_value(("input",)))
    elif kind == "PlanFrozen" and "plan" in payload:
        fields.append(_value(("plan",)))
    elif kind == "EffectStarted":
        descriptor = payload.get("descriptor")
        if isinstance(descriptor, Mapping) and "args" in descriptor:
            fields.append(_value(("descriptor", "args")))
    elif kind == "EffectDone" and "output" in payload:
        fields.append(_value(("output",)))
    elif kind == "EffectReconciled":
        if payload.get("output") is not None:
            fields.append(_value(("output",)))
        if isinstance(payload.get("detail"), str):
            fields.append(_text(("detail",)))
    elif kind == "GroupSettled" and isinstance(payload.get("detail"), str):
        fields.append(_text(("detail",)))
    elif kind == "EffectFailed" and isinstance(payload.get("error"), str):
        fields.append(_text(("error",)))
    elif kind == "Note" and isinstance(payload.get("text"), str):
        fields.append(_text(("text",)))
    elif kind == "RunSealed":
        # ``output``: the durable steps' run result in the agentplane-0.4 profile (0.22's
        # RunSealed has no such member, so 0.22's bytes are untouched): the caller's data.
        if "output" in payload:
            fields.append(_value(("output",)))
        if isinstance(payload.get("reason"), str):
            fields.append(_text(("reason",)))
    else:
        fields.extend(_value((name,)) for name in _OWN_KINDS.get(kind, ()) if name in payload)
    return fields


#: This package's own kinds: their sealed JSON fields (see the second table above).
_OWN_KINDS: dict[str, tuple[str, ...]] = {
    "LangGraphCheckpoint": ("checkpoint", "metadata", "blobs"),
    "LangGraphWrites": ("writes",),
    "SessionItemsAdded": ("items",),
    "ConversationSaved": ("record", "entries"),
}


def still_sealed(kind: str, payload: Mapping[str, Any]) -> list[str]:
    """The sealed fields of a ``kind`` record that still hold a sealed marker or an
    :class:`Erased` value (dotted paths): what a reader could not open, because the
    scope was erased or the reader has no key. Empty for a record read in the clear."""
    left: list[str] = []
    for field in sealed_fields(kind, payload):
        value = get_at(payload, field.path)
        closed = is_sealed_text(value) if field.text else is_sealed(value)
        if closed or isinstance(value, Erased):
            left.append(".".join(field.path))
    return left


def get_at(payload: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """The value at ``path``."""
    value: Any = payload
    for key in path:
        value = value[key]
    return value


def set_at(payload: Mapping[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy of ``payload`` with ``path`` set to ``value`` (the caller's dict untouched)."""
    out = dict(payload)
    if len(path) == 1:
        out[path[0]] = value
    else:
        inner = out[path[0]]
        out[path[0]] = set_at(copy.copy(inner), path[1:], value)
    return out


def _b64(envelope: bytes) -> str:
    return base64.b64encode(envelope).decode("ascii")


def _unb64(text: str) -> bytes | None:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return None


def wrap_value(envelope: bytes) -> dict[str, str]:
    """The JSON a record carries in place of a sealed JSON field."""
    return {SEALED: _b64(envelope)}


def wrap_text(envelope: bytes) -> str:
    """The string a record carries in place of a sealed text field."""
    return f"{SEALED}:{_b64(envelope)}"


def is_sealed(value: Any) -> bool:
    """Whether ``value`` is a sealed JSON payload: exactly ``{"$sealed": <string>}``."""
    return isinstance(value, Mapping) and len(value) == 1 and isinstance(value.get(SEALED), str)


def is_sealed_text(text: Any) -> bool:
    """Whether ``text`` is a sealed text payload: ``$sealed:`` then base64 to its end."""
    return unwrap_text(text) is not None


def unwrap_value(value: Any) -> bytes | None:
    """The envelope inside a sealed JSON payload, ``None`` when it is not one."""
    if not is_sealed(value):
        return None
    return _unb64(value[SEALED])


def unwrap_text(text: Any) -> bytes | None:
    """The envelope inside a sealed text payload, ``None`` when it is not one."""
    if not isinstance(text, str) or not text.startswith(SEALED + ":"):
        return None
    return _unb64(text[len(SEALED) + 1 :])
