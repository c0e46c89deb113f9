"""Witnessing the log: asking c2sp.org/tlog-witness witnesses to cosign its checkpoints.

:mod:`~agentplane_journal.witness.client` speaks HTTP (``httpx``, the ``witness`` extra);
the protocol's rules, the cosignature format and the policy are pure, in ``core/``; the
stored cosignatures are the store's (:mod:`agentplane_journal.journal.cosignatures`).
"""
