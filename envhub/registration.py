"""The registry: ids to environment factories, filled by `register()` and by plugin entry points.

Plugins declare environments in the entry-point group `envhub.envs` (`"name-vN" = "module:Class"`).
They are discovered on first use but imported only when one of their ids is made, so one broken plugin
cannot stop the others from working, and `envhub list` stays fast. A package says what its ids are, and
which sandbox each runs its code in, in its catalog (the group `envhub.catalog`, `envhub.index.Catalog`),
read when one of its ids is resolved; registry.yaml is written from the same catalogs.

A plugin that wraps an open-ended catalogue (every gymnasium env a user has installed) claims a whole
namespace instead, in the group `envhub.namespaces` (`"gym" = "module:factory_for"`): an id of that
namespace that no `envhub.envs` entry names is resolved by calling `factory_for("FrozenLake-v1")`, which
returns a factory or None. `gym:FrozenLake-v1` is read as `gym/FrozenLake-v1`, the form users of other
hubs type. Such ids are made on demand, so `envhub list` shows only the ones declared statically.

An env served elsewhere is named by a URL (`ws://host:port/ID`), made by a scheme plugin, in the group
`envhub.schemes` (`"ws" = "module:resolver"`, an object with `make` and `spec`, `SchemeResolver`):
envhub's own `envhub serve` client registers itself there for ws, wss, http and https, so the registry
imports nothing of it. Such an id, too, is its own spec.

Envs written in another project's format (an OpenEnv server, a verifiers package, a Harbor task folder)
are made by a format plugin, in the group `envhub.formats` (`"harbor" = "module:make_env"`): the id
`harbor:PATH` is built by `make_env("PATH", max_turns=..., **kwargs)`. Such an id names no
registration: it is its own spec, and every backend passes it on unchanged.

Options are checked when `make` is called, the same way for every kind of id: keywords the factory's
signature does not take are refused, naming those it does (`EnvSpec.options`; a URL id's client reads
them from the server's spec). A factory that takes any keyword checks its own.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from importlib import metadata
from typing import Any, Protocol

from envhub.core import Env, EnvSpec, Provenance
from envhub.env_spec import refuse_unknown_options
from envhub.ids import EnvId, InvalidEnvId, parse_env_id
from envhub.index import SANDBOX_KINDS, Catalog, RegistryIndex, SandboxKind, default_index, plugin_catalog
from envhub.wrappers import apply_wrappers

ENTRY_POINT_GROUP = "envhub.envs"
NAMESPACE_GROUP = "envhub.namespaces"
FORMAT_GROUP = "envhub.formats"
SCHEME_GROUP = "envhub.schemes"

EnvFactory = Callable[..., Env]


class SchemeResolver(Protocol):
    """What a scheme plugin names: how an id such as `ws://host:port/ID` is made, and its spec."""

    def make(self, env_id: str, *, max_turns: int | None, kwargs: dict[str, Any]) -> Env: ...

    def spec(self, env_id: str) -> EnvSpec: ...


class UnknownEnvError(KeyError):
    """No installed plugin or `register()` call provides this id."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0])


class PluginImportError(ImportError):
    """A plugin's entry point failed to import; the message carries the plugin's own traceback."""


class DuplicateEnvError(ValueError):
    """Two sources claim the same environment id."""


@dataclass(frozen=True)
class Registration:
    """One registered id: what builds it and where the registration came from."""

    env_id: EnvId
    entry_point: str | EnvFactory
    origin: str
    """Who registered it: `plugin <distribution>` or `register() in <module>`, used in error messages."""
    package: str | None = None
    package_version: str | None = None
    max_turns: int | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    sandbox: SandboxKind = "none"
    """The sandbox the env runs its code in unless its `backend` option names another (`sandbox_kind`):
    given to `register()`, or for a plugin's id declared in its package's catalog (`envhub.catalog`
    entry point, `envhub.index.Catalog`), read when the id is resolved."""

    @property
    def id(self) -> str:
        return str(self.env_id)

    @property
    def entry_point_text(self) -> str:
        if isinstance(self.entry_point, str):
            return self.entry_point
        return f"{self.entry_point.__module__}:{self.entry_point.__qualname__}"


