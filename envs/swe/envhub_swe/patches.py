"""A submission's patch, read strictly: every file section is checked against git's own grammar, so
the file list that the grader filters is the file list that `git apply` and `patch` will touch.

Why strict: the old filter looked only at each `diff --git` line, while `patch` (the harness's last
fallback) also obeys `---`/`+++` lines it finds anywhere, so a second file header hidden inside a
section could change a test file past the filter. Here a section is a header, its extended header
lines, then hunks whose line counts must match their `@@` ranges exactly; anything else is refused.
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field

from envhub_swe.runner_config import RunnerFiles

_DIFF_GIT = "diff --git "
_EXTENDED = re.compile(
    r"^(old mode|new mode|deleted file mode|new file mode) [0-7]{6}$"
    r"|^(similarity|dissimilarity) index \d{1,3}%$"
    r"|^index [0-9a-f]{4,64}\.\.[0-9a-f]{4,64}( [0-7]{6})?$"
    r"|^(rename|copy) (from|to) .+$"
)
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_BINARY_BLOCK = re.compile(r"^(literal|delta) \d+$")
_BASE85_LINE = re.compile(r"^[A-Za-z][0-9A-Za-z!#$%&()*+;<=>?@^_`{|}~-]+$")
_NO_NEWLINE = "\\ No newline at end of file"
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}

TEST_INFRA = re.compile(
    r"(^|/)(tests?|testing|e2e)(/|$)|(^|/)test_[^/]*$|_tests?\.py$|(^|/)conftest\.py$"
    r"|(^|/)(sitecustomize|usercustomize)\.py$|\.pth$"
    r"|(^|/)(pytest\.ini|\.pytest\.ini|tox\.ini|setup\.cfg|pyproject\.toml|runtests\.py)$"
)
"""Paths a submission may not change: tests, test configuration and interpreter start-up hooks.

The same rule the dataset's makers used to split pull requests into `patch` and `test_patch` (no
gold patch of Lite touches such a path), so dropping them never costs an honest fix.
"""

RUNNER_MODULES = frozenset(
    {
        "pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "attr", "attrs", "six",
        "more_itertools", "atomicwrites", "colorama", "exceptiongroup", "tomli", "nose", "nose2",
        "xdist", "execnet", "hypothesis", "coverage", "pytest_cov", "tox", "setuptools", "pkg_resources",
    }
)  # fmt: skip
"""Modules the test runners import on their way to the tests (beside the standard library)."""

MODULE_ROOTS = ("", "src/")
"""Where a repository's top-level modules live on `sys.path` while its tests run."""


class MalformedPatch(ValueError):
    """The submission is not a well-formed git patch; it scores 0 with this reason."""


@dataclass(frozen=True)
class FileSection:
    """One file's part of a patch: the paths it reads and writes (None for /dev/null) and its text."""

    old_path: str | None
    new_path: str | None
    text: str

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for p in (self.old_path, self.new_path) if p is not None))


def parse_patch(patch: str) -> list[FileSection]:
    """Split a patch into its file sections, refusing anything git's grammar does not allow."""
    lines = patch.splitlines(keepends=True)
    if not lines:
        return []
    if not lines[0].startswith(_DIFF_GIT):
        raise MalformedPatch(f"the patch must start with a `diff --git` line, not {lines[0].strip()[:80]!r}")
    sections: list[FileSection] = []
    starts = [i for i, line in enumerate(lines) if line.startswith(_DIFF_GIT)] + [len(lines)]
    for begin, end in itertools.pairwise(starts):
        sections.append(_section(lines[begin:end]))
    return sections


def _section(lines: list[str]) -> FileSection:
    body = [line.rstrip("\n") for line in lines]
    header_a, header_b = _header_paths(body[0])
    named: dict[str, str] = {}
    i = 1
    while i < len(body) and _EXTENDED.match(body[i]):
        if body[i].startswith(("rename ", "copy ")):
            kind, which, path = body[i].split(" ", 2)
            named[f"{kind} {which}"] = _unquote(path)
        elif body[i].startswith(("new file", "deleted file")):
            named[body[i].split(" ")[0]] = ""
        i += 1
    old: str | None = named.get("rename from", named.get("copy from", header_a))
    new: str | None = named.get("rename to", named.get("copy to", header_b))
    if "new" in named:
        old = None
    if "deleted" in named:
        new = None
    rest = body[i:]
    if rest and rest[0].startswith("--- "):
        _check_file_lines(rest, old, new)
        _check_hunks(rest[2:], body[0])
    elif rest and rest[0] == "GIT binary patch":
        _check_binary(rest[1:], body[0])
    elif rest and not (
        len(rest) == 1 and rest[0].startswith("Binary files ") and rest[0].endswith(" differ")
    ):
        raise MalformedPatch(f"unexpected line {rest[0][:80]!r} in the section of {body[0][:80]!r}")
    for named_path in (old, new):
        if named_path is not None:
            _check_path(named_path)
    if old is None and new is None:
        raise MalformedPatch(f"{body[0][:80]!r} names neither an old nor a new file")
    return FileSection(old_path=old, new_path=new, text="".join(lines))


