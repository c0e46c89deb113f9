"""An operator settles, resumes and sweeps durable-steps runs from the command line, and the
API refuses what it cannot journal (both dialects).

``steps settle`` needs no workflow code; ``steps resume`` and ``steps sweep`` load the
application's registering function (``--app MODULE:FUNCTION``), as its workers call it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from agentplane_journal import Finished, SqlJournalStore, Steps
from agentplane_journal.cli.main import main
from agentplane_journal.steps.status import open_runs

from support.clock import FakeClock

ROOT = Path(__file__).resolve().parent.parent
APP = """
import os

from agentplane_journal import Steps


def register(steps: Steps) -> None:
    @steps.effect("charge")
    async def charge(order: str) -> str:
        with open(os.environ["SHOP_LOG"], "a") as log:
            log.write(order + "\\n")
        return f"ch_{order}"

    @steps.workflow("checkout")
    async def checkout(order: str) -> str:
        return await charge(order)
"""


class Dies(BaseException):
    """The worker died here."""


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The application module ``shopapp`` (importable), and its charge log."""
    (tmp_path / "shopapp.py").write_text(textwrap.dedent(APP))
    monkeypatch.syspath_prepend(str(tmp_path))
    log = tmp_path / "charges.log"
    monkeypatch.setenv("SHOP_LOG", str(log))
    return log