class Registry:
    """All known environments. The module-level `make`/`register` use one shared instance."""

    def __init__(self, index: RegistryIndex | None = None, *, discover_plugins: bool = True) -> None:
        self.index = index
        self._registrations: dict[str, Registration] = {}
        self._conflicts: dict[str, list[Registration]] = {}
        self._discover = discover_plugins
        self._discovered = False
        self._catalogs: dict[str, Catalog | None] = {}
        self._declared: set[str] = set()
        self.malformed: dict[str, str] = {}
        """Entry points skipped because their name is not an env id, with the reason (for `envhub list`)."""

    def register(
        self,
        env_id: str,
        entry_point: str | EnvFactory,
        *,
        max_turns: int | None = None,
        kwargs: dict[str, Any] | None = None,
        override: bool = False,
        sandbox: SandboxKind = "none",
    ) -> Registration:
        """Register an environment under `env_id`; `entry_point` is a factory or `"module:attr"`;
        `sandbox` is the one it runs its code in (the runner's `backend_concurrency` caps count it)."""
        parsed = parse_env_id(env_id)
        if sandbox not in SANDBOX_KINDS:
            raise ValueError(
                f"unknown sandbox {sandbox!r} for {env_id!r}; choose one of {', '.join(SANDBOX_KINDS)}"
            )
        module = entry_point.split(":")[0] if isinstance(entry_point, str) else entry_point.__module__
        registration = Registration(
            parsed,
            entry_point,
            origin=f"register() in {module}",
            max_turns=max_turns,
            kwargs=kwargs or {},
            sandbox=sandbox,
        )
        existing = self._registrations.get(str(parsed))
        if existing is not None and not override:
            raise DuplicateEnvError(
                f"environment id {str(parsed)!r} is already registered by {existing.origin} "
                f"({existing.entry_point_text}); pick another id or pass override=True to replace it"
            )
        self._registrations[str(parsed)] = registration
        return registration

    def _discover_plugins(self) -> None:
        if self._discovered or not self._discover:
            return
        self._discovered = True
        # A distribution's name and version parse its METADATA file on every access, and one package
        # declares hundreds of ids (envs/*: 496 entry points in 12 packages): read once per package.
        packages: dict[metadata.Distribution, tuple[str, str | None]] = {}
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist
            if dist is None:
                package, package_version = "unknown distribution", None
            else:
                if dist not in packages:  # the entry points of one package share its object
                    packages[dist] = (dist.name, dist.version)
                package, package_version = packages[dist]
            try:
                env_id = parse_env_id(ep.name)
            except InvalidEnvId as exc:  # one plugin's bad name must not hide every other env
                self.malformed[ep.name] = f"plugin {package} declares {ep.name!r}: {exc}"
                continue
            registration = Registration(
                env_id,
                ep.value,
                origin=f"plugin {package}",
                package=package,
                package_version=package_version,
            )  # its sandbox is read from the package's catalog when the id is resolved (`_declare`)
            existing = self._registrations.get(registration.id)
            if existing is not None and existing.origin != registration.origin:
                self._conflicts.setdefault(registration.id, [existing]).append(registration)
                continue
            self._registrations[registration.id] = registration

    def _catalog(self, package: str | None) -> Catalog | None:
        """A plugin package's catalog, read once; None when it names none, or its catalog fails to
        import (then making its ids fails too, and says why)."""
        if package is None:
            return None
        if package not in self._catalogs:
            try:
                self._catalogs[package] = plugin_catalog(package)
            except Exception:  # one plugin's broken catalog must not stop resolving any other id
                self._catalogs[package] = None
        return self._catalogs[package]

    def _catalog_sandbox(self, package: str, env_id: EnvId) -> SandboxKind:
        """The sandbox a plugin package's catalog declares for one of its ids ("none" without one)."""
        catalog = self._catalog(package)
        return catalog.sandbox_of(env_id) if catalog is not None else "none"

    def _declare(self, registration: Registration) -> Registration:
        """A plugin's registration with the sandbox its package's catalog declares, read once: lazily,
        since the catalog is the plugin's own module and discovery imports no plugin."""
        if registration.package is None or registration.id in self._declared:
            return registration
        self._declared.add(registration.id)
        sandbox = self._catalog_sandbox(registration.package, registration.env_id)
        if sandbox != registration.sandbox:
            registration = replace(registration, sandbox=sandbox)
            if self._registrations.get(registration.id) is not None:
                self._registrations[registration.id] = registration
        return registration

    def registrations(self) -> dict[str, Registration]:
        self._discover_plugins()
        return dict(self._registrations)

    def conflicts(self) -> dict[str, list[Registration]]:
        self._discover_plugins()
        return dict(self._conflicts)

    def resolve(self, env_id: str) -> Registration:
        """The registration an id means; unversioned ids mean the newest version."""
        self._discover_plugins()
        wanted = parse_env_id(self._namespace_form(env_id))
        if str(wanted) not in self._registrations and wanted.namespace is not None:
            dynamic = self._from_namespace(wanted)
            if dynamic is not None:
                return dynamic
        if wanted.version is None and str(wanted) not in self._registrations:
            versions = [r for r in self._registrations.values() if r.env_id.family == wanted.family]
            if versions:
                return self._declare(max(versions, key=lambda r: r.env_id.version or -1))
        registration = self._registrations.get(str(wanted))
        if registration is None:
            raise UnknownEnvError(self._unknown_message(wanted))
        if registration.id in self._conflicts:
            claims = "\n".join(
                f"  - {r.origin}: {r.id} = {r.entry_point_text}" for r in self._conflicts[registration.id]
            )
            raise DuplicateEnvError(
                f"environment id {registration.id!r} is provided by more than one plugin:\n{claims}\n"
                "uninstall one of them, or ask its author to use a namespace ('acme/name-v0')"
            )
        return self._declare(registration)

    @staticmethod
    def _namespace_form(env_id: str) -> str:
        """`gym:FrozenLake-v1` → `gym/FrozenLake-v1` when `gym` names a namespace plugin."""
        prefix, colon, rest = env_id.partition(":")
        if colon and "/" not in prefix and _namespace_entry_point(prefix) is not None:
            return f"{prefix}/{rest}"
        return env_id

    def _from_namespace(self, wanted: EnvId) -> Registration | None:
        """The registration a namespace plugin makes for an id it knows, or None."""
        assert wanted.namespace is not None
        ep = _namespace_entry_point(wanted.namespace)
        if ep is None:
            return None
        package = ep.dist.name if ep.dist else "unknown distribution"
        origin = f"plugin {package} (namespace {wanted.namespace})"
        lookup: Callable[[str], EnvFactory | None] = self._load(  # type: ignore[assignment]
            Registration(wanted, ep.value, origin=origin, package=package)
        )
        name = str(wanted).removeprefix(f"{wanted.namespace}/")
        try:
            factory = lookup(name)
        except Exception as exc:
            raise PluginImportError(
                f"the namespace plugin {ep.value!r} from {origin} failed on {name!r}: "
                f"{type(exc).__name__}: {exc}\n"
                "Fix or reinstall that plugin; other environments are unaffected."
            ) from exc
        if factory is None:
            return None
        version = ep.dist.version if ep.dist else None
        registration = Registration(
            wanted,
            factory,
            origin=origin,
            package=package,
            package_version=version,
            sandbox=self._catalog_sandbox(package, wanted),
        )
        self._registrations[registration.id] = registration
        return registration

    def _unknown_message(self, wanted: EnvId) -> str:
        known = set(self._registrations)
        index_ids = self.index.ids() if self.index else {}
        lines = [f"no environment {str(wanted)!r} is registered."]
        entry = self.index.envs.get(wanted.family) if self.index else None
        source = self.index.source_of(wanted.namespace) if self.index else None
        if source is not None and not any(
            r.env_id.namespace == wanted.namespace for r in self._registrations.values()
        ):
            lines.append(
                f"Ids {source.ids} come from {source.upstream.split('==')[0]} through the package "
                f"{source.package!r}, which is not installed: pip install {source.package}"
            )
        if entry is not None:
            installed = any(r.env_id.family == wanted.family for r in self._registrations.values())
            if installed:
                lines.append(f"Known versions of {wanted.family!r}: {entry.versions}.")
            else:
                lines.append(
                    f"It is provided by the package {entry.package!r}, which is not installed: "
                    f"pip install {entry.package}"
                )
        close = difflib.get_close_matches(str(wanted), sorted(known | set(index_ids)), n=3, cutoff=0.5)
        if close:
            lines.append(f"Did you mean: {', '.join(close)}?")
        lines.append("Run `envhub list` to see every environment.")
        return " ".join(lines)

    def spec(self, env_id: str) -> EnvSpec:
        """The spec `make(env_id)` would give, without building the environment (a URL asks its server)."""
        scheme = scheme_of(env_id)
        if scheme is not None:
            return _scheme_resolver(scheme).spec(env_id)
        found = format_of(env_id)
        if found is not None:
            factory_of_format = _format_factory(found[0], strict=False)
            return _format_spec(env_id, found[0], found[1], {}, None, factory_of_format)
        registration = self.resolve(env_id)
        try:
            factory: EnvFactory | None = self._load(registration)
        except PluginImportError:  # `make` says why; the spec itself needs no import
            factory = None
        return self._spec(registration, {}, registration.max_turns, factory)

    def make(self, env_id: str, *, max_turns: int | None = None, **kwargs: Any) -> Env:
        """Build a fresh environment, in the wrappers that keep its turn limit and turn order for any
        env (`envhub.wrappers`); keyword arguments go to its constructor (or, for a URL such as
        `ws://host:port/ID`, to the env `envhub serve` makes there)."""
        return apply_wrappers(self._build(env_id, max_turns=max_turns, **kwargs))

    def _build(self, env_id: str, *, max_turns: int | None = None, **kwargs: Any) -> Env:
        """The env `make` wraps."""
        scheme = scheme_of(env_id)
        if scheme is not None:
            return _scheme_resolver(scheme).make(env_id, max_turns=max_turns, kwargs=kwargs)
        found = format_of(env_id)
        if found is not None:
            return _make_format(env_id, *found, max_turns=max_turns, kwargs=kwargs)
        registration = self.resolve(env_id)
        factory = self._load(registration)
        refuse_unknown_options(registration.id, kwargs, factory_options(factory), at="make")
        env = factory(**{**registration.kwargs, **kwargs})
        if not isinstance(env, Env):
            raise TypeError(
                f"{registration.entry_point_text} (from {registration.origin}) built a "
                f"{type(env).__name__}, not an envhub.Env; point the entry point at an Env subclass"
            )
        turns = max_turns if max_turns is not None else registration.max_turns
        if turns is not None:
            if turns < 1:
                raise ValueError(f"max_turns must be at least 1, got {turns}")
            env.max_turns = turns
        env.spec = self._spec(registration, kwargs, env.max_turns, factory)
        return env

    def _spec(
        self,
        registration: Registration,
        kwargs: dict[str, Any],
        max_turns: int | None,
        factory: EnvFactory | None,
    ) -> EnvSpec:
        catalog = self._catalog(registration.package)
        return EnvSpec(
            id=registration.id,
            namespace=registration.env_id.namespace,
            name=registration.env_id.name,
            version=registration.env_id.version,
            max_turns=max_turns,
            env_kwargs={**registration.kwargs, **kwargs},
            options=None if factory is None else factory_options(factory),
            reset_options=None if factory is None else factory_reset_options(factory),
            provenance=Provenance(
                package=registration.package,
                package_version=registration.package_version,
                entry_point=registration.entry_point_text,
                data_source=catalog.data_source_of(registration.env_id) if catalog else None,
                default_sandbox=registration.sandbox,
            ),  # no lock_hash: it reads every file of the plugin; envhub.lock.stamp adds it when asked
        )

    def unavailable_reason(self, env_id: str) -> str | None:
        """Why `env_id` cannot be played here, as its class says (`Env.unavailable_reason`), without
        making it; None when it can. A factory that is not an Env class is taken to be playable."""
        factory = self._load(self.resolve(env_id))
        if isinstance(factory, type) and issubclass(factory, Env):
            return factory.unavailable_reason()
        return None

    def _load(self, registration: Registration) -> EnvFactory:
        if not isinstance(registration.entry_point, str):
            return registration.entry_point
        module_name, _, attr = registration.entry_point.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                target = getattr(target, part)
        except Exception as exc:
            raise PluginImportError(
                f"environment {registration.id!r} from {registration.origin} could not be loaded from "
                f"{registration.entry_point!r}: {type(exc).__name__}: {exc}\n"
                f"The plugin's traceback:\n{traceback.format_exc()}"
                "Fix or reinstall that plugin; other environments are unaffected."
            ) from exc
        if not callable(target):
            raise PluginImportError(
                f"{registration.entry_point!r} from {registration.origin} is not callable; "
                "an entry point must name an Env subclass or a function returning an Env"
            )
        return target  # type: ignore[no-any-return]


