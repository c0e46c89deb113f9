"""The code blocks of README.md and docs/, and how each is accounted for.

Every fenced block must say, on the line right before its fence, what the tests do with it
(an HTML comment: invisible on the rendered site and on a code host):

``<!-- runnable -->``
    run as written, twice in a row in one fresh directory (a second run in the same place is
    what a reader does, and what catches an example that collides with what its first run
    left). ``python`` blocks are whole programs; ``sh`` blocks run under ``bash -e``;
    ``console`` blocks run their ``$ `` lines and show output that is not compared.
    ``<!-- runnable: postgresql -->`` runs it on a fresh PostgreSQL database instead of
    SQLite files, ``<!-- runnable: sqlite postgresql -->`` on both: every PostgreSQL URL
    written in the block is replaced by the test database's, and ``$AGENTPLANE_JOURNAL_URL``
    names it. ``demo`` among the words: the block works on a journal, so
    ``$AGENTPLANE_JOURNAL_URL`` names a database (a SQLite file there, or the PostgreSQL
    one) that ``agentplane-journal demo`` filled before the two runs.
``<!-- fragment: REASON -->``
    not run, and the reason says why (it installs packages, needs a reader's own server or
    key, is output or a configuration file). The reason is required.
``<!-- tested-by: tests/FILE.py -->``
    run by that test file, which finds the block by a string the block begins with.

tests/test_docs_examples.py holds the checks; docs/tests.md documents the convention.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = (ROOT / "README.md", *sorted(DOCS.rglob("*.md")))

MARKER = re.compile(r"^\s*<!-- (runnable|fragment|tested-by)(?::\s*(.*?))?\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^`\s]*)[^`]*$")
DIALECTS = ("sqlite", "postgresql")
#: A PostgreSQL URL written in a block: replaced by the test database's when it runs there.
PG_URL = re.compile(r"postgres(?:ql)?(?:\+asyncpg)?://[^\s\"'`)]+")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text and its marker."""

    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str  # dedented to the fence's indentation
    marker: str | None  # runnable, fragment, tested-by, or None
    argument: str  # what follows the marker's colon

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def options(self) -> tuple[str, ...]:
        """A runnable block's words: its dialects, and ``demo``."""
        words = tuple(re.split(r"[\s,]+", self.argument.strip())) if self.argument else ()
        unknown = set(words) - {*DIALECTS, "demo"}
        assert not unknown, f"{self.name}: unknown option(s) {sorted(unknown)}"
        return words

    @property
    def dialects(self) -> tuple[str, ...]:
        """The databases a runnable block runs on (SQLite unless it names them)."""
        return tuple(word for word in self.options if word in DIALECTS) or ("sqlite",)


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, with the marker on the line before its fence."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, lang = opening.groups()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        assert j < len(lines), f"{page}:{i + 1}: an unclosed fence"
        marked = MARKER.match(lines[i - 1]) if i else None
        found.append(
            Block(
                page,
                i + 1,
                lang,
                "".join(line + "\n" for line in body),
                marked.group(1) if marked else None,
                (marked.group(2) or "") if marked else "",
            )
        )
        i = j + 1
    return found


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


def stray_markers(page: Path) -> list[int]:
    """Lines holding a marker that no fence follows (a marker that would silently do nothing)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    return [
        n + 1
        for n, line in enumerate(lines)
        if MARKER.match(line) and not (n + 1 < len(lines) and FENCE.match(lines[n + 1]))
    ]


def named_test_finds(block: Block) -> bool:
    """Whether the test file a ``tested-by`` marker names holds a string the block begins with."""
    path = ROOT / block.argument
    if not (block.argument.startswith("tests/") and path.is_file()):
        return False
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and len(node.value) >= 8
        and block.code.startswith(node.value)
        for node in ast.walk(tree)
    )


def commands(block: Block) -> str:
    """The shell text of a runnable ``sh`` or ``console`` block (a console's ``$`` lines)."""
    if block.lang != "console":
        return block.code
    return "".join(line[2:] + "\n" for line in block.code.splitlines() if line.startswith("$ "))


def for_dialect(code: str, url: str | None) -> str:
    """The block's text with its PostgreSQL URLs replaced by ``url`` (when it runs there)."""
    return code if url is None else PG_URL.sub(lambda _: url, code)
