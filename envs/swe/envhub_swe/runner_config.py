"""What the test runner of the grading environment reads before the tests: its configuration files by
name, and the plugin modules it loads. A submission may not change them (`patches.Guard` drops them).

Why derived and not listed: each pytest release decides which files it reads (pytest 9 added
`pytest.toml` and `.pytest.toml`), and plugins come from entry points, `-p` options and
`pytest_plugins`. A fixed list lets a plugin in through the one name it forgot. `PROBE` asks the
environment's own pytest; everything else here is a pure function of its answer and of the base
repository's files, so it can be tested without a sandbox.
"""

from __future__ import annotations

import ast
import configparser
import json
import re
import shlex
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

KNOWN_CONFIG_NAMES = frozenset(
    {"pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"}
)
"""Every name a released pytest (3 to 9) reads its configuration from: always protected, so that an
environment whose pytest cannot be asked (or a runner that is not pytest) still gets a sound superset."""

_KNOWN = dict.fromkeys(sorted(KNOWN_CONFIG_NAMES), "a name pytest reads its configuration from")

CONFIG_NAME = re.compile(r"^\.?[A-Za-z0-9_-]+\.(ini|toml|cfg)$")
"""What a configuration file's name looks like among the string constants of pytest's `findpaths`."""

PROBE = r"""
import json, re, sys
out = {"pytest": None, "config_names": [], "plugins": []}
pattern = re.compile(sys.argv[1])

def collect(obj, seen, found):
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, str):
        if pattern.match(obj):
            found.append(obj)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for item in obj:
            collect(item, seen, found)
    elif isinstance(obj, dict):
        for item in obj:
            collect(item, seen, found)
    elif hasattr(obj, "co_consts"):
        collect(obj.co_consts, seen, found)
    elif hasattr(obj, "__code__"):
        collect(obj.__code__, seen, found)

try:
    import importlib
    import _pytest
    try:
        import pytest
        out["pytest"] = str(pytest.__version__)
    except Exception:
        out["pytest"] = str(getattr(_pytest, "__version__", "unknown"))
    found = []
    for name in ("_pytest.config.findpaths", "_pytest.config"):
        try:
            module = importlib.import_module(name)
        except Exception:
            continue
        for value in list(vars(module).values()):
            if getattr(value, "__module__", name) == name or isinstance(value, (list, tuple, dict)):
                collect(value, set(), found)
        if found:
            break
    out["config_names"] = sorted(set(found))
except Exception:
    pass
try:
    try:
        from importlib.metadata import entry_points
        eps = entry_points()
        group = eps.select(group="pytest11") if hasattr(eps, "select") else eps.get("pytest11", [])
        out["plugins"] = sorted(set(ep.value for ep in group))
    except ImportError:
        import pkg_resources
        out["plugins"] = sorted(set(ep.module_name for ep in pkg_resources.iter_entry_points("pytest11")))
except Exception:
    pass
print(json.dumps(out))
"""
"""Run by the test environment's Python (`python -I -c PROBE CONFIG_NAME`, from `/`): its pytest's
version, every configuration file name the code of pytest's `findpaths` holds (a dict of loaders in
pytest 9, a list inside `locate_config` in 6 to 8, `getcfg`'s list before), and the modules of its
`pytest11` entry points. Written for every Python the environments use (3.5 and later)."""


@dataclass(frozen=True)
class RunnerFacts:
    """The environment's answer to `PROBE`; empty when it has no pytest or could not answer."""

    pytest: str | None = None
    config_names: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()
    """`pytest11` entry points, `module[:attribute]`."""

    @classmethod
    def parse(cls, stdout: str) -> RunnerFacts:
        """The probe's JSON line; anything else (no Python, a crash) is no facts, not an error: the
        known names still hold."""
        for line in reversed(stdout.splitlines()):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict):
                names = [
                    n for n in data.get("config_names") or () if isinstance(n, str) and CONFIG_NAME.match(n)
                ]
                plugins = [p for p in data.get("plugins") or () if isinstance(p, str)]
                version = data.get("pytest")
                return cls(
                    pytest=version if isinstance(version, str) else None,
                    config_names=tuple(sorted(set(names))),
                    plugins=tuple(sorted(set(plugins))),
                )
        return cls()


