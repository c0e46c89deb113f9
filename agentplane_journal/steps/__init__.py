"""Durable steps: exactly-once effects, honest doubt and recovery over the journal store.

The layer a Python agent builder uses instead of writing agentplane's runtime protocol by
hand: ``Steps`` registers workflows and effects (:mod:`.api`), a workflow run is admitted
once per key (:mod:`.workflow`), each effect is journaled before and after its call and
replayed from the journal (:mod:`.effect`, :mod:`.history`), a run is owned under a
heartbeated, fenced lease and concluded and sealed (:mod:`.runner`), and a sweeper resumes
what a dead instance left (:mod:`.sweeper`). Spans: :mod:`.spans`. See the durable-steps
guide in the docs.
"""
