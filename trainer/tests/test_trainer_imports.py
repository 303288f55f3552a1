"""The trainer's floor plan, read from its source: no import cycle between its modules, and the algorithm
(grpo.py) never reaches the Ray plumbing; `engine_factory.py` alone chooses Ray, and imports it lazily.

Imports inside functions and under TYPE_CHECKING count: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import envhub_trainer

PACKAGE = Path(envhub_trainer.__file__).parent
MODULES = {f"envhub_trainer.{p.stem}": p for p in sorted(PACKAGE.glob("*.py")) if p.stem != "__init__"}
RAY_PLUMBING = {"ray", "envhub_trainer.ray_rollout", "envhub_trainer.remote_policy"}


def imports(path: Path) -> set[str]:
    """Every module `path` imports: `from a import b` counts as a.b when that is a module of ours."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in MODULES else node.module)
    return found


def graph() -> dict[str, set[str]]:
    return {name: {m for m in imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}


def reachable(start: str, edges: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in edges.get(todo.pop(), set()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_no_import_cycle_between_the_trainers_modules() -> None:
    edges = graph()
    cycles = sorted(name for name in edges if name in reachable(name, edges))
    assert not cycles, f"modules on an import cycle: {cycles}"


def test_the_algorithm_never_imports_the_ray_plumbing() -> None:
    """grpo.py, and all it imports, stays clear of Ray but for `engine_factory.py`'s lazy choice."""
    edges = {name: targets for name, targets in graph().items() if name != "envhub_trainer.engine_factory"}
    clear = {"envhub_trainer.grpo"} | reachable("envhub_trainer.grpo", edges) - {
        "envhub_trainer.engine_factory"
    }
    offenders = sorted(
        f"{name} imports {target}" for name in clear for target in imports(MODULES[name]) & RAY_PLUMBING
    )
    assert not offenders, offenders
    assert "envhub_trainer.ray_rollout" not in reachable("envhub_trainer.remote_policy", graph())


def test_the_reader_sees_lazy_imports(tmp_path: Path) -> None:
    """The reader itself: an import inside a function is seen, or the rules above could pass by not
    looking."""
    module = tmp_path / "fake.py"
    module.write_text("def run():\n    from envhub_trainer.ray_rollout import RayEngine\n    import ray\n")
    assert imports(module) == {"envhub_trainer.ray_rollout", "ray"}
