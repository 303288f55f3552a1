"""The floor plan, read from the source: every import statement of every module under envhub/.

Imports inside functions and under TYPE_CHECKING count too: a lazy import is still a dependency, and
the one this test exists for (`envhub swe` importing envhub_swe inside its commands) was lazy.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import envhub

PACKAGE = Path(envhub.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


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


def floor(module: str) -> str:
    """The part of envhub a module belongs to: `envhub.cli.app` -> `envhub.cli`, `envhub.core` itself."""
    return ".".join(module.split(".")[:2])


def owner(target: str) -> str:
    """The envhub module an imported name lives in: `envhub.core.Env` -> `envhub.core`."""
    while target not in MODULES and "." in target:
        target = target.rpartition(".")[0]
    return target


def edges() -> dict[str, set[str]]:
    """Module -> the envhub modules it imports, every import counted (lazy, TYPE_CHECKING, relative).

    Importing `envhub.x.y` also runs the package `envhub.x`, but that is Python's doing, not an arrow
    the module drew: only the module named in the import statement counts.
    """
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        for target, _ in imports(name, path):
            if target.split(".")[0] == "envhub" and owner(target) != name:
                graph.setdefault(name, set()).add(owner(target))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
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


def test_envhub_never_imports_a_plugin_or_the_trainer() -> None:
    """envs/ and trainer/ build on envhub, never the reverse: the core imports no `envhub_*` module."""
    offenders = {
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}"
        for name, path in MODULES.items()
        for target, line in imports(name, path)
        if target.split(".")[0].startswith("envhub_")
    }
    assert not offenders, "\n".join(sorted(offenders))


def test_no_import_cycle_between_any_two_envhub_modules() -> None:
    """No module of envhub imports, directly or through others, a module that imports it back: a cycle
    means neither side can be read, tested or moved without the other. Lazy imports count (one that
    exists to dodge a cycle is the cycle)."""
    found = cycles(edges())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


def test_the_reader_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The reader itself: a relative import and one inside a function are both seen, and cycles are
    found (or the rules above could pass by not looking)."""
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
    assert "envhub.gym_adapter" in graph["envhub.core"]  # only inside `to_gymnasium` and TYPE_CHECKING
    assert "envhub.sandbox.local" in graph["envhub.sandbox.backends"]  # only inside `create`


FLOOR = {
    # The contract floor: what an episode is, said without any machinery.
    "envhub.author_code",
    "envhub.core",
    "envhub.env_spec",
    "envhub.ids",
    "envhub.messages",
    "envhub.records",
    "envhub.text_format",
    "envhub.tools",
    "envhub.trace",
    # Plumbing every model caller shares (HTTP client, micro-batching, chat templates); it stands on
    # the contract and on nothing above it.
    "envhub.inference",
}
"""The parts at the bottom: each imports only others of the floor (`to_gymnasium` aside)."""

ABOVE_THE_FLOOR_ALLOWED = {
    # `Env.to_gymnasium` builds the adapter, imported on the call since gymnasium is an extra; the adapter
    # imports only the floor (it names the env's shape as a protocol), so this is no cycle.
    ("envhub.core", "envhub.gym_adapter"),
    # The rubrics are rewards: they mark their methods with the authoring layer's `@reward`.
    ("envhub.rewards.judge", "envhub.authoring.rewards"),
    ("envhub.rewards.reward_model", "envhub.authoring.rewards"),
    # The LLM judge asks its questions through the OpenAI policy (to stand on envhub.inference next).
    ("envhub.rewards.judge", "envhub.policies.openai"),
}
"""Known crossings of the floor rule, module to module; this list may shrink, never grow."""

ON_THE_FLOOR = {
    # The parts that may import only the floor (and themselves): policies, graders, sandboxes.
    "envhub.policies",
    "envhub.grading",
    "envhub.rewards",
    "envhub.sandbox",
}


def crossings(allowed_for: dict[str, set[str]]) -> set[str]:
    """`file:line imports target` for each import from a part to an envhub part it may not import."""
    found = set()
    for name, path in MODULES.items():
        part = floor(name)
        if part not in allowed_for:
            continue
        for target, line in imports(name, path):
            if target.split(".")[0] != "envhub" or floor(target) == part:
                continue
            if floor(target) not in allowed_for[part] and (name, target) not in ABOVE_THE_FLOOR_ALLOWED:
                found.add(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}")
    return found


def test_the_floor_imports_nothing_above_it() -> None:
    """records, messages, tools, core (and the rest of the floor) import only the floor."""
    offenders = crossings({part: FLOOR for part in FLOOR})
    assert not offenders, "\n".join(sorted(offenders))


def test_policies_graders_and_sandboxes_import_only_the_floor() -> None:
    """Policies, graders (hidden-test grading, judges, reward models) and sandboxes stand on the floor
    alone (graders may use sandboxes too), so none of them reaches into another's helpers."""
    allowed = {part: set(FLOOR) for part in ON_THE_FLOOR}
    allowed["envhub.grading"] |= {"envhub.sandbox"}
    allowed["envhub.rewards"] |= {"envhub.sandbox"}
    offenders = crossings(allowed)
    assert not offenders, "\n".join(sorted(offenders))


def test_every_floor_and_standing_part_exists() -> None:
    """A renamed part must be renamed here too, or the rules above would silently check nothing."""
    parts = {floor(name) for name in MODULES}
    assert parts >= (FLOOR | ON_THE_FLOOR), sorted((FLOOR | ON_THE_FLOOR) - parts)
