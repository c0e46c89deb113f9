"""Record fixtures shaped like agentplane's conformance battery's (see the digest, §0)."""

from __future__ import annotations

from agentplane_journal import Append, CaseId, Digest, EffectKey, RunId

TRUSTED = {"provenance": [], "sensitivity": "public", "trust": "trusted"}


def admitted(run: RunId, case: CaseId | None = None) -> Append:
    """A ``RunAdmitted`` record, as the battery's ``admitted(run)``."""
    return Append(
        run,
        "RunAdmitted",
        {"capability": "conformance", "input": None, "input_label": TRUSTED},
        case=case,
    )


def note(run: RunId, text: str = "a note") -> Append:
    return Append(run, "Note", {"text": text})


def key(n: int) -> EffectKey:
    """The battery's ``key(n)``: step 0, forward, ordinal n, attempt 1, kind probe, args [n]."""
    return EffectKey.derive(0, "forward", n, 1, "probe", bytes([n]))


def started(run: RunId, effect: EffectKey) -> Append:
    """An ``EffectStarted`` record for ``effect``, as the battery's ``started(run, key)``."""
    return Append(
        run,
        "EffectStarted",
        {
            "descriptor": {"kind": "probe", "args": None},
            "recovery": {"mode": "retry"},
            "mutates": True,
            "attempt": 1,
            "backoff_ms": 0,
        },
        step=0,
        effect_key=effect,
    )


def concluded(run: RunId, outcome: str) -> Append:
    """A ``RunSealed`` conclusion record (what feeds the outcome index)."""
    return Append(run, "RunSealed", {"outcome": outcome, "chain_head": Digest.ZERO.hex()})
