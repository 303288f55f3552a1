"""The Python interpreters a prepared venv can be made from, and how the local sandbox gets to see them.

The official harness gives each repo/version the Python its spec names (3.9 for most of Lite). Here
that Python comes from the machine: `/usr/bin/pythonX.Y`, `/usr/local/bin/pythonX.Y`, or pyenv's
versions folder. The local sandbox sees only what is bound into it, and its uid cannot traverse a
closed folder such as `/root` (where pyenv usually lives): such an interpreter is mirrored, as hard
links, under the cache root and bound read-only *at its own path*, so the venv's `pyvenv.cfg`, its
`#!` lines and the interpreter's own library paths (`RPATH`) hold inside the sandbox unchanged.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SEARCH_DIRS = (Path("/usr/bin"), Path("/usr/local/bin"))
"""Where system interpreters live (besides pyenv's versions folder)."""


class NoInterpreter(RuntimeError):
    """No interpreter of the version an instance needs is on this machine; the message says the fix."""


@dataclass(frozen=True)
class Interpreter:
    """One Python on this machine: its executable, `X.Y.Z` version and installation prefix."""

    executable: Path
    version: tuple[int, int, int]
    prefix: Path

    @property
    def minor(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    @property
    def visible_in_sandbox(self) -> bool:
        """Under /usr (bound into every local sandbox) and needs no bind of its own."""
        return self.prefix == Path("/usr") or self.prefix.is_relative_to("/usr")


def pyenv_versions() -> Path:
    """pyenv's versions folder: $PYENV_ROOT/versions, else ~/.pyenv/versions."""
    root = os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv"
    return Path(root) / "versions"


_PROBE = "import sys; print(*sys.version_info[:3], sys.base_prefix)"


def probe(executable: Path) -> Interpreter | None:
    """The interpreter at `executable`, or None when it does not run (or is Python 2)."""
    try:
        done = subprocess.run(
            [str(executable), "-c", _PROBE], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return None
    fields = done.stdout.split(maxsplit=3)
    if done.returncode != 0 or len(fields) != 4 or fields[0] != "3":
        return None
    major, minor, micro = (int(f) for f in fields[:3])
    return Interpreter(executable=executable, version=(major, minor, micro), prefix=Path(fields[3].strip()))


def find_interpreters() -> list[Interpreter]:
    """Every Python 3 found in /usr/bin, /usr/local/bin and pyenv's versions folder, newest first."""
    candidates: list[Path] = []
    for folder in SEARCH_DIRS:
        candidates += sorted(folder.glob("python3.[0-9]*"))
    versions = pyenv_versions()
    if versions.is_dir():
        for prefix in sorted(versions.iterdir()):
            candidates += sorted((prefix / "bin").glob("python3.[0-9]*"))
    found: dict[Path, Interpreter] = {}
    for path in candidates:
        if path.name.endswith("-config") or not os.access(path, os.X_OK):
            continue
        interpreter = probe(path)
        if interpreter is not None and interpreter.executable.resolve() not in found:
            found[interpreter.executable.resolve()] = interpreter
    return sorted(found.values(), key=lambda i: i.version, reverse=True)


def choose(version: str, explicit: str | None = None) -> Interpreter:
    """The interpreter for a spec's `version` ("3.9"): `explicit` (a path, or a version to look up)
    when given, else the newest patch release of that version found on this machine."""
    if explicit is not None and ("/" in explicit or Path(explicit).exists()):
        interpreter = probe(Path(explicit))
        if interpreter is None:
            raise NoInterpreter(f"--python {explicit} is not a Python 3 interpreter that runs")
        return interpreter
    wanted = explicit or version
    found = find_interpreters()
    for interpreter in found:
        if interpreter.minor == wanted or ".".join(map(str, interpreter.version)) == wanted:
            return interpreter
    have = ", ".join(sorted({i.minor for i in found})) or "none"
    raise NoInterpreter(
        f"no Python {wanted} on this machine (found: {have}; looked in "
        f"{', '.join(map(str, SEARCH_DIRS))} and {pyenv_versions()}). Install it, e.g. "
        f"`pyenv install {wanted}` (or the distribution's python{wanted} package), or pass "
        "--python PATH to use another interpreter on purpose"
    )


def traversable(path: Path) -> bool:
    """Whether another uid can reach `path`: every folder on the way is executable by others."""
    for folder in [path, *path.parents]:
        try:
            if not folder.stat().st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def sandbox_binds(interpreter: Interpreter, cache: Path) -> dict[str, str]:
    """Read-only binds (host path -> sandbox path) that show `interpreter` inside the local sandbox at
    its own prefix: none under /usr, the prefix itself where others can reach it, else a mirror."""
    if interpreter.visible_in_sandbox:
        return {}
    prefix = interpreter.prefix
    if traversable(prefix):
        return {str(prefix): str(prefix)}
    return {str(mirror(prefix, cache)): str(prefix)}


def mirror(prefix: Path, cache: Path) -> Path:
    """A copy of `prefix` under `cache/pythons` that the sandbox's uid can reach: hard links where the
    file system allows them (instant, no space), a copy otherwise. Made once, completed atomically."""
    dest = cache / "pythons" / f"{prefix.name}-{hashlib.sha256(str(prefix).encode()).hexdigest()[:8]}"
    if (dest / ".envhub-complete").exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.parent.chmod(0o755)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".partial-"))
    try:
        link = subprocess.run(["cp", "-al", f"{prefix}/.", str(tmp)], capture_output=True, check=False)
        if link.returncode != 0:
            shutil.rmtree(tmp)
            shutil.copytree(prefix, tmp, symlinks=True)
        tmp.chmod(0o755)
        (tmp / ".envhub-complete").touch()
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
