"""What the markers mean to a run: which cases reach PostgreSQL, and whether ``-m`` left them out.

A test says what it needs where it is declared (``pytestmark`` or a decorator: ``postgres``,
``pgbouncer``, ``patroni``, ``chromium``, ``slow``; pyproject.toml registers them). One
thing cannot be declared there: a case that reaches PostgreSQL only through a fixture
(``pg_database``, the battery's ``store`` on its ``postgresql`` side). :func:`reaches_postgres`
finds those from the fixtures the case asks for, so ``-m "not postgres"`` needs no cluster.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

# Fixtures that reach the test cluster: a test depending on one (directly or through other
# fixtures) is a PostgreSQL test.
PG_FIXTURES = frozenset({"pg_server", "pg_template", "pg_database", "pg_battery_url"})


def reaches_postgres(item: pytest.Item) -> bool:
    """Whether ``item`` reaches the cluster through what it asks for."""
    if PG_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    # A dialect chosen by parameter (``dialect``, ``database_url``'s, a harness's own):
    # its PostgreSQL fixture is taken with request.getfixturevalue, so it is not in
    # fixturenames; the parameter says which database the case runs on.
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "postgresql" in [
        v for v in callspec.params.values() if isinstance(v, str)
    ]


def postgres_deselected(config: pytest.Config) -> bool:
    """Whether this run's ``-m`` expression leaves out tests because they are ``postgres``."""
    markexpr = config.getoption("markexpr", "")
    if not markexpr:
        return False
    from _pytest.mark.expression import Expression

    expr = Expression.compile(markexpr)

    def evaluate(marked: Callable[[str], bool]) -> bool:
        return bool(expr.evaluate(lambda name, **_kw: marked(name)))

    return (evaluate(lambda n: n != "postgres") and not evaluate(lambda n: True)) or (
        evaluate(lambda n: False) and not evaluate(lambda n: n == "postgres")
    )


#: A battery module's ``pytestmark``: each of its cases runs once more with its PostgreSQL
#: database reached through PgBouncer (conftest's ``via`` and ``pytest_generate_tests``).
THROUGH_PGBOUNCER = [pytest.mark.through_pgbouncer, pytest.mark.usefixtures("via")]
