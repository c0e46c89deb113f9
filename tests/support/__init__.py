"""The tests' floor: what more than one test module needs, and nothing that is itself a test.

Servers (``pgcluster``: the throwaway PostgreSQL cluster; ``pgtopology``: standbys and
PgBouncer; ``patroni`` and ``haproxy``: automatic failover), the fixtures' machinery
(``databases``, ``clock``, ``stores``, ``cli``), record builders (``helpers``), the race
harness (``races``) and the helpers several test files share. ``tests/`` is on ``sys.path``
(pytest's rootdir import mode), so a test writes ``from support.helpers import note``.
A test module imports from here, never from another test module.
"""
