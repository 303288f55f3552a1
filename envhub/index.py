"""`registry.yaml`: the hub's index of first-party environment ids, read with line numbers for errors,
and the catalog each plugin declares, from which `python -m envhub.registry_yaml --write` writes it.

The index names environments whose packages may not be installed, so that `make` can tell a user which
package to install, and `envhub list` can show the whole hub. It is no second source: each plugin
package declares its ids' catalog data (description, sandbox, data source, tags, or the outside
collection it brings) in a `Catalog`, named by its `envhub.catalog` entry point, and the file is that
data for the hub's own packages (the projects under `envs/`), with each id's package, entry point and
versions read from the installed distributions. tests/registry/test_registry_yaml.py fails when they
differ.
"""

from __future__ import annotations

import functools
from importlib import metadata, resources
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from envhub.ids import EnvId, parse_env_id

SandboxKind = Literal["none", "local", "docker", "e2b", "browser"]
"""Which sandbox an env runs its code in; declared once, on its registration (envhub.registration)."""
SANDBOX_KINDS: tuple[str, ...] = get_args(SandboxKind)

CATALOG_GROUP = "envhub.catalog"
"""The entry-point group where a plugin package names its `Catalog` (`"envhub_games" = "module:CATALOG"`)."""

_ENV_FIELDS = "package, entry_point, versions, description, default_sandbox, data_source, tags"


class RegistryIndexError(ValueError):
    """registry.yaml is malformed; the message names the file, the line and the field."""


def _unversioned(name: str) -> str:
    if parse_env_id(name).version is not None:
        raise ValueError("index keys are unversioned names; list the versions under `versions`")
    return name


class EnvCard(BaseModel):
    """What a plugin declares about one env family (all its versions): the catalog data of its row."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str
    default_sandbox: SandboxKind = "none"
    """The sandbox the env runs its code in: its registration's `sandbox` (`envhub.registration`)."""
    data_source: str = "procedural"
    tags: list[str] = Field(default_factory=list)


class IndexEntry(BaseModel):
    """A row of registry.yaml: where a family's ids come from, then its card's fields (`EnvCard`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    package: str
    entry_point: str = Field(pattern=r"^[\w.]+:[\w.]+$")
    versions: list[int] = Field(min_length=1)
    description: str
    default_sandbox: SandboxKind = "none"
    data_source: str = "procedural"
    tags: list[str] = Field(default_factory=list)

    @field_validator("versions")
    @classmethod
    def _non_negative(cls, versions: list[int]) -> list[int]:
        if any(v < 0 for v in versions):
            raise ValueError("versions are non-negative integers, e.g. [0, 1]")
        return sorted(versions)

    @property
    def newest(self) -> int:
        return self.versions[-1]


class CollectionCard(BaseModel):
    """A plugin package that brings a whole outside collection (hundreds of ids) under one namespace.

    Its ids are the package's own entry points, generated from the upstream package's list, so the index
    names the collection once instead of repeating every id; `make` still tells a user which package to
    install for any id of the namespace.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ids: str = Field(pattern=r"^[\w.-]+/")
    """The id pattern, its namespace first: `reasoning-gym/<dataset>-v0`."""
    upstream: str = Field(pattern=r"^[\w.-]+==[\w.]+$")
    """The published package that holds the data and the scoring code, pinned: `textarena==0.7.4`."""
    licence: str
    description: str
    default_sandbox: SandboxKind = "none"
    tags: list[str] = Field(default_factory=list)

    @property
    def namespace(self) -> str:
        return self.ids.split("/", 1)[0]


class SourceEntry(BaseModel):
    """A row of registry.yaml's `sources`: the package that brings an outside collection, then the
    collection's card's fields (`CollectionCard`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    package: str
    ids: str = Field(pattern=r"^[\w.-]+/")
    upstream: str = Field(pattern=r"^[\w.-]+==[\w.]+$")
    licence: str
    description: str
    default_sandbox: SandboxKind = "none"
    tags: list[str] = Field(default_factory=list)

    @property
    def namespace(self) -> str:
        return self.ids.split("/", 1)[0]


class Catalog(BaseModel):
    """What one plugin package declares about its ids, named by its `envhub.catalog` entry point: a
    card per env family (`envs`, keyed by unversioned name) and/or the outside collection it brings.
    The registry reads each id's sandbox from it; registry.yaml is written from it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    envs: dict[Annotated[str, AfterValidator(_unversioned)], EnvCard] = Field(default_factory=dict)
    collection: CollectionCard | None = None

    def sandbox_of(self, env_id: EnvId) -> SandboxKind:
        """The sandbox this catalog declares for an id: its family's card, else its collection's."""
        card = self.envs.get(env_id.family)
        if card is not None:
            return card.default_sandbox
        if self.collection is not None and env_id.namespace == self.collection.namespace:
            return self.collection.default_sandbox
        return "none"

    def data_source_of(self, env_id: EnvId) -> str | None:
        """Where an id's data comes from: its family's card, else its collection's pinned upstream."""
        card = self.envs.get(env_id.family)
        if card is not None:
            return card.data_source
        if self.collection is not None and env_id.namespace == self.collection.namespace:
            return self.collection.upstream
        return None


