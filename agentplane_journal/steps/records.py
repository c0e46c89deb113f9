"""The records the durable-steps layer writes, in the tenant's wire profile: pure, no I/O.

Every record of this layer is built here, so that a tenant recorded as ``agentplane-0.22``
gets 0.22's records (``v`` 1, ``RunAdmitted.canon``, ``EffectDone.declared``) and one in
``agentplane-0.4`` keeps 0.4.0's bytes exactly (nothing is added to them): the store refuses
a record in the other profile's shape, so a layer that wrote one format would be refused
by every journal in the other.

Two profiles matter for one run, and they can differ only after an explicit
``migrate_profile`` between a run's admission and its resumption:

* the **journal's** profile (``store.profile``) decides how a record is *written*: the store
  accepts no other;
* the **run's** profile, the one its ``RunAdmitted`` was written in, decides how its effect
  keys are *derived* (:func:`key_profile`). A key is the exactly-once identity of a call:
  derived under another canon, a float argument would give a new key on resume and the
  effect a second call.

``declared`` (agentplane 0.22's ``DeclaredOutput``, required on ``EffectDone`` and present
on an ``EffectReconciled`` exactly when it carries an output) is what the effect declared
about the trust and sensitivity of its own output. A function decorated with
``@steps.effect`` declares nothing, and it is how a workflow reaches the outside world (a
provider's answer, a model's completion), so its output is labelled as agentplane labels an
effect that declares nothing: untrusted, hence at least ``internal`` (the lattice point of
``DeclaredOutput::untrusted()``, never ``trusted``/``public``, which a replay would read as
more permissive than the truth). A person's settlement reports the provider's answer: the
same label.

In 0.22 the layer's records are ones agentplane 0.22's typed decode reads and re-chains to the
same bytes (issue 36): ``RunAdmitted`` carries the required ``input_label`` (the caller's
arguments, labelled as nothing vouches for them: :data:`INPUT_LABEL`); ``EffectStarted``'s
recovery is agentplane's internally tagged ``Recovery`` (``{"mode": "reconcile"}``) and it
carries no ``ordinal`` (agentplane derives positions, and so does :class:`.history.RunHistory`);
the run's result, which agentplane's ``RunSealed`` has no member for, is a ``Note`` written
just before it (:data:`OUTPUT_NOTE`). Records written the old way (before issue 36) still
read: a bare-string recovery, an ``ordinal``, an ``output`` on ``RunSealed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentplane_journal.core.admission import RUN_ADMITTED
from agentplane_journal.core.append import EFFECT_STARTED, Append
from agentplane_journal.core.ids import EffectKey, RunId
from agentplane_journal.core.kinds import EFFECT_DONE, EFFECT_RECONCILED
from agentplane_journal.core.profile import WireProfile, profile_of_record
from agentplane_journal.core.record import Record, decode_wire

__all__ = [
    "DECLARED",
    "INPUT_LABEL",
    "OUTPUT_NOTE",
    "STEP",
    "effect_record",
    "key_profile",
    "output_note",
    "read_output_note",
    "run_record",
]

#: The step id of every effect this layer journals: one workflow is one agentplane step, and
#: the effect's position in it is the ordinal.
STEP = 0

#: What this layer's effects declare for their output (see the module docstring).
DECLARED: Mapping[str, str] = {"trust": "untrusted", "sensitivity": "internal"}


#: agentplane 0.22's ``Label`` of a run's input: the caller's arguments, which nothing in this
#: layer vouches for (untrusted, hence at least internal; no provenance is claimed). Required
#: on ``RunAdmitted`` in 0.22: a missing label would read as trusted.
INPUT_LABEL: Mapping[str, Any] = {"provenance": [], "trust": "untrusted", "sensitivity": "internal"}

#: The ``Note`` text a 0.22 run's result is carried in, before the JSON of ``{"output": ...}``.
OUTPUT_NOTE = "agentplane_journal.steps.output "


def _is_022(profile: WireProfile) -> bool:
    return profile.canon_version is not None


def run_record(profile: WireProfile, run: RunId, kind: str, payload: dict[str, Any]) -> Append:
    """A run-level record (``RunAdmitted``, ``RunCancelled``, ``RunSealed``) in ``profile``
    (a ``RunAdmitted`` gets the ``canon`` member the profile journals, and in 0.22 the
    ``input_label`` it requires)."""
    if kind == RUN_ADMITTED and _is_022(profile):
        payload = {**payload}
        payload.setdefault("input_label", {k: v for k, v in INPUT_LABEL.items()})
    return profile.append(run, kind, payload)


def output_note(profile: WireProfile, run: RunId, output: Any) -> Append | None:
    """The ``Note`` carrying a 0.22 run's result, or ``None`` in 0.4 (whose ``RunSealed``
    carries it, as it always did)."""
    if not _is_022(profile):
        return None
    text = OUTPUT_NOTE + profile.canonical_bytes({"output": output}, path="output").decode()
    return profile.append(run, "Note", {"text": text})


def read_output_note(body: Mapping[str, Any]) -> tuple[bool, Any]:
    """``(True, output)`` for a :func:`output_note` body, else ``(False, None)``."""
    text = body.get("text")
    if body.get("kind") != "Note" or not isinstance(text, str) or not text.startswith(OUTPUT_NOTE):
        return False, None
    try:
        value = decode_wire(text[len(OUTPUT_NOTE) :])
    except ValueError:
        return False, None
    if not isinstance(value, dict) or "output" not in value:
        return False, None
    return True, value["output"]


def effect_record(
    profile: WireProfile, run: RunId, kind: str, payload: dict[str, Any], effect_key: EffectKey
) -> Append:
    """An effect's record in ``profile``, with ``declared`` where agentplane 0.22 carries it.

    Only a profile that journals a canon version (0.22) gets it: 0.4.0's records stay the
    bytes they always were.
    """
    body = dict(payload)
    if profile.canon_version is not None and (
        kind == EFFECT_DONE or (kind == EFFECT_RECONCILED and "output" in body)
    ):
        body.setdefault("declared", dict(DECLARED))
    if kind == EFFECT_STARTED and _is_022(profile):
        # agentplane's Recovery is internally tagged by `mode`; the position is not a member
        # of its EffectStarted (its typed re-chaining would drop it and change the bytes).
        if isinstance(body.get("recovery"), str):
            body["recovery"] = {"mode": body["recovery"]}
        body.pop("ordinal", None)
    return profile.append(run, kind, body, step=STEP, effect_key=effect_key)


def key_profile(admitted: Record | None, journal: WireProfile) -> WireProfile:
    """The profile a run's effect keys are derived under: the one its ``RunAdmitted`` was
    written in (by its ``v``), or the journal's for a run not admitted yet (or admitted by a
    writer of neither profile, whose keys nothing here could have derived)."""
    if admitted is None:
        return journal
    return profile_of_record(admitted.body) or journal
