"""Adapters that put the journal where Python agents keep their state.

Each module here imports its framework only for type checkers or inside itself, so
``import agentplane_journal`` never pulls a framework in: install the extra
(``agentplane_journal[openai-agents]``, ``agentplane_journal[pydantic-ai]``) and import the
adapter's module.

* :mod:`~agentplane_journal.adapters.conversation`: one conversation as one run, changed
  by guarded appends (one transaction each), read verified (what the adapters share).
* :mod:`~agentplane_journal.adapters.openai_agents`: the OpenAI Agents SDK's ``Session``.
* :mod:`~agentplane_journal.adapters.pydantic_ai`: Pydantic AI's ``ConversationStore``.
"""