@dataclass(frozen=True)
class RunnerFiles:
    """What the runner reads before the tests: configuration names (at any depth), files a command
    names as configuration, and plugin modules (dotted), each with why it is protected."""

    config_names: Mapping[str, str] = field(default_factory=lambda: dict(_KNOWN))
    config_files: Mapping[str, str] = field(default_factory=dict)
    modules: Mapping[str, str] = field(default_factory=dict)
    script_dirs: tuple[str, ...] = ()
    """The directories of the scripts the command runs (`bin/` of sympy's `bin/test`): first on their
    `sys.path`, so the runner imports its neighbours before anything else (`bin/get_sympy.py`)."""

    def __hash__(self) -> int:
        return hash(
            (tuple(self.config_names), tuple(self.config_files), tuple(self.modules), self.script_dirs)
        )

    def reason(self, path: str, roots: Iterable[str]) -> str | None:
        """Why a submission may not change `path`, or None."""
        name = path.rsplit("/", 1)[-1]
        if name in self.config_names:
            return f"test-runner configuration: {self.config_names[name]}"
        if path in self.config_files:
            return f"test-runner configuration: {self.config_files[path]}"
        for module, why in self.modules.items():
            if path in module_paths(module, roots):
                return f"a plugin or settings module the test run loads: {why}"
        if any(part.endswith((".dist-info", ".egg-info")) for part in path.split("/")[:-1]):
            return "distribution metadata: its entry points can load pytest plugins"
        if any(
            path.startswith(d) and "/" not in path[len(d) :] and path.endswith(".py")
            for d in self.script_dirs
        ):
            return "a module beside the runner script, which the script imports before the tests"
        return None


def module_paths(module: str, roots: Iterable[str]) -> set[str]:
    """The files `import module` can load, at each module root (a module file or a package's `__init__`)."""
    base = module.replace(".", "/")
    return {f"{root}{base}{suffix}" for root in roots for suffix in (".py", "/__init__.py")}


def runner_files(
    facts: RunnerFacts, test_command: str, configs: Mapping[str, str] | None = None
) -> RunnerFiles:
    """What the runner of `test_command` reads before the tests, in an environment that answered
    `facts`, for a base repository whose configuration files and `conftest.py` files hold `configs`
    (path -> text)."""
    names = dict(_KNOWN)
    for name in facts.config_names:
        names[name] = f"pytest {facts.pytest or ''} reads {name}".replace("  ", " ")
    files: dict[str, str] = {}
    modules: dict[str, str] = {}
    for value in facts.plugins:
        modules.setdefault(value.split(":")[0].strip(), f"the environment's pytest11 entry point {value}")
    command = _command_options(test_command)
    for option, value in command:
        if option == "-p":
            modules.setdefault(value, f"-p {value} in the test command")
        elif option == "-c":
            files.setdefault(value.removeprefix("./"), "named by -c in the test command")
        elif option == "settings":
            modules.setdefault(value, f"Django settings {value} named by the test command")
        elif option == "plugins":
            modules.setdefault(value, f"PYTEST_PLUGINS={value} in the test command")
    for path, text in sorted((configs or {}).items()):
        for module, why in _configured_modules(path, text, set(names)):
            modules.setdefault(module, why)
    scripts = runner_scripts(test_command)
    dirs = tuple(dict.fromkeys(s.rsplit("/", 1)[0] + "/" for s in scripts if "/" in s))
    return RunnerFiles(config_names=names, config_files=files, modules=modules, script_dirs=dirs)


_PYTHON = re.compile(r"^(.*/)?python[0-9.]*$")


