"""docs/architecture.md's layer table is rendered from envhub/layers.py, so the doc cannot drift."""

from __future__ import annotations

import re

import pytest

from envhub import layers

REGENERATE = "python -m envhub.layers --write"
REPO = layers.DOC.parent.parent


def home(part: str) -> str:
    """Where a part lives: `envhub/sandbox/fleet/`, `envhub/core.py`, `envs/code/`, `trainer/`."""
    if part == "envhub_trainer":
        return "trainer/"
    if not part.startswith("envhub."):
        return "envhub/__init__.py" if part == "envhub" else f"envs/{part.removeprefix('envhub_')}/"
    path = part.replace(".", "/")
    return f"{path}/" if (REPO / path).is_dir() else f"{path}.py"


def test_the_architecture_doc_shows_the_table_the_code_obeys() -> None:
    """The text between the markers is exactly the rendering of LAYERS and the worklist."""
    doc = layers.DOC.read_text()
    assert doc == layers.with_table(doc), (
        f"docs/architecture.md's layer table differs from envhub/layers.py; regenerate it: {REGENERATE}"
    )


def exists(part: str) -> bool:
    """Whether the part has code in this checkout yet (its row may come first)."""
    return (REPO / home(part)).exists()


def test_the_path_table_names_every_part() -> None:
    """The doc's path table (what lives where) names the folder or file of every part in the layer
    table, so a reader finds each part's home from the doc (a part whose code has not landed yet
    is named once it has)."""
    doc = layers.DOC.read_text()
    paths = doc[: doc.index("## Layers")]
    homes = [(part, home(part)) for layer in layers.LAYERS for part in layer.parts if exists(part)]
    missing = [(part, path) for part, path in homes if f"`{path}" not in paths]
    assert not missing, f"docs/architecture.md's path table names none of these homes: {missing}"


def test_the_path_table_names_only_what_exists() -> None:
    """Each path in the first column of the doc's path table exists, so a moved or removed part
    leaves no row pointing at nothing."""
    doc = layers.DOC.read_text()
    rows = [line for line in doc[: doc.index("## Layers")].splitlines() if line.startswith("| `")]
    named = [path for row in rows for path in re.findall(r"`([^`]+)`", row.split("|")[1])]
    assert named, "docs/architecture.md's path table was not found"
    gone = [path for path in named if not (REPO / path).exists()]
    assert not gone, f"docs/architecture.md's path table names what does not exist: {gone}"


def test_the_writer_replaces_only_the_marked_table() -> None:
    """`--write` keeps everything outside the markers and refuses a doc without them."""
    doc = f"before\n{layers.BEGIN}\nold table\n{layers.END}\nafter\n"
    written = layers.with_table(doc)
    assert written.startswith(f"before\n{layers.BEGIN}\n") and written.endswith(f"{layers.END}\nafter\n")
    assert "old table" not in written and layers.render_markdown() in written
    with pytest.raises(ValueError, match="markers"):
        layers.with_table("no markers")
