"""LangGraph's checkpointer over the journal: ``agentplane_journal.langgraph.JournalSaver``.

An optional extra (``pip install 'agentplane_journal[langgraph]'``): this subpackage is the
only place that imports LangGraph, and nothing else in the package imports it, so the core
install stays free of it. See docs/guides/langgraph.md.
"""

from __future__ import annotations

try:
    import langgraph.checkpoint.base  # noqa: F401  (the extra, or a clear error now)
except ImportError as exc:  # tests/test_extras.py imports it with LangGraph hidden
    raise ImportError(
        'agentplane_journal.langgraph needs LangGraph: pip install "agentplane_journal[langgraph]"'
    ) from exc

from agentplane_journal.langgraph.records import thread_run
from agentplane_journal.langgraph.saver import JournalSaver

__all__ = ["JournalSaver", "thread_run"]
