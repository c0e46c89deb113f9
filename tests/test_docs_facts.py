"""Facts the docs state about the code are drawn from the code: each is checked here, so a
page cannot drift from the package (or from another page) unnoticed.

* the layer order, wherever a page spells it (``a > b | c > ...``), is the one
  ``pyproject.toml``'s import-linter ``layers`` contract enforces, and so is the contract's
  own name;
* the number of ``# type: ignore`` comments CONTRIBUTING.md states is the package's;
* no page states the size of the suite (a count of tests goes stale with the next test: say
  what a test shows, not how many there are).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "agentplane_journal"
#: Every page a reader meets: the README, CONTRIBUTING and the docs site (not the CHANGELOG,
#: which records what was true then).
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").rglob("*.md")])

#: A layer order in backticks: names joined by " > " (and " | " within a layer).
LAYER_LIST = re.compile(r"`([a-z_]+(?: [|>] [a-z_]+)*(?: > [a-z_]+)(?: [|>] [a-z_]+)*)`")
SUITE_SIZE = re.compile(r"\b\d[\d,]* (?:tests|test files|passed|skipped)\b")
IGNORES_STATED = re.compile(r"`# type: ignore`.{0,200}?today there (?:is|are) (\d+)", re.S)


def _layers_contract() -> dict[str, object]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    [contract] = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return dict(contract)


def enforced_layers() -> str:
    """The layers contract as the docs spell it: ``cli | adapters > ... > core``."""
    prefix = _layers_contract().get("containers", "agentplane_journal")
    layers = _layers_contract()["layers"]
    assert isinstance(layers, list)
    return " > ".join(
        " | ".join(m.strip().removeprefix(f"{prefix}.") for m in layer.split("|"))
        for layer in layers
    )


def stated_layers(text: str) -> list[str]:
    return [m for m in LAYER_LIST.findall(text) if len(m.split(" > ")) > 2]


def test_the_checker_reads_a_layer_list_and_nothing_else() -> None:
    text = "layered: `cli | web > journal > db > core`; a path `a > b`; `x | y`, `db > core`."
    assert stated_layers(text) == ["cli | web > journal > db > core"]


def test_every_page_that_lists_the_layers_lists_the_enforced_ones() -> None:
    """(Seen red: design.md and CONTRIBUTING.md left out adapters, langgraph, web, witness
    and keyring, and the contract's name left out keyring.)"""
    enforced = enforced_layers()
    found = {page: stated_layers(page.read_text(encoding="utf-8")) for page in PAGES}
    stated = [(page.relative_to(ROOT), lst) for page, lists in found.items() for lst in lists]
    assert stated, "no page lists the layers (docs/design.md did)"
    wrong = [f"{page}: `{lst}`" for page, lst in stated if lst != enforced]
    assert wrong == [], f"pyproject.toml enforces `{enforced}`; these pages say:\n" + "\n".join(
        wrong
    )
    assert _layers_contract()["name"] == f"layers: {enforced}"


def test_the_stated_number_of_type_ignores_is_the_packages() -> None:
    """(Seen red: CONTRIBUTING.md said one, the package had four.)"""
    count = sum(
        line.count("# type: ignore")
        for path in PACKAGE.rglob("*.py")
        for line in path.read_text(encoding="utf-8").splitlines()
    )
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    stated = IGNORES_STATED.findall(contributing)
    assert stated, "CONTRIBUTING.md no longer states how many `# type: ignore`s there are"
    assert [int(n) for n in stated] == [count], (
        f"CONTRIBUTING.md says {stated}, the package has {count} (`grep -rn 'type: ignore' "
        "agentplane_journal`)"
    )


def test_no_page_states_the_size_of_the_suite() -> None:
    found = [
        f"{page.relative_to(ROOT)}: {m}"
        for page in PAGES
        for m in SUITE_SIZE.findall(page.read_text(encoding="utf-8"))
    ]
    assert found == [], "a count of tests goes stale; say what the tests show:\n" + "\n".join(found)
