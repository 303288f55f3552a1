"""The floor plan of envhub, as data: every part of envhub, the plugins and the trainer, in layers.

`tests/architecture/test_import_graph.py` reads every import of every module (lazy and `TYPE_CHECKING`
ones included) and checks it against this table, and docs/architecture.md's layer table is rendered
from it (`python -m envhub.layers --write`), so the plan the docs show is the plan the code obeys.

The rules, for a module of a part in layer L importing a module of a part in layer M:

- M is L itself (parts of one layer may import each other, unless the layer says `siblings=False`), or
  M is in L's `may_import`, which names only layers below L;
- no import cycle anywhere, whatever the layers say (a lazy import that dodges a cycle is the cycle);
- an import that breaks either rule today is listed below, in `KNOWN_UPWARD` or `KNOWN_CYCLES`, with why
  it is there and what removes it. The list only shrinks: the test fails on a violation that is not listed
  and on a listed one that is gone, so whoever removes one deletes its entry in the same commit.

A part is a dotted module prefix: a module belongs to the longest part that is it or contains it, except
that the part `envhub` (the package's `__init__`, the public names) contains only itself.

Hand-written rather than import-linter's layers contract: the table also renders the docs and carries
each layer's reason, and the reader in the test is thirty lines of `ast`, checked by its own test.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Layer:
    """One row of the plan: its parts, the lower layers they may import, and why it sits where it does."""

    name: str
    parts: tuple[str, ...]
    may_import: tuple[str, ...]
    why: str
    siblings: bool = True
    """Whether the parts of this layer may import each other (plugins may not: each stands alone)."""


@dataclass(frozen=True)
class KnownUpward:
    """An import that runs upward today: the importing module, the imported one, and what removes it."""

    module: str
    imports: str
    why: str
    removed_by: str


@dataclass(frozen=True)
class KnownCycle:
    """Modules that import each other today (one strongly connected set), and what removes the circle."""

    modules: frozenset[str]
    why: str
    removed_by: str


_CONTRACT = "contract"
_PLUMBING = "plumbing"
_AUTHORING = "authoring"
_SANDBOXES = "sandboxes"
_GRADERS = "graders"
_POLICIES = "policies"
_STORE = "store"
_REGISTRY = "registry"
_FORMATS = "formats"
_ADAPTERS = "adapters"
_PUBLIC = "public names"
_LOCK = "lock"
_SERVE = "serve"
_RUNNER = "runner"
_TESTING = "test support"
_CLI = "command line"
_PLUGIN_BASES = "plugin bases"
_PLUGINS = "plugins"
_TRAINER = "trainer"

_LIBRARY = (
    _CONTRACT,
    _PLUMBING,
    _AUTHORING,
    _SANDBOXES,
    _GRADERS,
    _POLICIES,
    _STORE,
    _REGISTRY,
    _FORMATS,
    _ADAPTERS,
    _PUBLIC,
    _LOCK,
    _SERVE,
    _RUNNER,
)
_ENVHUB = (*_LIBRARY, _TESTING, _CLI)

LAYERS: tuple[Layer, ...] = (
    Layer(
        _CONTRACT,
        (
            "envhub.messages",
            "envhub.tools",
            "envhub.author_code",
            "envhub.text_format",
            "envhub.env_spec",
            "envhub.core",
            "envhub.ids",
            "envhub.records",
            "envhub.record",
            "envhub.record.calls",
            "envhub.record.scope",
            "envhub.record.tape",
            "envhub.trace",
            "envhub.wrappers",
            "envhub.settings",
            "envhub.reward_marker",
        ),
        (),
        "What an episode is (messages, tools, `Env`, specs, ids, records), the wrappers that hold any "
        "`Env` to its rules and the `ENVHUB_*` settings every part reads, said without any machinery, so "
        "every other part can name it and none of it changes when a backend or a runner does. "
        "`envhub.records` is the episode's record; the tape an episode may carry is `envhub.record`'s "
        "(its types, and the tape that knows no sandbox), here because an `Episode` holds its recording "
        "and `make()`'s wrappers record.",
    ),
    Layer(
        _PLUMBING,
        ("envhub.inference", "envhub.sync_loop", "envhub.websocket"),
        (_CONTRACT,),
        "What every model caller and every synchronous driver shares: the retrying HTTP client, "
        "micro-batching, chat templates, the tensor thread, the one background event loop, the one "
        "websocket connection (its message cap) that every remote-env client opens. No env, sandbox or "
        "runner in it.",
    ),
    Layer(
        _AUTHORING,
        ("envhub.authoring",),
        (_CONTRACT,),
        "The bases an author subclasses (`SingleTurnEnv`, `MultiTurnEnv`, `ToolEnv`, `@reward`): an env "
        "is written against the contract alone; sandboxes and recording are given to it, not imported.",
    ),
    Layer(
        _SANDBOXES,
        ("envhub.sandbox", "envhub.sandbox.fleet", "envhub.record.sandbox_calls", "envhub.record.stand_in"),
        (_CONTRACT,),
        "The `Sandbox` contract and its backends (bubblewrap, Docker, E2B, the fleet that shares them "
        "across processes, the owner leases every reaper judges by), the tape's hooks in them and the "
        "stand-in a replay gets: isolation knows nothing of episodes beyond the contract's records.",
    ),
    Layer(
        _GRADERS,
        ("envhub.grading", "envhub.rewards"),
        (_CONTRACT, _PLUMBING, _SANDBOXES),
        "Graders run outside the agent's reach: hidden tests in a fresh sandbox, hedged runs, LLM judges "
        "and reward models over the inference plumbing. They stand on sandboxes, never on an env's code.",
    ),
    Layer(
        _POLICIES,
        ("envhub.policies",),
        (_CONTRACT, _PLUMBING),
        "Who acts in an episode (oracle, random, scripted, human, OpenAI-protocol and local models): a "
        "policy sees messages and tools, so it needs the contract and the model plumbing only.",
    ),
    Layer(
        _STORE,
        ("envhub.store",),
        (_CONTRACT, _PLUMBING),
        "Episode storage (Parquet schema, shards, journal, manifest, readers, export): it stores the "
        "contract's records, so a stored batch reads back without the runner that wrote it.",
    ),
    Layer(
        _REGISTRY,
        ("envhub.registration", "envhub.index", "envhub.registry_yaml"),
        (_CONTRACT,),
        "`make`, `register` and the index of first-party ids: resolving an id must reach nothing but the "
        "contract (no lock, sandbox or server), so everything above can make envs and nothing below "
        "needs to.",
    ),
    Layer(
        _FORMATS,
        (
            "envhub.integrations",
            "envhub.integrations.harbor",
            "envhub.integrations.openenv",
            "envhub.integrations.verifiers",
        ),
        (_CONTRACT, _PLUMBING, _AUTHORING, _SANDBOXES, _GRADERS),
        "Envs written in other projects' formats (OpenEnv, verifiers, Harbor), built like any env on the "
        "authoring bases; the registry finds them by entry point, so they never import the registry.",
    ),
    Layer(
        _ADAPTERS,
        ("envhub.integrations.gymnasium", "envhub.integrations.trl", "envhub.integrations.skyrl"),
        (_CONTRACT, _PLUMBING, _REGISTRY),
        "Other libraries driving envhub's envs (gymnasium, TRL, SkyRL-Gym): they make envs by id and "
        "drive them synchronously, so they sit on the registry and the shared event loop.",
    ),
    Layer(
        _PUBLIC,
        ("envhub",),
        (_CONTRACT, _AUTHORING, _REGISTRY, _ADAPTERS),
        "`import envhub`: the names an author and a user need, gathered from the layers below, and every "
        "envhub id registered with gymnasium when it is installed. Only parts above may import it.",
    ),
    Layer(
        _LOCK,
        ("envhub.lock",),
        (_CONTRACT, _SANDBOXES, _REGISTRY),
        "Lock files pin what an id resolves to (code, sandbox images): the lock reads the registry and "
        "the sandbox backends, and stamps its hash from above, so resolving an id needs no lock.",
    ),
    Layer(
        _SERVE,
        ("envhub.serve", "envhub.integrations.openenv.routes"),
        (_CONTRACT, _PLUMBING, _REGISTRY, _FORMATS, _LOCK),
        "`envhub serve` and its client (`ws://` ids), its one session class and the connection doors: a "
        "server makes envs by id, and nothing it does is needed to make one. OpenEnv's endpoints live "
        "with OpenEnv's wire in `envhub.integrations.openenv` (one home for OpenEnv both ways) but sit in "
        "this layer, as a thin translation of OpenEnv's frames into the serve session's calls.",
    ),
    Layer(
        _RUNNER,
        (
            "envhub.rollout",
            "envhub.record.seal",
            "envhub.record.replay",
            "envhub.record.rescore",
            "envhub.record.regrade",
            "envhub.report",
            "envhub.display",
            "envhub.checks",
        ),
        (_CONTRACT, _PLUMBING, _SANDBOXES, _POLICIES, _STORE, _REGISTRY, _LOCK, _SERVE),
        "Running episodes and reading them back: the rollout driver and its backends, replay and "
        "rescoring, the HTML report, the terminal display, `envhub check`. It brings together an env "
        "(by id), a policy and the store, and is the first layer to know all three.",
    ),
    Layer(
        _TESTING,
        ("envhub.testing",),
        _LIBRARY,
        "Test doubles for plugin authors (scripted OpenAI-protocol and reward servers, tiny models): "
        "they may use any part of the library, and no library part may use them.",
    ),
    Layer(
        _CLI,
        ("envhub.cli", "envhub.scaffold", "envhub.__main__", "envhub.layers"),
        (*_LIBRARY, _TESTING),
        "The `envhub` command (and `envhub new`'s template, and this plan, run as `python -m "
        "envhub.layers`): the top of the core, free to use everything in it and never a plugin, so the "
        "core installs and runs without any.",
    ),
    Layer(
        _PLUGIN_BASES,
        ("envhub_code", "envhub_browser"),
        _ENVHUB,
        "Plugins that other plugins build on by their public names (humaneval on code's hidden-test "
        "grading, miniwob on browser's Chromium env); like every plugin, any part of envhub, no other "
        "plugin.",
        siblings=False,
    ),
    Layer(
        _PLUGINS,
        (
            "envhub_desktop",
            "envhub_games",
            "envhub_gym_text",
            "envhub_humaneval",
            "envhub_miniwob",
            "envhub_reasoning_gym",
            "envhub_swe",
            "envhub_textarena",
            "envhub_tools",
            "envhub_vision",
        ),
        (*_ENVHUB, _PLUGIN_BASES),
        "Environment families, each packaged exactly as a third-party plugin (`envs/*`): any part of "
        "envhub (commands may use `envhub.cli.app`'s console and errors) and the plugin bases, never "
        "each other.",
        siblings=False,
    ),
    Layer(
        _TRAINER,
        ("envhub_trainer",),
        _ENVHUB,
        "The GRPO trainer (`trainer/`, torch): it drives rollouts through the runner like any user, and "
        "no env, plugin or core part depends on it.",
    ),
)
"""The layers, lowest first. A new part gets its row here before its code lands."""


KNOWN_UPWARD: tuple[KnownUpward, ...] = ()
"""Imports that break the table today: the worklist of issue 30. Only ever shrinks."""


KNOWN_CYCLES: tuple[KnownCycle, ...] = ()
"""Import cycles today, each as its strongly connected set of modules. Only ever shrinks."""


def layer_named(name: str) -> Layer:
    """The layer called `name` (KeyError naming the known ones otherwise)."""
    for layer in LAYERS:
        if layer.name == name:
            return layer
    raise KeyError(f"no layer {name!r}; the layers are {[layer.name for layer in LAYERS]}")


def part_of(module: str) -> str | None:
    """The part a module belongs to: the longest part that is it or contains it (`envhub` only itself)."""
    best: str | None = None
    for layer in LAYERS:
        for part in layer.parts:
            inside = module == part or (part != "envhub" and module.startswith(part + "."))
            if inside and (best is None or len(part) > len(best)):
                best = part
    return best


def layer_of(module: str) -> Layer | None:
    """The layer of the part a module belongs to, or None for a module no row names."""
    part = part_of(module)
    return next((layer for layer in LAYERS if part in layer.parts), None)


def may_import(module: str, target: str) -> bool:
    """Whether the table lets `module` import `target` (both mapped; one's own part always may)."""
    source, dest = part_of(module), part_of(target)
    here, there = layer_of(module), layer_of(target)
    if source is None or dest is None or here is None or there is None:
        return False
    if source == dest:
        return True
    if here == there:
        return here.siblings
    return there.name in here.may_import


def render_markdown() -> str:
    """The layer table as docs/architecture.md shows it, between its markers."""
    rows = [
        "| layer | parts | may import | why it sits there |",
        "|---|---|---|---|",
    ]
    for position, layer in enumerate(LAYERS):
        below = tuple(other.name for other in LAYERS[:position])
        if not layer.may_import:
            may = "nothing (only itself)"
        elif layer.may_import == below and len(below) > 3:
            may = "every layer below"
        elif layer.may_import == below[: len(layer.may_import)] and len(layer.may_import) > 3:
            may = f"every layer up to {layer.may_import[-1]}"
        else:
            may = ", ".join(layer.may_import)
        parts = ", ".join(f"`{part}`" for part in layer.parts)
        if not layer.siblings:
            parts += " (each alone: never one another)"
        rows.append(f"| {layer.name} | {parts} | {may} | {layer.why} |")
    rows.append("")
    rows.append(
        "Known upward imports (issue 30's worklist; each removal deletes its entry):"
        if KNOWN_UPWARD
        else "Known upward imports: none."
    )
    rows.append("")
    rows.extend(f"- `{known.module}` → `{known.imports}`: {known.removed_by}" for known in KNOWN_UPWARD)
    rows.append("")
    rows.append("Known import cycles:" if KNOWN_CYCLES else "Known import cycles: none.")
    rows.append("")
    rows.extend(
        f"- {' ↔ '.join(f'`{name}`' for name in sorted(cycle.modules))}: {cycle.removed_by}"
        for cycle in KNOWN_CYCLES
    )
    return "\n".join(rows) + "\n"


BEGIN = "<!-- layers: begin (generated by `python -m envhub.layers --write` from envhub/layers.py) -->"
END = "<!-- layers: end -->"
DOC = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


def with_table(doc: str) -> str:
    """`doc` with the text between the markers replaced by the rendering (ValueError without markers)."""
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        raise ValueError(f"docs/architecture.md has no {BEGIN!r} ... {END!r} markers to write between")
    return doc[: start + len(BEGIN)] + "\n\n" + render_markdown() + "\n" + doc[end:]


def main(argv: list[str] | None = None) -> int:
    """`--markdown` prints the table; `--write` puts it into docs/architecture.md (in a checkout)."""
    parser = argparse.ArgumentParser(prog="python -m envhub.layers", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the table into docs/architecture.md")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown (default)")
    args = parser.parse_args(argv)
    if args.write:
        if not DOC.is_file():
            print(f"{DOC} not found: --write works in a checkout of envhub", file=sys.stderr)
            return 1
        DOC.write_text(with_table(DOC.read_text()))
        print(f"wrote the layer table into {DOC}")
        return 0
    sys.stdout.write(render_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
