"""Every Python block in README.md and docs/*.md is run or checked: the examples cannot drift from the code.

A block runs in a fresh interpreter after the blocks before it in the same document (they build on each
other), with top-level `await` allowed. Two other kinds of block:
- an excerpt, whose first line is `# PATH` of a file in the repository: its other lines must appear in that
  file as they are (`envhub-word-reverse/PATH` is a file of the package `envhub new word-reverse` writes);
- a block right after `<!-- not run: REASON -->`: left out, for the reason the document gives.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest

from envhub.scaffold import plugin_names, render

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>\S.*\S) -->$")
EXCERPT = re.compile(r"^# (?P<path>[\w./-]+\.py)$")
SCAFFOLDED = "envhub-word-reverse/"

# Blocks of documents this change could not edit (docs/swe.md is the lead's), and why they cannot run;
# each goes once its document carries the `not run` comment itself.


@dataclass(frozen=True)
class Block:
    document: str
    line: int
    code: str
    not_run: str | None

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"

    @property
    def excerpt_of(self) -> str | None:
        match = EXCERPT.match(self.code.split("\n", 1)[0])
        return match["path"] if match else None


def blocks(document: Path) -> list[Block]:
    """The document's ```python blocks, each with the reason it is not run, if it says one."""
    lines = document.read_text(encoding="utf-8").splitlines()
    found, start = [], None
    for number, line in enumerate(lines, 1):
        if start is None and line.strip() == "```python":
            start = number
        elif start is not None and line.strip() == "```":
            code = "\n".join(lines[start : number - 1])
            marker = NOT_RUN.match(lines[start - 2].strip()) if start >= 2 else None
            name = document.relative_to(ROOT).as_posix()
            reason = marker["reason"] if marker else None
            found.append(Block(name, start, code, reason))
            start = None
    return found


ALL = [block for document in DOCUMENTS for block in blocks(document)]
RUNNABLE = {doc: [b for b in ALL if b.document == doc and b.not_run is None and not b.excerpt_of] for doc in
            dict.fromkeys(b.document for b in ALL)}  # fmt: skip
EXCERPTS = [b for b in ALL if b.not_run is None and b.excerpt_of]

# Runs each block in one namespace, awaiting those with top-level `await`; names the block that fails.
DRIVER = """
import ast, asyncio, json, sys, traceback
namespace = {"__name__": "__main__"}
for where, code in json.load(sys.stdin):
    try:
        result = eval(compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), namespace)
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    except BaseException:
        traceback.print_exc()
        sys.exit(f"the example at {where} failed")
"""


def test_the_parser_finds_every_block() -> None:
    fences = sum(p.read_text(encoding="utf-8").count("```python\n") for p in DOCUMENTS)
    assert len(ALL) == fences > 20
    assert RUNNABLE["README.md"] and RUNNABLE["docs/authoring.md"]


@pytest.mark.slow
@pytest.mark.parametrize("document", [doc for doc, runnable in RUNNABLE.items() if runnable])
def test_examples_run(document: str, tmp_path: Path) -> None:
    """In a scratch directory and home: an example may write files (a judge's cache under ~)."""
    code = json.dumps([(block.where, block.code) for block in RUNNABLE[document]])
    result = subprocess.run(
        [sys.executable, "-c", DRIVER],
        input=code,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path)},
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]


@pytest.mark.parametrize("block", EXCERPTS, ids=[b.where for b in EXCERPTS])
def test_excerpts_match_their_files(block: Block) -> None:
    path = block.excerpt_of
    assert path is not None
    if path.startswith(SCAFFOLDED):
        files = render(plugin_names("word-reverse"))
        text = files[PurePosixPath(path.removeprefix(SCAFFOLDED))]
    else:
        assert (ROOT / path).is_file(), f"{block.where} quotes {path}, which does not exist"
        text = (ROOT / path).read_text(encoding="utf-8")
    excerpt = block.code.split("\n", 1)[1]
    assert excerpt in text, f"{block.where} no longer matches {path}: copy the code as it is now"
