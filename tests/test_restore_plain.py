"""Restore's pass one judges a plain record without building its ``Append``, and spools the same.

Both dialects. A record whose body is agentplane-0.4's canonical bytes, with a bare envelope
and a kind the store neither indexes nor claims by (a ``Note``, the commonest record), is
judged by ``Judge.plain`` (``restore_read._plain_envelope``): the checks ``append`` makes of
such a record are made by the same functions, and what is spooled for pass two is what
``Judge.record`` spools for the record's append, entry for entry. A record ``append``
would refuse is refused as before, nothing written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_restore_shared import _with_record

from agentplane_journal import SqlJournalStore
from agentplane_journal.core.append import RESERVED_MEMBERS
from agentplane_journal.core.kinds import _FIELDS, _REQUIRED
from agentplane_journal.journal import restore_read, restore_spool
from agentplane_journal.journal.restore import RestoreRefused, restore_export
from agentplane_journal.journal.restore_check import INDEXED

from support.exports import build, export_to, lines_of, other_tenant, write_lines

pytestmark = pytest.mark.slow


def test_no_kinds_field_is_a_reserved_member() -> None:
    """``_plain_envelope`` hands ``field_problem`` the body rather than its payload: the same
    answer only while no kind's field (checked or required) is an envelope member."""
    fields = {m for members in _FIELDS.values() for m in members}
    fields |= {m for members in _REQUIRED.values() for m in members}
    assert fields and not fields & RESERVED_MEMBERS


def _spooled(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Every entry restores spool from now on, in order."""
    entries: list[tuple[Any, ...]] = []
    real = restore_spool.Spool.record

    def record(self: restore_spool.Spool, entry: Any) -> None:
        entries.append(entry)
        real(self, entry)

    monkeypatch.setattr(restore_spool.Spool, "record", record)
    return entries


async def test_plain_records_spool_what_their_appends_spool(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await build(store, 12, long=False)
    path = tmp_path / "e.jsonl"
    await export_to(store, path)
    taken = {"plain": 0}
    real_plain = restore_read._plain_envelope

    def counted(*args: Any) -> Any:
        found = real_plain(*args)
        taken["plain"] += found is not None
        return found

    entries = _spooled(monkeypatch)
    monkeypatch.setattr(restore_read, "_plain_envelope", counted)
    restored = await restore_export(other_tenant(store), path)
    assert restored.is_faithful, restored.to_json()
    with_plain = list(entries)
    entries.clear()
    monkeypatch.setattr(restore_read, "_plain_envelope", lambda *args: None)
    again = await restore_export(other_tenant(store), path)
    assert again.is_faithful, again.to_json()
    bodies = [json.loads(x)["body"] for x in lines_of(path) if not x.startswith('{"kind"')]
    plain = [
        b
        for b in bodies
        if b["kind"] not in INDEXED and not {"case", "step", "phase", "effect_key"} & b.keys()
    ]
    assert 0 < taken["plain"] == len(plain) < len(bodies)
    assert with_plain == entries and len(entries) == len(bodies)


REFUSED = {
    "a field of the wrong type": (
        {"kind": "EffectFailed", "permanent": "yes"},
        r"EffectFailed's 'permanent' member must be a boolean",
    ),
    "a required field missing": (
        {"kind": "BreakGlass", "actor": "ops", "roles": []},
        r"a BreakGlass record needs a 'reason' member",
    ),
}


@pytest.mark.parametrize("edit", list(REFUSED))
async def test_a_plain_record_append_would_refuse_is_refused(
    store: SqlJournalStore, tmp_path: Path, edit: str
) -> None:
    await build(store, 8, long=False)
    path = tmp_path / "e.jsonl"
    await export_to(store, path)
    members, refusal = REFUSED[edit]
    edited = _with_record(lines_of(path), members)
    target = other_tenant(store)
    with pytest.raises(RestoreRefused, match=refusal):
        await restore_export(target, write_lines(tmp_path / "edited.jsonl", edited))
    assert (await target.checkpoint()).size == 0 and not await target.audit_runs(None, 1)
