"""The floor plan, read from the source: every import of every module of envhub/, of each plugin under
envs/ and of the trainer, checked against the layer table in envhub/layers.py.

Imports inside functions and under TYPE_CHECKING count too: a lazy import is still a dependency, and
the one this test began with (`envhub swe` importing envhub_swe inside its commands) was lazy.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import envhub
from envhub import layers

PACKAGE = Path(envhub.__file__).parent
REPO = PACKAGE.parent
EDIT = "envhub/layers.py"


def package_roots() -> list[Path]:
    """envhub/, each plugin package under envs/ and the trainer's package: the code others install.

    A plugin's tests, benchmarks and tools scripts are leaves no package imports, so they are not read."""
    return [PACKAGE, *sorted(REPO.glob("envs/*/envhub_*/")), *sorted(REPO.glob("trainer/envhub_*/"))]


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def read_modules() -> dict[str, Path]:
    """Module name -> file, for every module of every package root (the scaffold's template is a
    template: `envhub new` writes it out as a new package, so it is nobody's module)."""
    found = {}
    for root in package_roots():
        for path in sorted(root.rglob("*.py")):
            if "template" not in path.relative_to(root).parts:
                found[module_name(path, root)] = path
    return found


MODULES = read_modules()
OURS = ("envhub", "envhub_")


def ours(target: str) -> bool:
    top = target.split(".")[0]
    return top == "envhub" or top.startswith("envhub_")


def imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) for each import in the module; `from a import b` means a.b when b is one."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield (submodule if submodule in MODULES else base), node.lineno


def owner(target: str) -> str:
    """The module an imported name lives in: `envhub.core.Env` -> `envhub.core`."""
    while target not in MODULES and "." in target:
        target = target.rpartition(".")[0]
    return target


def where(name: str, line: int | None = None) -> str:
    path = MODULES[name].relative_to(REPO)
    return f"{path}:{line}" if line else str(path)


def edges() -> dict[str, dict[str, int]]:
    """Module -> {our module it imports: first line}, every import counted (lazy, TYPE_CHECKING, relative).

    Importing `envhub.x.y` also runs the package `envhub.x`, but that is Python's doing, not an arrow
    the module drew: only the module named in the import statement counts.
    """
    graph: dict[str, dict[str, int]] = {}
    for name, path in MODULES.items():
        for target, line in imports(name, path):
            if ours(target) and owner(target) != name:
                graph.setdefault(name, {}).setdefault(owner(target), line)
    return graph