def factory_options(factory: Callable[..., Any], *, target: bool = False) -> list[str] | None:
    """The keyword options a factory takes, read from its signature (`max_turns`, which `make` takes
    for every env, aside; with `target`, a format factory's first parameter too); None when it takes
    any keyword, and so checks its own."""
    try:
        parameters = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # a callable without a readable signature: it checks its own
        return None
    if target:
        parameters = parameters[1:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in parameters if p.kind in named and p.name != "max_turns"]


def factory_reset_options(factory: Callable[..., Any]) -> dict[str, str] | None:
    """The reset options an Env class declares (`Env.reset_options`); None for a factory function."""
    if isinstance(factory, type) and issubclass(factory, Env) and factory.reset_options is not None:
        return dict(factory.reset_options)
    return None


def sandbox_kind(declared: str | None, options: Mapping[str, Any]) -> str:
    """The sandbox an env runs in: its `backend` option when that names a sandbox kind (`auto` as
    `envhub.sandbox.open` decides it: e2b with E2B_API_KEY, else local), else the one its registration
    declares (`EnvSpec.provenance.default_sandbox`), else "none". The one rule the runner's and Ray's
    `backend_concurrency` caps, Ray's placement and the lock all read."""
    backend = options.get("backend")
    if backend == "auto":
        backend = "e2b" if os.environ.get("E2B_API_KEY") else "local"
    if isinstance(backend, str) and backend in SANDBOX_KINDS:
        return backend
    return declared if declared in SANDBOX_KINDS else "none"


