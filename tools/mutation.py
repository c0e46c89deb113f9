"""Mutation testing of the modules that hold the guarantees; fails when a mutant survives.

    pip install -e '.[test,mutation]'
    python tools/mutation.py                 # every module in tools/mutation.toml
    python tools/mutation.py chain record    # some of them
    python tools/mutation.py --json report.json

A test suite can pass while a guarantee has no test at all: flip a comparison in the chain
check and nothing notices. mutmut (3.x) makes such changes one at a time (a comparison
flipped, ``and``/``or`` swapped, a constant moved by one, ``continue`` made ``break``, a
default changed, an argument dropped, a string changed) and runs the tests that call the
changed function against each. A mutant no test fails on *survives*.

Each module of ``tools/mutation.toml`` runs on its own, in a scratch copy of the package and
the tests (``.mutation/<module>/``), against only its fast tests (no PostgreSQL, nothing
marked slow), bounded by ``budget_seconds``. A survivor fails the run unless:

* it is listed in ``tools/mutation-equivalents.toml`` with the change it makes (so an entry
  whose mutant now makes another change, because the function was edited, is stale and no
  longer excuses anything) and the reason it changes no behaviour; or
* it is listed in the same file's ``[[postgresql]]`` entries: a change only PostgreSQL can
  show (the run mutex a task holds, which SQLite's write lock subsumes), named with the
  PostgreSQL test that fails on it (run it there: the mutation run is SQLite's). Counted
  and reported as ``postgresql``; or
* mutmut's change parses to the same code (a literal rewritten as its own value: ``1e16``
  as ``1e16 + 1``, which is ``1e16`` as a double), counted as ``equivalent``; or
* it only changes the text of an error message (inside a ``raise``, in the message an
  exception class hands ``super().__init__``, or in a line a verifier appends to its
  report's ``findings``/``not_checked``: a string literal, an f-string or what it
  interpolates): what a person reads, never what is accepted or refused. Counted and
  reported as ``message``.

Exit status 0 only when every module ran to its end and every survivor is one of those.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "tools" / "mutation.toml"
EQUIVALENTS = ROOT / "tools" / "mutation-equivalents.toml"
SCRATCH = ROOT / ".mutation"

# mutmut's exit-code verdicts (mutmut.stats.status_by_exit_code) that count as caught.
CAUGHT = {"killed", "timeout", "caught by type check", "segfault"}


@dataclass
class Mutant:
    name: str
    status: str
    change: str = ""  # "old -> new", from the AST (stable text for the equivalents list)
    line: int = 0  # in the real source file
    verdict: str = ""  # killed | equivalent | message | postgresql | survived


@dataclass
class ModuleReport:
    module: str
    path: str
    finished: bool = False
    seconds: float = 0.0
    error: str = ""
    mutants: list[Mutant] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)

    def count(self, verdict: str) -> int:
        return sum(1 for m in self.mutants if m.verdict == verdict)

    @property
    def ok(self) -> bool:
        return self.finished and not self.error and self.count("survived") == 0


def load_equivalents() -> dict[str, dict[str, str]]:
    """The reviewed survivors: ``[[equivalent]]`` (no behaviour changes) and ``[[postgresql]]``
    (a change only PostgreSQL shows, with its ``test``), keyed by mutant, tagged by ``kind``."""
    data = tomllib.loads(EQUIVALENTS.read_text("utf-8"))
    out: dict[str, dict[str, str]] = {}
    for kind, keys in (("equivalent", ()), ("postgresql", ("test",))):
        for entry in data.get(kind, []):
            for key in ("mutant", "change", "why", *keys):
                if not entry.get(key):
                    raise SystemExit(f"{EQUIVALENTS.name}: an entry lacks {key!r}: {entry}")
            out[entry["mutant"]] = {**entry, "kind": kind}
    return out


def _toml_value(value: Any) -> str:
    # Strings, numbers, booleans and lists of them: JSON's spelling is TOML's.
    return json.dumps(value)


def prepare(module: str, spec: dict[str, Any], run: dict[str, Any]) -> Path:
    """A scratch copy of the package and the tests, with mutmut's configuration for one
    module (mutmut reads ``[tool.mutmut]`` from the working directory's pyproject.toml)."""
    scratch = SCRATCH / module
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis", "*.pyc")
    shutil.copytree(ROOT / "agentplane_journal", scratch / "agentplane_journal", ignore=ignore)
    shutil.copytree(ROOT / "tests", scratch / "tests", ignore=ignore)
    # The migrations, for a covering test that opens a SQLite store (schema only via them).
    shutil.copytree(ROOT / "alembic", scratch / "alembic", ignore=ignore)
    pytest_ini = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["pytest"]

    def timeout(key: str, default: float) -> Any:  # a module's own value, else the run's
        return spec.get(key, run.get(key, default))

    lines = [
        "[tool.mutmut]",
        'source_paths = ["agentplane_journal"]',
        f"only_mutate = {_toml_value([spec['path']])}",
        f"pytest_add_cli_args_test_selection = {_toml_value(spec['tests'])}",
        f"pytest_add_cli_args = {_toml_value(run['pytest_args'])}",
        "use_git_change_detection = false",
        'also_copy = ["alembic"]',
        f"timeout_multiplier = {_toml_value(float(timeout('timeout_multiplier', 15.0)))}",
        f"timeout_constant = {_toml_value(float(timeout('timeout_constant', 1.0)))}",
        "",
        "[tool.pytest.ini_options]",
    ]
    for key, value in pytest_ini["ini_options"].items():
        if key != "addopts":
            lines.append(f"{key} = {_toml_value(value)}")
    (scratch / "pyproject.toml").write_text("\n".join(lines) + "\n", "utf-8")
    return scratch


def _patterns(spec: dict[str, Any]) -> list[str]:
    """mutmut's names (fnmatch patterns) of the mutants of ``spec["functions"]``, if it names
    any: the pure parts of a module whose other functions need a database."""
    module = spec["path"].removesuffix(".py").replace("/", ".")
    out = []
    for name in spec.get("functions", []):
        cls, _, func = name.rpartition(".")
        out.append(f"{module}.{'xǁ' + cls + 'ǁ' + func if cls else 'x_' + func}__mutmut_*")
    return out


def run_mutmut(
    scratch: Path, max_children: int, budget: float, names: list[str]
) -> tuple[bool, str]:
    """Run mutmut in ``scratch``; (finished within the budget, error text)."""
    env = dict(os.environ, PYTHONPATH=str(scratch))
    log = (scratch / "mutmut.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children), *names],
        cwd=scratch,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        code = proc.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return False, ""
    finally:
        log.close()
    if code != 0:
        text = (scratch / "mutmut.log").read_text("utf-8", "replace").replace("\r", "\n")
        tail = [line for line in text.splitlines() if line.strip()][-3:]
        return False, f"mutmut exited {code}: " + " / ".join(tail)
    return True, ""


def _functions(tree: ast.AST) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {
        node.name: node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, ast.AST) and isinstance(b, ast.AST):
        return ast.dump(a) == ast.dump(b)
    return bool(a == b)


def _first_difference(a: Any, b: Any, ancestors: list[ast.AST]) -> tuple[Any, Any, list[ast.AST]]:
    """The smallest pair of differing nodes (one mutation changes one place), with the
    original's ancestors."""
    if type(a) is not type(b) or not isinstance(a, ast.AST):
        return a, b, ancestors
    differing: list[tuple[Any, Any]] = []
    for name in a._fields:
        if name in ("ctx", "type_comment", "name"):
            continue
        va, vb = getattr(a, name, None), getattr(b, name, None)
        if isinstance(va, list) and isinstance(vb, list) and len(va) == len(vb):
            differing += [(x, y) for x, y in zip(va, vb, strict=True) if not _same(x, y)]
        elif not _same(va, vb):
            differing.append((va, vb))
    # An operator (``and``, ``<``, unary ``-``) has no text of its own: its node stands for it.
    operators = (ast.operator, ast.boolop, ast.unaryop, ast.cmpop)
    if (
        len(differing) == 1
        and isinstance(differing[0][0], ast.AST)
        and not isinstance(differing[0][0], operators)
    ):
        return _first_difference(*differing[0], [*ancestors, a])
    return a, b, ancestors


def _original(source: ast.Module, stem: str) -> ast.AST | None:
    """The real file's function for mutmut's mangled name (``x_name``, ``xǁClassǁname``)."""
    if stem.startswith("xǁ"):
        _, cls, name = stem.split("ǁ")
        for node in source.body:
            if isinstance(node, ast.ClassDef) and node.name == cls:
                return _functions(node).get(name)
        return None
    name = stem[2:]
    for node in source.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return node
    return None


# A verifier's report lists (``report.findings.append(...)``): their text is what a person
# reads; whether a finding is written at all (the verdict) is not text.
_REPORT_LISTS = {"findings", "not_checked"}


def _is_report_line(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "append"
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr in _REPORT_LISTS
    )


def _is_error_text(node: ast.AST) -> bool:
    """``super().__init__(...)``: an exception class passing its message up (the only
    classes here that hand ``super().__init__`` text)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "__init__"
        and isinstance(node.func.value, ast.Call)
        and isinstance(node.func.value.func, ast.Name)
        and node.func.value.func.id == "super"
    )


def _in_message(node: Any, ancestors: list[ast.AST]) -> bool:
    """Whether the change is to the text of a message only: inside a ``raise``, inside the
    message an exception class's ``__init__`` hands ``super().__init__``, or inside the line
    a verifier appends to its report's ``findings`` or ``not_checked``, a string literal, an
    f-string, or anything an f-string there interpolates (the type named in
    ``f"not {type(x).__name__}"``). A change to the exception's other arguments (the seq a
    ``CorruptRecordError`` names, an attribute it keeps), to its class, or to whether a
    finding is appended at all is not."""
    if not any(
        isinstance(n, ast.Raise) or _is_report_line(n) or _is_error_text(n) for n in ancestors
    ):
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    return isinstance(node, ast.JoinedStr) or any(isinstance(n, ast.JoinedStr) for n in ancestors)


def _text(node: Any) -> str:
    if isinstance(node, ast.AST):
        return ast.unparse(node)
    return repr(node)


IDENTICAL = "(the same code once parsed)"


def _same_code(a: ast.FunctionDef | ast.AsyncFunctionDef, b: Any) -> bool:
    """Whether two functions differ only in their names."""
    return ast.dump(a).replace(a.name, "", 1) == ast.dump(b).replace(b.name, "", 1)


def describe(scratch: Path, path: str, mutants: list[Mutant]) -> None:
    """Fill each mutant's ``change`` and ``line`` (in the real file), and whether it only
    changes an error message's text."""
    mutated = ast.parse((scratch / "mutants" / path).read_text("utf-8"))
    source = ast.parse((ROOT / path).read_text("utf-8"))
    by_name = _functions(mutated)
    for mutant in mutants:
        local = mutant.name.rsplit(".", 1)[1]
        stem = local.rsplit("__mutmut_", 1)[0]
        orig, new = by_name.get(stem + "__mutmut_orig"), by_name.get(local)
        if orig is None or new is None:
            mutant.change = "(mutant not found in mutmut's output)"
            continue
        a, b, ancestors = _first_difference(orig, new, [])
        if a is orig and _same_code(orig, new):
            # mutmut rewrote a literal as the same value (1e16 + 1 is 1e16 as a double)
            mutant.change = IDENTICAL
            continue
        mutant.change = f"{_text(a)} -> {_text(b)}"
        real = _original(source, stem)
        offset = getattr(a, "lineno", orig.lineno) - orig.lineno
        mutant.line = (getattr(real, "lineno", 0) if real else 0) + offset
        if _in_message(a, ancestors):
            mutant.verdict = "message"


def collect(scratch: Path, path: str) -> list[Mutant]:
    from mutmut.stats import status_by_exit_code  # the tool's own verdicts

    meta = json.loads((scratch / "mutants" / (path + ".meta")).read_text("utf-8"))
    return [
        Mutant(name, status_by_exit_code[code]) for name, code in meta["exit_code_by_key"].items()
    ]


def judge(report: ModuleReport, equivalents: dict[str, dict[str, str]]) -> None:
    for mutant in report.mutants:
        entry = equivalents.get(mutant.name)
        if mutant.status in CAUGHT:
            mutant.verdict = "killed"
            if entry is not None:
                report.stale.append(f"{mutant.name} is listed as equivalent but was killed")
        elif mutant.verdict == "message":
            continue
        elif mutant.status == "not checked":
            mutant.verdict = "unchecked"  # the budget ran out before it
        elif mutant.change == IDENTICAL:
            mutant.verdict = "equivalent"  # the same AST: the same behaviour
        elif entry is not None and entry["change"] == mutant.change:
            mutant.verdict = entry["kind"]  # equivalent, or postgresql
        else:
            if entry is not None:
                report.stale.append(
                    f"{mutant.name}: listed for {entry['change']!r}, now makes {mutant.change!r}"
                )
            mutant.verdict = "survived"


def run_module(
    module: str, spec: dict[str, Any], run: dict[str, Any], eq: Any, only: list[str] | None = None
) -> ModuleReport:
    report = ModuleReport(module, spec["path"])
    started = time.monotonic()
    scratch = prepare(module, spec, run)
    names = only or _patterns(spec)
    budget = float(spec.get("budget_seconds", run["budget_seconds"]))
    report.finished, report.error = run_mutmut(scratch, int(run["max_children"]), budget, names)
    report.seconds = time.monotonic() - started
    if (scratch / "mutants" / (spec["path"] + ".meta")).exists():
        report.mutants = collect(scratch, spec["path"])
        if names:  # only the functions named: the others are out of scope, not survivors
            report.mutants = [
                m for m in report.mutants if any(fnmatch.fnmatch(m.name, p) for p in names)
            ]
        unsettled = [m for m in report.mutants if m.status not in CAUGHT | {"not checked"}]
        describe(scratch, spec["path"], unsettled)
        judge(report, eq)
    return report


def print_report(report: ModuleReport) -> None:
    total = len(report.mutants)
    killed = report.count("killed")
    timeouts = sum(1 for m in report.mutants if m.status == "timeout")
    state = "ok" if report.ok else "FAIL"
    if not report.finished and not report.error:
        state = "INCOMPLETE (budget exceeded)"
    print(
        f"{report.module:14} {total:5} mutants {killed:5} killed {report.count('equivalent'):4} "
        f"equivalent {report.count('message'):4} message "
        + (f"{report.count('postgresql'):4} postgresql " if report.count("postgresql") else "")
        + f"{report.count('survived'):4} survived "
        f"{report.count('unchecked'):4} unchecked {report.seconds:6.0f}s  {state}"
        + (f"  ({timeouts} of the killed by timeout)" if timeouts else "")
    )
    if report.error:
        print(f"    {report.error}")
    for mutant in report.mutants:
        if mutant.verdict == "survived":
            where = f"{report.path}:{mutant.line}"
            print(f"    survived ({mutant.status}) {mutant.name}  {where}: {mutant.change}")
    for line in report.stale:
        print(f"    stale equivalent: {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("modules", nargs="*", help="modules of tools/mutation.toml (all)")
    parser.add_argument("--json", type=Path, help="write the full report here")
    parser.add_argument("--budget", type=float, help="override budget_seconds per module")
    parser.add_argument("--max-children", type=int, help="override mutmut's workers")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="MUTANT",
        help="re-run only these mutants (mutmut's names or fnmatch patterns), e.g. a module's "
        "survivors after a test was added; the report counts only them",
    )
    args = parser.parse_args(argv)
    config = tomllib.loads(CONFIG.read_text("utf-8"))
    modules: dict[str, dict[str, Any]] = config["modules"]
    run = dict(config["run"])
    if args.budget:
        run["budget_seconds"] = args.budget
    if args.max_children:
        run["max_children"] = args.max_children
    unknown = [m for m in args.modules if m not in modules]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; tools/mutation.toml has {sorted(modules)}")
    equivalents = load_equivalents()
    reports = []
    for module in args.modules or list(modules):
        report = run_module(module, modules[module], run, equivalents, args.only)
        print_report(report)
        sys.stdout.flush()
        reports.append(report)
    if args.json:
        payload = [
            {
                "module": r.module,
                "path": r.path,
                "finished": r.finished,
                "seconds": round(r.seconds, 1),
                "counts": {
                    v: r.count(v)
                    for v in ("killed", "equivalent", "message", "postgresql", "survived")
                },
                "survivors": [
                    {"mutant": m.name, "status": m.status, "line": m.line, "change": m.change}
                    for m in r.mutants
                    if m.verdict == "survived"
                ],
                "stale": r.stale,
            }
            for r in reports
        ]
        args.json.write_text(json.dumps(payload, indent=2) + "\n", "utf-8")
    failed = [r.module for r in reports if not r.ok]
    if failed:
        print(f"mutation testing FAILED in: {', '.join(failed)}")
        return 1
    print("mutation testing passed: every mutant is killed, equivalent or a message's text")
    return 0


if __name__ == "__main__":
    sys.exit(main())