def cycles(graph: dict[str, set[str]] | dict[str, dict[str, int]]) -> list[frozenset[str]]:
    """The strongly connected parts with more than one member (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = set()
            while True:
                member = stack.pop()
                part.add(member)
                if member == node:
                    break
            if len(part) > 1:
                found.append(frozenset(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer_name(module: str) -> str:
    layer = layers.layer_of(module)
    return layer.name if layer else "in no layer"


def upward() -> dict[tuple[str, str], int]:
    """(module, imported module) -> line, for each import the layer table does not allow."""
    return {
        (name, target): line
        for name, targets in edges().items()
        for target, line in targets.items()
        if not layers.may_import(name, target)
    }


def test_every_module_maps_to_a_row() -> None:
    """A new part gets its row before its code: a module no row names fails here, naming its file."""
    unmapped = sorted(where(name) for name in MODULES if layers.part_of(name) is None)
    assert not unmapped, f"modules in no layer; add their part to a row of LAYERS in {EDIT}:\n" + "\n".join(
        unmapped
    )


def test_the_table_is_well_formed() -> None:
    """Layers may import only layers below them, each part is in one row, and each worklist entry
    names real modules (a stale entry would otherwise excuse nothing, silently)."""
    names = [layer.name for layer in layers.LAYERS]
    assert len(set(names)) == len(names), names
    for position, layer in enumerate(layers.LAYERS):
        above = set(layer.may_import) - set(names[:position])
        assert not above, f"{EDIT}: layer {layer.name!r} may import {sorted(above)}, not below it"
    parts = [part for layer in layers.LAYERS for part in layer.parts]
    assert len(set(parts)) == len(parts), sorted(p for p in parts if parts.count(p) > 1)
    # A part may have no module yet (its row comes before its code); a renamed part's modules would
    # map to no row, which test_every_module_maps_to_a_row reports.
    assert all(ours(part) for part in parts), sorted(p for p in parts if not ours(p))
    pairs = [(known.module, known.imports) for known in layers.KNOWN_UPWARD]
    assert len(set(pairs)) == len(pairs), f"{EDIT}: KNOWN_UPWARD lists an import twice"
    named = {m for k in layers.KNOWN_UPWARD for m in (k.module, k.imports)}
    named |= {m for c in layers.KNOWN_CYCLES for m in c.modules}
    assert named <= set(MODULES), f"{EDIT}'s worklist names no such module: {sorted(named - set(MODULES))}"


def test_no_import_runs_upward() -> None:
    """Every import of every row obeys the table; today's exceptions are listed in KNOWN_UPWARD, and a
    listed one that is gone must leave the list (so the list only shrinks)."""
    found = upward()
    listed = {(known.module, known.imports) for known in layers.KNOWN_UPWARD}
    new = sorted(
        f"{where(name, line)}: {name} ({layer_name(name)}) imports {target} ({layer_name(target)})"
        for (name, target), line in found.items()
        if (name, target) not in listed
    )
    gone = sorted(f"{name} -> {target}" for name, target in listed - set(found))
    assert not new, f"imports running upward (fix the import, or the table in {EDIT}):\n" + "\n".join(new)
    assert not gone, f"no longer imported; delete these entries from KNOWN_UPWARD in {EDIT}:\n" + "\n".join(
        gone
    )


def test_no_import_cycle() -> None:
    """No module imports, directly or through others, a module that imports it back: a cycle means
    neither side can be read, tested or moved without the other. Lazy imports count (one that exists
    to dodge a cycle is the cycle). Today's cycles are listed in KNOWN_CYCLES, and only shrink."""
    found = set(cycles(edges()))
    listed = {cycle.modules for cycle in layers.KNOWN_CYCLES}
    new = [" <-> ".join(sorted(cycle)) for cycle in found - listed]
    gone = [" <-> ".join(sorted(cycle)) for cycle in listed - found]
    assert not new, "import cycles: " + "; ".join(sorted(new))
    assert not gone, f"gone (or changed); update KNOWN_CYCLES in {EDIT}: " + "; ".join(sorted(gone))


def test_envhub_never_imports_a_plugin_or_the_trainer() -> None:
    """envs/ and trainer/ build on envhub, never the reverse: the core imports no `envhub_*` module,
    installed here or not."""
    offenders = {
        f"{where(name, line)} imports {target}"
        for name, path in MODULES.items()
        if name.split(".")[0] == "envhub"
        for target, line in imports(name, path)
        if target.split(".")[0].startswith("envhub_")
    }
    assert not offenders, "\n".join(sorted(offenders))


def test_the_reader_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The reader itself: a relative import and one inside a function are both seen, cycles are found,
    plugins are read, and the table's rules say what they mean (or the rules above could pass by not
    looking)."""
    module = tmp_path / "fake.py"
    module.write_text(
        "from .app import fail\nfrom . import plugins\n\ndef run():\n    import envhub_swe.cli\n"
    )
    assert set(imports("envhub.cli.fake", module)) == {
        ("envhub.cli.app", 1),
        ("envhub.cli.plugins", 2),
        ("envhub_swe.cli", 5),
    }
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]
    assert owner("envhub.core.Env") == "envhub.core"
    graph = edges()  # module by module, lazy and TYPE_CHECKING imports included
    assert "envhub.core" in graph["envhub.integrations.verifiers"]  # only under TYPE_CHECKING
    assert "envhub.sandbox.local" in graph["envhub.sandbox.backends"]  # only inside `create`
    assert "envhub.cli.app" in graph["envhub_swe.cli"]  # a plugin's imports are read too
    assert layers.part_of("envhub") == "envhub" and layers.part_of("envhub.core") == "envhub.core"
    assert layers.part_of("envhub.sandbox.fleet.leases") == "envhub.sandbox.fleet"
    assert layers.may_import("envhub.rollout.runner", "envhub.core")
    assert not layers.may_import("envhub.core", "envhub.rollout.runner")
    assert not layers.may_import("envhub_miniwob.env", "envhub_games.env")  # plugins stand alone
    assert layers.may_import("envhub_miniwob.env", "envhub_browser")  # on a plugin base
    assert not layers.may_import("envhub.cli.app", "envhub_swe.cli")