def format_of(env_id: str) -> tuple[metadata.EntryPoint, str] | None:
    """The format plugin and target of an id such as `harbor:PATH`; None for any other id."""
    prefix, colon, target = env_id.partition(":")
    if not colon or not target or not _FORMAT_NAME.fullmatch(prefix) or scheme_of(env_id) is not None:
        return None
    found = metadata.entry_points(group=FORMAT_GROUP, name=prefix)
    ep = next(iter(found), None)
    return None if ep is None else (ep, target)


def scheme_of(env_id: str) -> metadata.EntryPoint | None:
    """The scheme plugin of a URL id such as `ws://host:port/ID`; None for any other id."""
    scheme, sep, rest = env_id.partition("://")
    if not sep or not rest or not _SCHEME_NAME.fullmatch(scheme):
        return None
    return next(iter(metadata.entry_points(group=SCHEME_GROUP, name=scheme)), None)


def is_external(env_id: str) -> bool:
    """Whether an id is made without a registration (a URL or a format id): it is passed on as given,
    and only the server or the format plugin can check its options."""
    return scheme_of(env_id) is not None or format_of(env_id) is not None


_FORMAT_NAME = re.compile(r"[a-z][a-z0-9_-]*")
_SCHEME_NAME = re.compile(r"[a-z][a-z0-9+.-]*")


