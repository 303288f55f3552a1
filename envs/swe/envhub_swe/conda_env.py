"""A conda `environment.yml` environment (xarray, matplotlib 3.5+), as pip requirements.

The official harness builds these environments with `conda env update -f environment.yml` (or `conda
env create`) from the file it reads at the row's environment_setup_commit, then runs `pip install` of
the spec's `pip_packages`. Conda cannot be installed here, so the file is translated for pip, one rule
per entry, each entry's fate written to the manifest:

- `python` is dropped: the interpreter is the spec's Python (`pythons.py`), as `conda install python=X`
  or `conda create python=X` makes it in the harness;
- conda-only packages are dropped with the reason (`DROPPED`: compilers and build tools, C libraries
  the wheels bundle, packages PyPI has no installable release of);
- conda names whose PyPI name differs are renamed (`RENAMED`);
- version constraints are kept in pip's syntax (conda's `=1.2` is `==1.2.*`, a build string is dropped);
- the file's own `pip:` section follows, then the spec's `pip_packages`, all in **one** pip install: the
  resolver then picks releases of the unpinned packages that work with the spec's pins (numpy 1.23 for
  xarray), where installing today's newest and downgrading afterwards would break their binaries. The
  harness's own `pip install` of `pip_packages` still runs after it (and finds them installed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envhub_swe.steps import NoSpec, Step

REQUIREMENTS = "$HOME/environment-requirements.txt"
DELIMITER = "EOF_ENVHUB_CONDA_ENV"

_TOOL = "a build tool, not a Python package: the host's compilers build what has no wheel"
_CLIB = "a C library conda installs beside Python; the PyPI wheels that need it bundle it"
DROPPED: dict[str, str] = {
    "python": "the interpreter is the spec's Python (chosen by pythons.py), not a package",
    "pip": "the environment's pip is seeded by prepare",
    "c-compiler": _TOOL,
    "cxx-compiler": _TOOL,
    "compilers": _TOOL,
    "pkg-config": _TOOL,
    "hdf5": _CLIB + " (h5py, netCDF4)",
    "gtk3": "the GTK 3 C library (a GUI backend's); not on PyPI",
    "gtk4": "the GTK 4 C library (a GUI backend's); not on PyPI",
    "graphviz": "the Graphviz programs (docs builds); PyPI's `graphviz` is another package",
    "pygobject": "builds from source against the GObject C libraries (no wheel on PyPI)",
    "wxpython": "PyPI has no Linux wheel; its source build needs GTK (a GUI backend's)",
    "cdms2": "not on PyPI (conda-forge only): xarray's tests that need it are skipped, as wherever "
    "it is missing",
}
"""Conda packages pip cannot or must not install here, and why."""

RENAMED: dict[str, str] = {
    "matplotlib-base": "matplotlib",
    "iris": "scitools-iris",
    "pyqt": "pyqt5",
}
"""Conda names whose PyPI name differs: matplotlib-base is matplotlib without its Qt/Tk extras
(PyPI's has none), iris is published as scitools-iris, and conda-forge's `pyqt` is PyQt 5."""

_ENTRY = re.compile(
    r"^(?:[\w.-]+::)?(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)(?P<extras>\[[^\]]*\])?\s*(?P<version>.*)$"
)
_HEREDOC = re.compile(r"^cat <<'(?P<tag>\w+)' > (?P<path>\S*environment\.yml)\n(?P<text>.*)\n(?P=tag)$", re.S)
_ENV_FILE = re.compile(r"^conda env (?:update|create) (?:-f|--file) (?P<path>\S+)$")
_PYTHON = re.compile(r"^conda activate \w+ && conda install python=(?P<python>[\d.]+) -y$")


@dataclass(frozen=True)
class Entry:
    """One dependency of the file and its fate: the pip requirement, or None when dropped."""

    written: str
    requirement: str | None
    note: str = ""
    """Why it was dropped or renamed (empty when kept as written)."""


def pip_version(version: str) -> str:
    """A conda version constraint in pip's syntax: `=1.2` and `1.2.*` are `==1.2.*`, `1.2` alone is
    `==1.2`, a trailing build string (`=1.2=py39_0`, `1.2 py39_0`) is dropped; comparisons pass."""
    version = re.sub(r"\s*([<>=!~]=?|,)\s*", r"\1", version.strip())
    if not version:
        return ""
    if "|" in version:
        raise NoSpec(f"the conda version constraint {version!r} (an 'or') has no pip equivalent")
    match = re.fullmatch(r"(?P<op>==?)?(?P<number>[0-9A-Za-z*][\w.*+]*)(?:[= ]\S+)?", version)
    if match is None:
        return version  # comparisons (>=1.2,<2, !=1.3) read the same in pip
    op, number = match["op"], match["number"]
    if op == "=" and not number.endswith("*"):
        number += ".*"
    return f"=={number}"


def translate_entry(written: str) -> Entry:
    """One conda dependency (`numpy>=1.19`, `iris`, `conda-forge::pint=0.19`) as a pip requirement."""
    text = written.split("#", 1)[0].strip()
    match = _ENTRY.match(text)
    if match is None:
        raise NoSpec(f"the environment file's entry {written!r} is not a conda package specification")
    name = canonicalize_name(match["name"])
    if name in DROPPED:
        return Entry(written, None, f"dropped: {DROPPED[name]}")
    pip_name = RENAMED.get(name, match["name"])
    requirement = f"{pip_name}{match['extras'] or ''}{pip_version(match['version'])}"
    try:
        Requirement(requirement)
    except InvalidRequirement as exc:
        raise NoSpec(f"the environment file's entry {written!r} has no pip form ({exc})") from exc
    note = f"renamed: {requirement} (its PyPI name)" if name in RENAMED else ""
    return Entry(written, requirement, note)


def translate(text: str, pip_packages: list[str]) -> list[Entry]:
    """Every dependency of an environment.yml, then its `pip:` section's and the spec's pip packages."""
    document = yaml.safe_load(text) or {}
    dependencies = document.get("dependencies") if isinstance(document, dict) else None
    if not isinstance(dependencies, list):
        raise NoSpec("the environment file has no `dependencies:` list")
    entries: list[Entry] = []
    pip_section: list[str] = []
    for item in dependencies:
        if isinstance(item, dict) and set(item) == {"pip"}:
            pip_section += [str(p) for p in item["pip"] or []]
        elif isinstance(item, str):
            entries.append(translate_entry(item))
        else:
            raise NoSpec(f"the environment file's dependency {item!r} is neither a package nor `pip:`")
    entries += [Entry(p, p, "the file's own pip section") for p in pip_section]
    entries += [Entry(p, p, "the spec's pip_packages") for p in pip_packages]
    return entries


def install_steps(line: str, text: str, path: str, spec: Mapping[str, Any]) -> list[Step]:
    """The pip install that stands in for the official `line` (`conda env update/create -f PATH`), after
    one step per dropped or renamed entry (not run; the manifest and the log keep its reason)."""
    entries = translate(text, list(spec.get("pip_packages", [])))
    noted = [
        Step(f"{path}: {e.written}", False, e.note)
        for e in entries
        if e.requirement is None or e.note.startswith("renamed")
    ]
    requirements = "\n".join(e.requirement for e in entries if e.requirement is not None)
    command = (
        f"cat <<'{DELIMITER}' > {REQUIREMENTS}\n{requirements}\n{DELIMITER}\n"
        f"python -m pip install -r {REQUIREMENTS}"
    )
    why = f"{line}: its entries as pip requirements, with the spec's pip_packages (conda_env.py)"
    return [*noted, Step(command, True, why)]


@dataclass(frozen=True)
class CondaEnvironment:
    """The environment file an official env script writes, and how its lines become steps."""

    files: dict[str, str]
    """The files the script writes with a heredoc, by path: the text the harness read."""
    spec: Mapping[str, Any]

    @classmethod
    def of(cls, env_lines: list[str], spec: Mapping[str, Any]) -> CondaEnvironment:
        files = {m["path"]: m["text"] for line in env_lines if (m := _HEREDOC.match(line))}
        return cls(files, spec)

    def adapt(self, line: str) -> list[Step]:
        """The steps an official line about the environment file becomes; [] for any other line."""
        if _HEREDOC.match(line) is not None:
            return [Step(line, False, "read here, and installed with pip at the `conda env` line")]
        if (env_file := _ENV_FILE.match(line)) is not None:
            path = env_file["path"]
            if path not in self.files:
                raise NoSpec(f"`{line}` reads {path}, which the official script does not write")
            return install_steps(line, self.files[path], path, self.spec)
        if line.strip() in {f"rm {path}" for path in self.files}:
            return [Step(line, False, "the file was never written (see its heredoc's step)")]
        if (python := _PYTHON.match(line)) is not None:
            return [Step(line, False, f"the interpreter is Python {python['python']} (pythons.py)")]
        return []