def _check_file_lines(rest: list[str], old: str | None, new: str | None) -> None:
    if len(rest) < 2 or not rest[1].startswith("+++ "):
        raise MalformedPatch(f"a `---` line without its `+++` line: {rest[0][:80]!r}")
    minus, plus = _file_line_path(rest[0][4:], "a/"), _file_line_path(rest[1][4:], "b/")
    if (minus, plus) != (old, new):
        raise MalformedPatch(
            f"the `---`/`+++` lines name {minus} and {plus}, but the section's header names {old} and {new}"
        )


def _check_hunks(rest: list[str], header: str) -> None:
    if not rest:
        raise MalformedPatch(f"{header[:80]!r} has file lines but no hunk")
    i = 0
    while i < len(rest):
        match = _HUNK.match(rest[i])
        if match is None:
            raise MalformedPatch(f"expected a hunk (`@@ ... @@`) in {header[:80]!r}, found {rest[i][:80]!r}")
        old_left = int(match[2]) if match[2] is not None else 1
        new_left = int(match[4]) if match[4] is not None else 1
        i += 1
        while old_left or new_left:
            if i >= len(rest):
                raise MalformedPatch(f"a hunk of {header[:80]!r} ends before its counted lines")
            tag = rest[i][:1]
            if tag in (" ", "") and old_left and new_left:  # git writes an empty context line as " "
                old_left, new_left = old_left - 1, new_left - 1
            elif tag == "-" and old_left:
                old_left -= 1
            elif tag == "+" and new_left:
                new_left -= 1
            else:
                raise MalformedPatch(
                    f"a hunk of {header[:80]!r} does not match its counts at {rest[i][:80]!r}"
                )
            i += 1
            if i < len(rest) and rest[i] == _NO_NEWLINE:
                i += 1


def _check_binary(rest: list[str], header: str) -> None:
    blocks = 0
    for line in rest:
        if _BINARY_BLOCK.match(line):
            blocks += 1
        elif line and not _BASE85_LINE.match(line):
            raise MalformedPatch(f"unexpected line {line[:80]!r} in the binary patch of {header[:80]!r}")
    if blocks not in (1, 2):
        raise MalformedPatch(f"the binary patch of {header[:80]!r} has {blocks} blocks, not 1 or 2")


def _header_paths(line: str) -> tuple[str, str]:
    """The a/ and b/ paths of a `diff --git` line, quoted or not (unquoted names may hold spaces)."""
    rest = line[len(_DIFF_GIT) :].rstrip("\n")
    tokens = list(_quoted_tokens(rest)) if rest.startswith('"') or rest.endswith('"') else None
    if tokens is not None:
        if len(tokens) != 2:
            raise MalformedPatch(f"cannot read the paths of {line[:80]!r}")
        a, b = tokens
    else:
        # Unquoted: "a/X b/Y". When X == Y the split is unambiguous whatever X holds.
        half = (len(rest) - 1) // 2
        if len(rest) % 2 == 1 and rest[half] == " " and rest[:half][2:] == rest[half + 1 :][2:]:
            a, b = rest[:half], rest[half + 1 :]
        else:
            parts = rest.split(" b/")
            if len(parts) != 2:
                raise MalformedPatch(f"cannot read the paths of {line[:80]!r}")
            a, b = parts[0], "b/" + parts[1]
    if not a.startswith("a/") or not b.startswith("b/"):
        raise MalformedPatch(f"the paths of {line[:80]!r} must start with a/ and b/")
    return a[2:], b[2:]


def _quoted_tokens(text: str) -> Iterator[str]:
    i = 0
    while i < len(text):
        if text[i] == " ":
            i += 1
        elif text[i] == '"':
            end = i + 1
            while end < len(text) and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            yield _unquote(text[i : end + 1])
            i = end + 1
        else:
            end = text.find(" ", i)
            end = len(text) if end < 0 else end
            yield text[i:end]
            i = end