def _scheme_resolver(ep: metadata.EntryPoint) -> SchemeResolver:
    """A scheme plugin's resolver; one that fails to import says which plugin and why."""
    try:
        resolver: SchemeResolver = ep.load()
    except Exception as exc:  # e.g. the serve extra missing: the plugin's own message says what to install
        origin = f"plugin {ep.dist.name if ep.dist else 'unknown distribution'}"
        raise PluginImportError(
            f"the URL scheme {ep.name!r} from {origin} could not be loaded from {ep.value!r}: "
            f"{type(exc).__name__}: {exc}\nFix or reinstall that plugin; other environments are unaffected."
        ) from exc
    return resolver


def _make_format(
    env_id: str, ep: metadata.EntryPoint, target: str, *, max_turns: int | None, kwargs: dict[str, Any]
) -> Env:
    factory = _format_factory(ep, strict=True)
    assert factory is not None  # strict: raises instead
    refuse_unknown_options(env_id, kwargs, factory_options(factory, target=True), at="make")
    env = factory(target, max_turns=max_turns, **kwargs)
    if not isinstance(env, Env):
        origin = f"plugin {ep.dist.name if ep.dist else 'unknown distribution'}"
        raise TypeError(f"{ep.value} (from {origin}) built a {type(env).__name__}, not an envhub.Env")
    if max_turns is not None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        env.max_turns = max_turns
    env.spec = _format_spec(env_id, ep, target, kwargs, env.max_turns, factory)
    return env


