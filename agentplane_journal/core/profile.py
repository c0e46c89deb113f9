"""Wire profiles: which agentplane's bytes a journal is written in.

A journal is written in one of two byte formats, and which one is a property of the journal,
recorded in the database (``journal_profile``), never of the process that happens to open it:

* ``agentplane-0.4`` — agentplane 0.4.0's bytes: record ``v`` 4, the serde_json float layout
  (:mod:`.canon`). The default, and what every database written before profiles existed holds.
* ``agentplane-0.22`` — agentplane 0.22.0's bytes: record ``v`` 1, every ``RunAdmitted``
  carries ``canon: 1`` (required: 0.22 compares it first on replay, and reads its absence as a
  malformed record), RFC 8785 with exact integers (:mod:`.canon_v1`).

What the profile decides is only what is *written*: the canonical bytes a record is chained
over, the record version, the ``canon`` member, and the bytes an effect key is derived from.
Verification never re-serialises (a record's hash covers its stored bytes), so every record
verifies under the profile it was written with, whatever profile the store is opened with now;
:func:`profile_of_record` names the profile a stored body was written under by its ``v``.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentplane_journal.core.admission import RUN_ADMITTED
from agentplane_journal.core.append import RECORD_VERSION, Append
from agentplane_journal.core.canon import canonical_bytes
from agentplane_journal.core.canon_v1 import CANON_VERSION, canonical_bytes_v1
from agentplane_journal.core.ids import CaseId, EffectKey, RunId
from agentplane_journal.core.kinds import EFFECT_DONE

__all__ = [
    "AGENTPLANE_0_4",
    "AGENTPLANE_0_22",
    "CANON_MEMBER",
    "DEFAULT_PROFILE",
    "PROFILES",
    "WireProfile",
    "profile_named",
    "profile_of_record",
]

#: The ``RunAdmitted`` member naming the canonicalization rule (agentplane 0.22.0).
CANON_MEMBER = "canon"


@dataclass(frozen=True, slots=True)
class WireProfile:
    """One journal byte format: its name, record version, canon rule and canon version.

    Compare profiles with ``is``/``==``; there are exactly :data:`PROFILES`. ``canon_version``
    is the number journaled in ``RunAdmitted.canon`` (and an export header's canon version):
    ``None`` for ``agentplane-0.4``, whose records journal none.
    """

    name: str
    record_version: int
    canon_version: int | None
    canonicalize: Callable[..., bytes] = field(repr=False, compare=False)

    def canonical_bytes(self, value: object, *, path: str = "value") -> bytes:
        """``value``'s canonical bytes under this profile's rule."""
        return self.canonicalize(value, path=path)

    def effect_key(
        self,
        step: int,
        phase: str,
        ordinal: int,
        attempt: int,
        kind: str,
        args: object,
    ) -> EffectKey:
        """The effect key of a call, derived as this profile's agentplane derives it.

        The layout (``SHA-256(step ‖ phase ‖ ordinal ‖ attempt ‖ len(kind) ‖ kind ‖ args)``)
        is the same in both; the argument bytes are this profile's canonical bytes, so a
        call with a float argument (``{"amount": 100.0}``) has a different key under each.
        """
        raw = self.canonical_bytes(args, path="args")
        return EffectKey.derive(step, phase, ordinal, attempt, kind, raw)

    def append(
        self,
        run: RunId | str,
        kind: str,
        payload: Mapping[str, Any] | None = None,
        *,
        case: CaseId | str | None = None,
        step: int | None = None,
        phase: str = "forward",
        effect_key: EffectKey | str | None = None,
    ) -> Append:
        """An :class:`Append` in this profile: its record version, and for a ``RunAdmitted``
        the ``canon`` member this profile journals (added when the payload has none)."""
        fields = dict(payload or {})
        if kind == RUN_ADMITTED and self.canon_version is not None:
            fields.setdefault(CANON_MEMBER, self.canon_version)
        return Append(
            run,
            kind,
            fields,
            case=case,
            step=step,
            phase=phase,
            effect_key=effect_key,
            v=self.record_version,
        )

    def refusal(self, item: Append) -> str | None:
        """Why ``item`` cannot be written to a journal in this profile, or ``None``.

        A record version other than the profile's is refused (the record would claim the
        other agentplane's format), as is a ``RunAdmitted`` whose ``canon`` is not the
        profile's: 0.22 requires it, and 0.4.0's records carry none. 0.22 also requires
        ``EffectDone.declared`` (its reader refuses the record without it).
        """
        if item.v != self.record_version:
            return (
                f"a {item.kind} record with v={item.v} cannot be written to a journal in wire "
                f"profile {self.name} (record version {self.record_version}); build it with "
                f"the journal's profile (store.profile.append(...)), or migrate the journal "
                "explicitly (store.migrate_profile)"
            )
        if item.kind == RUN_ADMITTED:
            canon = item.payload.get(CANON_MEMBER)
            if self.canon_version is None:
                if CANON_MEMBER in item.payload:
                    return (
                        f"a RunAdmitted record with a '{CANON_MEMBER}' member cannot be written "
                        f"to a journal in wire profile {self.name}: agentplane 0.4.0 journals "
                        "no canonicalization version"
                    )
            elif type(canon) is not int or canon != self.canon_version:
                return (
                    f"a RunAdmitted record in wire profile {self.name} must carry "
                    f"'{CANON_MEMBER}': {self.canon_version} (found {canon!r}): agentplane "
                    "0.22 requires it and compares it first on replay; "
                    "store.profile.append(...) adds it"
                )
        elif (
            item.kind == EFFECT_DONE
            and self.canon_version is not None
            and "declared" not in item.payload
        ):
            return (
                f"an EffectDone record in wire profile {self.name} must carry 'declared' "
                "({trust, sensitivity}: what the effect declared for its output): agentplane "
                "0.22 requires it, so that a missing answer is never read as trusted"
            )
        return None

    def __str__(self) -> str:
        return self.name


AGENTPLANE_0_4 = WireProfile("agentplane-0.4", RECORD_VERSION, None, canonical_bytes)
"""agentplane 0.4.0's bytes: record v4, serde_json's float layout, no ``canon`` member."""

AGENTPLANE_0_22 = WireProfile("agentplane-0.22", 1, CANON_VERSION, canonical_bytes_v1)
"""agentplane 0.22.0's bytes: record v1, ``RunAdmitted.canon`` = 1, RFC 8785."""

PROFILES: tuple[WireProfile, ...] = (AGENTPLANE_0_4, AGENTPLANE_0_22)
DEFAULT_PROFILE = AGENTPLANE_0_4
"""What a database written before wire profiles were recorded holds."""


def profile_named(name: str | WireProfile) -> WireProfile:
    """The profile called ``name`` (``agentplane-0.4`` / ``agentplane-0.22``), or a
    ``ValueError`` listing the names."""
    if isinstance(name, WireProfile):
        if name not in PROFILES:
            raise ValueError(f"unknown wire profile {name!r}")
        return name
    for profile in PROFILES:
        if profile.name == name:
            return profile
    known = ", ".join(p.name for p in PROFILES)
    raise ValueError(f"unknown wire profile {name!r}; expected one of {known}")


def profile_of_record(body: Mapping[str, Any]) -> WireProfile | None:
    """The profile a stored body was written under, by its ``v``: 1 is agentplane 0.22's,
    4 agentplane 0.4.0's; ``None`` for any other version (written by neither)."""
    v = body.get("v")
    for profile in PROFILES:
        if v == profile.record_version and type(v) is int:
            return profile
    return None