def charges(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


async def crashed_after_call(store: SqlJournalStore) -> Any:
    """A run whose worker died after calling ``charge`` and before journaling its result."""
    import shopapp  # type: ignore[import-not-found]

    def die(at: str) -> None:
        if at == "after_call":
            raise Dies(at)

    dead = Steps(store, instance="dead", lease_ttl=30, _boundary=die)
    shopapp.register(dead)
    with pytest.raises(Dies):
        await dead.workflows["checkout"].start("order-1", "o1")
    run = await store.admitted_as("order-1")
    assert run is not None
    return run


async def test_settle_then_resume_from_the_command_line(
    make_store: Any, clock: FakeClock, database_url: str, app: Path, capsys: Any
) -> None:
    # The dead worker's clock is long past: by the real clock its lease has lapsed.
    store: SqlJournalStore = await make_store(clock=FakeClock(time.time() - 100))
    run = await crashed_after_call(store)
    assert charges(app) == ["o1"]
    common = ["--url", database_url, "--tenant", store.tenant]

    # Without a reconcile function the sweep stops it in doubt, and the error names settle.
    code = await asyncio.to_thread(main, ["steps", "sweep", "--app", "shopapp:register", *common])
    out = capsys.readouterr().out
    assert code == 1 and f"{run}  stopped" in out
    (status,) = [r for r in await open_runs(store) if r.run_id == run]
    assert status.state == "in_doubt"
    ((_, key),) = status.in_doubt
    assert f"agentplane-journal steps settle {run} {key.hex()} --landed JSON" in out

    bad = await asyncio.to_thread(main, ["steps", "settle", str(run), key.hex(), *common])
    assert bad == 2 and "--actor" in capsys.readouterr().err
    code = await asyncio.to_thread(
        main,
        [
            "steps",
            "settle",
            str(run),
            f"ek:{key.hex()}",
            "--landed",
            '"ch_o1"',
            "--actor",
            "alice",
            *common,
        ],
    )
    out = capsys.readouterr().out
    assert code == 0 and "landed (by alice)" in out and f"steps resume {run}" in out
    again = await asyncio.to_thread(
        main,
        ["steps", "settle", str(run), key.hex(), "--did-not-happen", "--actor", "bob", *common],
    )
    assert again == 1 and "not in doubt" in capsys.readouterr().err

    code = await asyncio.to_thread(
        main, ["steps", "resume", str(run), "--app", "shopapp:register", *common]
    )
    assert code == 0 and f'{run} resumed: "ch_o1"' in capsys.readouterr().out
    assert charges(app) == ["o1"], "the settled effect was called again"
    steps = Steps(store, instance="reader")
    import shopapp

    shopapp.register(steps)
    finished = await steps.workflows["checkout"].start("order-1", "o1")
    assert isinstance(finished, Finished) and finished.outcome.result == "ch_o1"
    settled = [r for r in await store.read(run) if r.kind == "EffectReconciled"]
    assert settled[-1].body["detail"] == "settled by alice"


async def test_the_verbs_refuse_what_they_cannot_do(
    make_store: Any, database_url: str, app: Path, capsys: Any
) -> None:
    store: SqlJournalStore = await make_store()
    common = ["--url", database_url, "--tenant", store.tenant]
    for argv, said in [
        (["steps", "resume", "run_01J0000000000000000000000A"], "--app MODULE:FUNCTION"),
        (["steps", "sweep", "--app", "nosuchmodule:register"], "cannot import"),
        (["steps", "sweep", "--app", "shopapp:nothing"], "has no function"),
        (["steps", "sweep", "--app", "shopapp"], "is not MODULE:FUNCTION"),
        (["steps", "settle", "run_01J0000000000000000000000A"], "takes RUN KEY"),
        (["steps", "settle", "run_01J0000000000000000000000A", "zz", "--actor", "a"], "not an"),
        (["steps", "extra"], "invalid choice"),
    ]:
        with pytest.raises(SystemExit) if said == "invalid choice" else _nothing():
            code = await asyncio.to_thread(main, [*argv, *common])
            assert code == 2, argv
        assert said in capsys.readouterr().err, argv


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


@pytest.mark.slow
async def test_sweep_forever_resumes_and_stops_cleanly_on_sigterm(
    make_store: Any, database_url: str, app: Path, tmp_path: Path
) -> None:
    import shopapp

    store: SqlJournalStore = await make_store(clock=FakeClock(time.time() - 100))

    def die(at: str) -> None:
        if at == "before_start":
            raise Dies(at)

    dead = Steps(store, instance="dead", lease_ttl=30, _boundary=die)
    shopapp.register(dead)
    with pytest.raises(Dies):
        await dead.workflows["checkout"].start("order-2", "o2")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    argv = [sys.executable, "-m", "agentplane_journal.cli.main", "steps", "sweep", "--forever"]
    argv += ["--interval", "0.2", "--app", "shopapp:register", "--url", database_url]
    proc = subprocess.Popen(  # noqa: ASYNC220 - read through to_thread below
        [*argv, "--tenant", store.tenant],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen = ""
        deadline = time.monotonic() + 60
        while "swept: 1 resumed" not in seen and time.monotonic() < deadline:
            line = await asyncio.to_thread(proc.stdout.readline)  # type: ignore[union-attr]
            assert line, f"the sweeper exited early: {proc.stderr.read()}"  # type: ignore[union-attr]
            seen += line
        assert "swept: 1 resumed" in seen and '"ch_o2"' in seen
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert charges(app) == ["o2"]


def test_a_plain_function_is_refused_before_it_can_run() -> None:
    async def check(order: str) -> Any:
        return None

    class Fake:  # a Steps without a store: registration never touches one
        def __init__(self) -> None:
            self.effects: dict[str, Any] = {}
            self.workflows: dict[str, Any] = {}

    steps: Any = Fake()
    ran: list[str] = []

    def charge(order: str) -> str:
        ran.append(order)
        return order

    with pytest.raises(TypeError, match="must be an async def"):
        Steps.effect(steps, "charge")(charge)
    with pytest.raises(TypeError, match="reconcile function must be an async def"):
        Steps.effect(steps, "charge2", reconcile=charge)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="workflow 'w' must be an async def"):
        Steps.workflow(steps, "w")(charge)  # type: ignore[arg-type]
    assert ran == []
    Steps.effect(steps, "fine", reconcile=check)(_async_charge)  # accepted


async def _async_charge(order: str) -> str:
    return order


@pytest.mark.slow
def test_effects_keep_their_signatures_under_mypy_strict(tmp_path: Path) -> None:
    source = tmp_path / "typed.py"
    source.write_text(
        textwrap.dedent(
            """
            from typing import assert_type

            from agentplane_journal import DidNotHappen, Landed, Steps


            def register(steps: Steps) -> None:
                @steps.effect("mail")
                async def mail(order: str, to: str) -> str:
                    return to

                async def check(order: str) -> Landed[int] | DidNotHappen:
                    return DidNotHappen()

                @steps.effect("charge", reconcile=check)
                async def charge(order: str) -> int:
                    return 1

                @steps.workflow("checkout")
                async def checkout(order: str) -> int:
                    assert_type(await mail(order, "a@example.com"), str)
                    return await charge(order)
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(source)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr


async def test_a_workflow_that_raises_is_concluded_failed_and_sealed_for_good(
    make_store: Any,
) -> None:
    """The decision documented beside agentplane 0.22's (which leaves it open): the run is
    sealed ``failed`` with the exception as its reason, and its key answers that outcome
    without running the workflow again."""
    store: SqlJournalStore = await make_store()
    steps = Steps(store, instance="w1")
    runs: list[str] = []

    @steps.workflow("refund")
    async def refund(order: str) -> str:
        runs.append(order)
        raise ValueError(f"order {order} was never paid")

    with pytest.raises(ValueError, match="never paid"):
        await refund.start("refund-1", "o1")
    run = await store.admitted_as("refund-1")
    assert run is not None and await store.inclusion_proof(run) is not None  # sealed
    again = await refund.start("refund-1", "o1")
    assert isinstance(again, Finished) and again.outcome.status == "failed"
    assert again.outcome.reason == "ValueError: order o1 was never paid"
    assert runs == ["o1"]