def _unquote(path: str) -> str:
    """git's C-style quoting of unusual path names (`"a/t\\303\\251st.py"`)."""
    if not (len(path) >= 2 and path.startswith('"') and path.endswith('"')):
        return path
    out = bytearray()
    body, i = path[1:-1], 0
    while i < len(body):
        if body[i] != "\\":
            out += body[i].encode()
            i += 1
        elif body[i + 1 : i + 4].isdigit() and len(body[i + 1 : i + 4]) == 3:
            out.append(int(body[i + 1 : i + 4], 8) & 0xFF)
            i += 4
        elif body[i + 1 : i + 2] in _ESCAPES:
            out.append(_ESCAPES[body[i + 1]])
            i += 2
        else:
            raise MalformedPatch(f"bad escape in the quoted path {path[:80]!r}")
    return out.decode(errors="surrogateescape")


def _file_line_path(text: str, prefix: str) -> str | None:
    path = _unquote(text.split("\t")[0].rstrip())
    if path == "/dev/null":
        return None
    if not path.startswith(prefix):
        raise MalformedPatch(f"{text[:80]!r} must start with {prefix}")
    return path[len(prefix) :]


def _check_path(path: str) -> None:
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) or parts[0] == ".git":
        raise MalformedPatch(f"the path {path!r} is not a plain path inside the repository")
    if any(p == ".git" for p in parts):
        raise MalformedPatch(f"the path {path!r} reaches into a .git directory")


def runner_paths(command: str) -> tuple[str, ...]:
    """The repository paths a test command names (`bin/test`, `./tests/runtests.py`, test files)."""
    try:
        tokens = shlex.split(command)
    except ValueError:
        tokens = command.split()
    paths = []
    for token in tokens:
        path = token.split("::")[0].removeprefix("./")
        if not token.startswith("-") and "=" not in token and ("/" in path or path.endswith(".py")):
            paths.append(path)
    return tuple(dict.fromkeys(paths))


@dataclass(frozen=True)
class Guard:
    """What a submission may not change besides tests: the runner the test command starts, and modules
    that would shadow the test environment's own.

    `environment` is every top-level module the test environment can import; `base_modules` the module
    paths (`root + name`) the base repository already has; `runner` the paths the test command names,
    whose directories are module roots too (a script's directory is first on its `sys.path`).
    """

    environment: frozenset[str] = frozenset()
    base_modules: frozenset[str] = frozenset()
    runner: tuple[str, ...] = ()
    runner_files: RunnerFiles = field(default_factory=RunnerFiles)
    """What the runner reads before the tests (`runner_config.runner_files`): configuration names,
    plugin and settings modules; by default every configuration name a released pytest reads."""

    @property
    def roots(self) -> tuple[str, ...]:
        scripts = (path.rsplit("/", 1)[0] + "/" for path in self.runner if "/" in path)
        return tuple(dict.fromkeys([*MODULE_ROOTS, *scripts]))

    def shadowed_module(self, path: str) -> str | None:
        """The module `path` would newly put in front of the environment's own, if it does.

        A file at a module root (the repository's top level, `src/`, a test script's directory) whose
        top-level name is a standard-library, test-runner or installed module, where the base repository
        has no module of that name, would be imported by the test run instead of the real one:
        `unittest/`, `pytest.py`, `bin/argparse.py` beside sympy's `bin/test`, ...
        """
        for root in self.roots:
            if not path.startswith(root):
                continue
            first = path[len(root) :].split("/")[0]
            name = first.removesuffix(".py")
            if name.isidentifier() and name in self.environment and f"{root}{name}" not in self.base_modules:
                return name
        return None

    def reason(self, path: str) -> str | None:
        """Why a submission may not change `path`, or None."""
        if TEST_INFRA.search(path):
            return "tests or test configuration"
        if path in self.runner:
            return "the test runner the eval script starts"
        if (why := self.runner_files.reason(path, self.roots)) is not None:
            return why
        if (name := self.shadowed_module(path)) is not None:
            return f"shadows the environment's module {name!r}"
        return None


@dataclass(frozen=True)
class FilteredPatch:
    """What is graded, and what was left out of it with the reason for each path."""

    kept: str
    kept_paths: tuple[str, ...]
    dropped: dict[str, str]
    flags: tuple[str, ...] = ()
    """The diff monitor's flags on the kept part (`monitor.scan`), set by the grader."""


def filter_patch(patch: str, guard: Guard = Guard()) -> FilteredPatch:
    """The submission without its changes to tests, test configuration, the test runner and modules
    that would shadow the environment's. Raises `MalformedPatch` for a patch git would not write."""
    kept: list[FileSection] = []
    dropped: dict[str, str] = {}
    for section in parse_patch(patch):
        reasons = {path: why for path in section.paths if (why := guard.reason(path)) is not None}
        if reasons:
            dropped.update({path: next(iter(reasons.values())) for path in section.paths})
        else:
            kept.append(section)
    paths = tuple(dict.fromkeys(p for s in kept for p in s.paths))
    return FilteredPatch(kept="".join(s.text for s in kept), kept_paths=paths, dropped=dropped)