def runner_scripts(command: str) -> tuple[str, ...]:
    """The repository scripts the command executes (`./tests/runtests.py`, `bin/test`), not the test
    files it passes to a runner: the program itself, or the script `python` is given."""
    tokens = [t for t in _split(command) if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", t)]
    if not tokens:
        return ()
    program = tokens[0]
    if _PYTHON.match(program):
        rest = tokens[1:]
        while rest and rest[0].startswith("-"):
            if rest[0] in ("-m", "-c"):
                return ()
            rest = rest[2:] if rest[0] in ("-W", "-X") else rest[1:]
        program = rest[0] if rest else ""
    path = program.removeprefix("./")
    return (path,) if path and not path.startswith("/") and ("/" in path or path.endswith(".py")) else ()


def _plugin_options(tokens: list[str]) -> list[tuple[str, str]]:
    """`-p NAME`, `-pNAME`, `-c FILE`, `--config-file[=]FILE`, `--settings[=]MODULE` in argv tokens."""
    found: list[tuple[str, str]] = []
    for i, token in enumerate(tokens):
        following = tokens[i + 1] if i + 1 < len(tokens) else ""
        for flag, kind in (("-p", "-p"), ("-c", "-c"), ("--config-file", "-c"), ("--settings", "settings")):
            if token == flag:
                value = following
            elif token.startswith(flag + "=") or (len(flag) == 2 and token.startswith(flag)):
                value = token[len(flag) :].removeprefix("=")
            else:
                continue
            if value and not value.startswith("-") and not value.startswith("no:"):
                found.append((kind, value))
            break
    return found


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _command_options(command: str) -> list[tuple[str, str]]:
    """The plugin-bearing options of a test command, its variable assignments included
    (`PYTEST_ADDOPTS`, `PYTEST_PLUGINS`, `DJANGO_SETTINGS_MODULE`)."""
    tokens = _split(command)
    found = _plugin_options(tokens)
    for token in tokens:
        name, _, value = token.partition("=")
        if name == "PYTEST_ADDOPTS":
            found += _plugin_options(_split(value))
        elif name == "PYTEST_PLUGINS":
            found += [("plugins", v.strip()) for v in value.split(",") if v.strip()]
        elif name == "DJANGO_SETTINGS_MODULE" and value:
            found.append(("settings", value))
    return found


def _configured_modules(path: str, text: str, names: set[str]) -> list[tuple[str, str]]:
    """Modules a base repository's file makes the runner load: `-p` in a configuration's `addopts`,
    pytest-django's `DJANGO_SETTINGS_MODULE`, and `pytest_plugins` in a `conftest.py`."""
    name = path.rsplit("/", 1)[-1]
    if name == "conftest.py":
        return [(m, f"pytest_plugins of {path}") for m in _pytest_plugins(text)]
    if name not in names:
        return []
    found: list[tuple[str, str]] = []
    for key, value in _pytest_options(name, text).items():
        values = value if isinstance(value, list) else [value]
        if key == "addopts":
            tokens = [t for v in values if isinstance(v, str) for t in _split(v)]
            found += [(v, f"addopts -p {v} in {path}") for kind, v in _plugin_options(tokens) if kind == "-p"]
        elif key.upper() == "DJANGO_SETTINGS_MODULE":
            found += [(str(v).strip(), f"DJANGO_SETTINGS_MODULE in {path}") for v in values if str(v).strip()]
    return found


def _pytest_options(name: str, text: str) -> dict[str, object]:
    """The pytest section of a configuration file, whichever name and format it has; {} if unreadable."""
    if name.endswith(".toml"):
        try:
            data = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, ValueError):
            return {}
        tool = data.get("tool", {})
        for table in (tool.get("pytest", {}).get("ini_options"), tool.get("pytest"), data.get("pytest")):
            if isinstance(table, dict) and table:
                return {k: v for k, v in table.items() if k != "ini_options"}
        return {}
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except configparser.Error:
        return {}
    for section in ("pytest", "tool:pytest"):
        if parser.has_section(section):
            return dict(parser.items(section))
    return {}


def _pytest_plugins(text: str) -> list[str]:
    """The literal modules of a `pytest_plugins = ...` assignment at a module's top level."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    found: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in node.targets
        ):
            value = node.value
            items = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
            found += [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
    return found