class RegistryIndex(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = Field(alias="schema")
    envs: dict[Annotated[str, AfterValidator(_unversioned)], IndexEntry]
    sources: dict[str, SourceEntry] = Field(default_factory=dict)

    def source_of(self, namespace: str | None) -> SourceEntry | None:
        """The outside collection that owns a namespace, if any."""
        return next((s for s in self.sources.values() if s.namespace == namespace), None)

    def ids(self) -> dict[str, IndexEntry]:
        """Every versioned id the index declares, e.g. `arithmetic-v0`."""
        return {f"{name}-v{v}": entry for name, entry in self.envs.items() for v in entry.versions}


def _key_lines(node: yaml.Node, path: tuple[str, ...], lines: dict[tuple[str, ...], int]) -> None:
    """Record the line of every key path in a YAML node tree, so errors can point at it."""
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            _key_lines(value_node, (*path, str(key_node.value)), lines)
            lines[(*path, str(key_node.value))] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _key_lines(item, (*path, str(i)), lines)


def load_index(path: Path) -> RegistryIndex:
    """Read and validate an index file; every problem names file, line and field."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise RegistryIndexError(f"{path}: cannot read the registry index: {exc.strerror}") from exc
    try:
        data = _parse(text)
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else "?"
        raise RegistryIndexError(f"{path}:{line}: not valid YAML: {exc.problem}") from exc
    if not isinstance(data, dict):
        raise RegistryIndexError(f"{path}:1: the index must be a mapping with keys 'schema' and 'envs'")
    try:
        return RegistryIndex.model_validate(data)
    except ValidationError as exc:
        # Composed for the message alone: in pure Python it costs ~40 ms, which a valid index (every
        # `import envhub` reads one) never needs.
        lines: dict[tuple[str, ...], int] = {}
        if (root := yaml.compose(text)) is not None:
            _key_lines(root, (), lines)
        raise RegistryIndexError("\n".join(_describe(path, err, lines) for err in exc.errors())) from exc


_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's safe loader in C (libyaml) where PyYAML was built with it; the same documents either way."""


def _parse(text: str) -> Any:
    """The document, read by libyaml where it can be; a broken one is read again by PyYAML's own parser,
    which words its errors as users of PyYAML know them (libyaml's say the same thing differently)."""
    try:
        return yaml.load(text, Loader=_LOADER)  # a safe loader (CSafeLoader or SafeLoader)
    except yaml.YAMLError:
        if _LOADER is yaml.SafeLoader:
            raise
        return yaml.safe_load(text)


def _describe(path: Path, err: Any, lines: dict[tuple[str, ...], int]) -> str:
    loc = tuple(str(part) for part in err["loc"])
    known = loc
    while known and known not in lines:
        known = known[:-1]
    field = ".".join(loc) or "(top level)"
    hint = ""
    if err["type"] == "missing":
        hint = f" (each env needs: {_ENV_FIELDS})" if len(loc) == 3 and loc[0] == "envs" else ""
    elif err["type"] == "extra_forbidden":
        hint = f" (known fields: {_ENV_FIELDS})" if len(loc) == 3 and loc[0] == "envs" else ""
    return f"{path}:{lines.get(known, 1)}: {field}: {err['msg']}{hint}"


def index_path() -> Path:
    """The installed copy of registry.yaml, or the repository's own in a development checkout."""
    packaged = resources.files("envhub").joinpath("registry.yaml")
    if packaged.is_file():
        return Path(str(packaged))
    return Path(__file__).resolve().parent.parent / "registry.yaml"


@functools.cache
def default_index() -> RegistryIndex | None:
    """The hub's own index, or None when this installation carries none."""
    path = index_path()
    return load_index(path) if path.is_file() else None


def plugin_catalog(distribution: str) -> Catalog | None:
    """The catalog an installed distribution names by its `envhub.catalog` entry point (importing its
    module), or None when it names none. Raises what the import raises: the caller says whose it was."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return None
    ep = next(iter(dist.entry_points.select(group=CATALOG_GROUP)), None)
    if ep is None:
        return None
    catalog = ep.load()
    if not isinstance(catalog, Catalog):
        raise TypeError(
            f"the {CATALOG_GROUP} entry point {ep.value!r} of {distribution} names a "
            f"{type(catalog).__name__}, not an envhub.index.Catalog"
        )
    return catalog
