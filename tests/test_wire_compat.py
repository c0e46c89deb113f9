"""Journals written by earlier releases keep verifying after a wire-format change.

Stored bytes are verified as stored (wire-format.md): the layout of a float only decides the
bytes of *new* records, so a run whose older records hold ``1e16`` (the ryu layout this
package wrote before it matched serde_json 1.0.151) and whose newer ones hold ``1e+16``
reads, verifies, seals and proves like any other. Both dialects.
"""

from __future__ import annotations

import pytest

from agentplane_journal import Append, RunId, SqlJournalStore
from agentplane_journal.core import canon as canon

from support.helpers import admitted

_new_format_float = canon.format_float


def _ryu_format_float(x: float) -> str:
    """The layout this package wrote before issue 13: no ``+`` in positive exponents."""
    return _new_format_float(x).replace("e+", "e")


async def test_a_journal_with_the_old_float_layout_still_reads_and_verifies(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = RunId.generate()
    epoch = (await store.acquire(run, "compat", 300)).epoch
    payload = {"amount": 1e16, "big": 1.2345678901234568e20, "small": 1e-7}

    monkeypatch.setattr(canon, "format_float", _ryu_format_float)
    old = await store.append(epoch, [admitted(run), Append(run, "Note", {"text": "v", **payload})])
    monkeypatch.undo()
    assert b'"amount":1e16' in old[1].raw and b'"big":1.2345678901234568e20' in old[1].raw

    new = await store.append(epoch, [Append(run, "Note", {"text": "v", **payload})])
    assert b'"amount":1e+16' in new[0].raw and b'"big":1.2345678901234568e+20' in new[0].raw

    records = await store.read(run)
    assert records == old + new  # the old bytes come back exactly as they were hashed
    assert records[1].raw == old[1].raw
    assert records[1].body["amount"] == 1e16 and records[2].body["amount"] == 1e16
    head = await store.verify(run)
    assert head == new[0].hash

    sealed = await store.seal(run, epoch, "succeeded")
    assert await store.verify(run) == sealed
    proof = await store.inclusion_proof(run)
    assert proof is not None and proof.seal == sealed
    assert proof.verify((await store.checkpoint()).root)
