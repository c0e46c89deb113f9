"""A worker for tests/test_sqlite_commit_in_doubt.py (run as a script, never collected).

``python failsync_worker.py URL FLAG WAY``: one write to a fresh run whose COMMIT meets a
failing ``fsync`` (the worker runs with ``failsync.so`` preloaded, and ``FLAG`` is created
just before the write), then the process ends without closing anything, as a crash would.
Prints one JSON line: the run, and the error the write raised (its type's name and text).

WAY is how the write goes: ``hot`` (the append's one-hop path), ``general`` (a lease taken
by the general unit of work) or ``guarded`` (an OpenAI Agents session's ``add_items``, one
guarded transaction).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from agentplane_journal import Append, RunId, SqlJournalStore


async def main(url: str, flag: str, way: str) -> dict[str, Any]:
    store = await SqlJournalStore.connect(url)
    run = RunId.generate()
    session: Any = None
    if way == "guarded":
        from agentplane_journal.adapters.openai_agents import JournalSession

        session = JournalSession(store, "in-doubt")
        await session.add_items([{"role": "user", "content": "before"}])
        found = await session.conversation.run_id()
        assert found is not None
        run = found
    else:
        await store.append(0, [Append(run, "RunAdmitted", {"input": {}})])
        await store.append(0, [Append(run, "Note", {"text": "before"})])
    await asyncio.to_thread(Path(flag).touch)
    try:
        if way == "hot":
            await store.append(0, [Append(run, "Note", {"text": "in doubt"})])
        elif way == "general":
            await store.acquire(run, "in-doubt", 300)
        else:
            await session.add_items([{"role": "user", "content": "in doubt"}])
    except Exception as exc:
        return {"run": str(run), "error": type(exc).__name__, "text": str(exc)}
    return {"run": str(run), "error": None, "text": ""}


if __name__ == "__main__":
    answer = asyncio.run(main(*sys.argv[1:4]))
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    os._exit(0)  # no close, no checkpoint: what a crash leaves
