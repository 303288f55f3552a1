"""`envhub new NAME`: a new environment plugin package that installs, registers and passes its own test.

The package is rendered from the files under `template/` with `string.Template` (`$name` placeholders),
so the template stays readable as the package it becomes, and Python braces need no escaping.
"""

from __future__ import annotations

import json
import re
import shlex
import string
from dataclasses import dataclass
from importlib import metadata, resources
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit
from urllib.request import url2pathname

import envhub
from envhub.registration import registry

__all__ = [
    "Plugin",
    "PluginNames",
    "ScaffoldError",
    "core_source",
    "create_plugin",
    "install_line",
    "plugin_names",
    "render",
]

NAME_RE = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
_VERSION_SUFFIX = re.compile(r"-v\d+$")
_EXAMPLE = "word-reverse"
# First-party distributions that are no environment: `envhub new core` would make a second `envhub-core`.
_RESERVED = {"envhub-core": "envhub's own library", "envhub-trainer": "envhub's GRPO trainer"}


class ScaffoldError(ValueError):
    """The package cannot be created as asked; the message says why and what to do instead."""


@dataclass(frozen=True)
class PluginNames:
    """Every name the package needs, derived from one environment name so that they always agree."""

    name: str
    """The environment's name, e.g. `word-reverse`."""
    package: str
    """The distribution on PyPI and the directory created: `envhub-word-reverse`."""
    module: str
    """The import name: `envhub_word_reverse`."""
    class_name: str
    """The environment class: `WordReverse`."""
    env_id: str
    """The registered id: `word-reverse-v0`."""


@dataclass(frozen=True)
class Plugin:
    """What `create_plugin` wrote, so callers can report it."""

    root: Path
    files: tuple[Path, ...]
    names: PluginNames


def _suggestion(name: str) -> str:
    """A valid name close to a bad one ('My Env!' -> 'my-env'), or the example name."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    slug = _VERSION_SUFFIX.sub("", slug)
    slug = slug.removeprefix("envhub-")
    return slug if NAME_RE.fullmatch(slug) else _EXAMPLE


def plugin_names(name: str) -> PluginNames:
    """Check an environment name and derive the package, module, class and id names from it."""
    if not name:
        raise ScaffoldError(f"the environment name is empty; give one such as {_EXAMPLE!r}")
    if not NAME_RE.fullmatch(name):
        raise ScaffoldError(
            f"{name!r} is not a valid environment name: use lowercase letters, digits and single "
            f"hyphens, starting with a letter. Try {_suggestion(name)!r}."
        )
    if _VERSION_SUFFIX.search(name):
        raise ScaffoldError(
            f"{name!r} ends in a version; give the bare name {_suggestion(name)!r}: "
            "the package registers it as version 0 ('-v0') and you add '-v1' when the task changes"
        )
    if name.startswith("envhub-"):
        raise ScaffoldError(
            f"{name!r} starts with 'envhub-'; give the bare name {_suggestion(name)!r}: "
            "the package is named 'envhub-NAME' automatically"
        )
    if f"envhub-{name}" in _RESERVED:
        raise ScaffoldError(
            f"'envhub-{name}' is the distribution of {_RESERVED[f'envhub-{name}']}; pick another name"
        )
    return PluginNames(
        name=name,
        package=f"envhub-{name}",
        module=f"envhub_{name.replace('-', '_')}",
        class_name="".join(part.capitalize() for part in name.split("-")),
        env_id=f"{name}-v0",
    )


def _check_id_is_free(names: PluginNames) -> None:
    """Refuse a name another package already provides: both would claim the id and `make` would fail."""
    for registration in registry.registrations().values():
        if registration.env_id.family == names.name and registration.package != names.package:
            raise ScaffoldError(
                f"an environment named {names.name!r} already exists ({registration.id} from "
                f"{registration.origin}); pick another name"
            )
    entry = registry.index.envs.get(names.name) if registry.index else None
    if entry is not None and entry.package != names.package:
        raise ScaffoldError(
            f"an environment named {names.name!r} is already listed in the hub's registry.yaml "
            f"(package {entry.package}); pick another name"
        )


def _template_files(root: Traversable) -> dict[PurePosixPath, str]:
    """Every `.tmpl` file under `root`, by its path relative to `root` with the suffix dropped."""
    found: dict[PurePosixPath, str] = {}
    pending = [(PurePosixPath(), root)]
    while pending:
        prefix, folder = pending.pop()
        for entry in folder.iterdir():
            if entry.is_dir():
                pending.append((prefix / entry.name, entry))
            elif entry.name.endswith(".tmpl"):
                found[prefix / entry.name.removesuffix(".tmpl")] = entry.read_text(encoding="utf-8")
    return dict(sorted(found.items()))


def render(names: PluginNames) -> dict[PurePosixPath, str]:
    """The package's files, relative to its root, as text: nothing is written."""
    major, minor, *_ = [*envhub.__version__.split("."), "0", "0"]
    values = {
        "name": names.name,
        "package": names.package,
        "module": names.module,
        "class_name": names.class_name,
        "env_id": names.env_id,
        "envhub_requirement": f"envhub-core>={major}.{minor}",  # `envhub` on PyPI is another project
    }
    template_root = resources.files(__name__).joinpath("template")
    rendered: dict[PurePosixPath, str] = {}
    for relative, text in _template_files(template_root).items():
        parts = relative.parts
        if parts[0] == "package":  # the import package's folder is named after the module
            relative = PurePosixPath(names.module, *parts[1:])
        rendered[relative] = string.Template(text).substitute(values)
    return rendered


def core_source() -> str | None:
    """Where this envhub-core was installed from, as pip takes it back: `-e DIR` for an editable
    checkout, the path of a local wheel or folder; None when it came from an index (or is not known).

    Read from the install's `direct_url.json` (PEP 610). A fresh venv needs it: the package index has
    no envhub-core, so the plugin's `envhub-core>=...` requirement is met only from here.
    """
    try:
        text = metadata.distribution("envhub-core").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    found = json.loads(text)
    url = str(found.get("url", ""))
    if not url.startswith("file://"):
        return None
    path = url2pathname(urlsplit(url).path)
    return f"-e {path}" if found.get("dir_info", {}).get("editable") else path


def install_line(plugin_root: Path) -> str:
    """The pip line that installs a new plugin with its test extra in a fresh venv: the core from where
    this one came (`core_source`), then the plugin, editable."""
    core = core_source()
    target = shlex.quote(f"{plugin_root}[test]")
    return f"pip install {core} -e {target}" if core else f"pip install -e {target}"


def create_plugin(name: str, dest: Path, *, force: bool = False) -> Plugin:
    """Write the package `envhub-NAME` into `dest`, refusing to overwrite an existing one unless `force`.

    Everything is rendered before anything is written, so a failure leaves no half-made package behind.
    """
    names = plugin_names(name)
    _check_id_is_free(names)
    root = dest / names.package
    if root.exists() and not root.is_dir():
        raise ScaffoldError(f"{root} exists and is not a directory; remove it or choose another --dest")
    if root.exists() and not force:
        raise ScaffoldError(
            f"{root} already exists; choose another name or --dest, or pass --force to overwrite "
            "the generated files in it (other files are left alone)"
        )
    files = render(names)
    written: list[Path] = []
    for relative, text in files.items():
        path = root.joinpath(*relative.parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return Plugin(root=root, files=tuple(written), names=names)