def _format_factory(ep: metadata.EntryPoint, *, strict: bool) -> Callable[..., Any] | None:
    """A format plugin's factory; a plugin that fails to import raises when `strict`, else gives None."""
    try:
        factory: Callable[..., Any] = ep.load()
    except Exception as exc:
        if not strict:
            return None
        origin = f"plugin {ep.dist.name if ep.dist else 'unknown distribution'}"
        raise PluginImportError(
            f"the format {ep.name!r} from {origin} could not be loaded from {ep.value!r}: "
            f"{type(exc).__name__}: {exc}\nFix or reinstall that plugin; other environments are unaffected."
        ) from exc
    return factory


def _format_spec(
    env_id: str,
    ep: metadata.EntryPoint,
    target: str,
    kwargs: dict[str, Any],
    max_turns: int | None,
    factory: Callable[..., Any] | None,
) -> EnvSpec:
    return EnvSpec(
        id=env_id,
        name=target,
        max_turns=max_turns,
        env_kwargs=dict(kwargs),
        options=None if factory is None else factory_options(factory, target=True),
        provenance=Provenance(
            package=ep.dist.name if ep.dist else None,
            package_version=ep.dist.version if ep.dist else None,
            entry_point=ep.value,
            data_source=target,
        ),
    )


def _namespace_entry_point(namespace: str) -> metadata.EntryPoint | None:
    found = metadata.entry_points(group=NAMESPACE_GROUP, name=namespace)
    return next(iter(found), None)


registry = Registry(default_index())


def register(
    env_id: str,
    entry_point: str | EnvFactory,
    *,
    max_turns: int | None = None,
    kwargs: dict[str, Any] | None = None,
    override: bool = False,
    sandbox: SandboxKind = "none",
) -> Registration:
    """Register an environment id in the shared registry (for code that is not a plugin package)."""
    return registry.register(
        env_id, entry_point, max_turns=max_turns, kwargs=kwargs, override=override, sandbox=sandbox
    )


def make(env_id: str, *, max_turns: int | None = None, **kwargs: Any) -> Env:
    """Build the environment `env_id` names, e.g. `envhub.make("arithmetic")`."""
    return registry.make(env_id, max_turns=max_turns, **kwargs)


def spec(env_id: str) -> EnvSpec:
    return registry.spec(env_id)
