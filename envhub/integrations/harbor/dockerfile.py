"""Reading a task's Dockerfile: its base images (for the offline docker build) and, for the `local`
runtime, whether a bubblewrap sandbox on this machine's Python can honour it line by line.

The local runtime runs the host's own /usr read-only, so it can honour only a "plain Python" recipe:
`FROM python:3[.N][-variant]` (or envhub's own `envhub/python:*` image), `WORKDIR`, `COPY` of build-context
files into the working directory, `ENV` without substitutions, and `RUN pip install PACKAGE...`
(installed on the host from pip's configured indexes into a read-only site directory). Anything else is
refused with the line that cannot be honoured, so a task never runs locally in an environment that is not
the one its author wrote.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from envhub.integrations.harbor.task import HarborTaskError


class LocalRefused(HarborTaskError):
    """The Dockerfile asks for something the local runtime cannot honour; use runtime='docker'."""


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction: its first line number, keyword (upper case) and argument text."""

    line: int
    keyword: str
    args: str


def parse(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile: comments and blank lines dropped, `\\` continuations joined."""
    found: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # Docker drops comment lines inside a continued instruction
        if not pending:
            start = number
        continued = stripped.endswith("\\")
        pending.append(stripped[:-1] if continued else stripped)
        if not continued:
            keyword, _, args = " ".join(pending).strip().partition(" ")
            found.append(Instruction(start, keyword.upper(), args.strip()))
            pending = []
    if pending:
        keyword, _, args = " ".join(pending).strip().partition(" ")
        found.append(Instruction(start, keyword.upper(), args.strip()))
    return found


def base_images(instructions: list[Instruction]) -> list[str]:
    """The images the build starts from (`FROM [--platform=...] IMAGE [AS name]`), earlier stages left out."""
    stages: set[str] = set()
    bases: list[str] = []
    for ins in instructions:
        if ins.keyword != "FROM":
            continue
        words = [w for w in ins.args.split() if not w.startswith("--")]
        if not words:
            continue
        if len(words) >= 3 and words[1].lower() == "as":
            stages.add(words[2].lower())
        if words[0].lower() not in stages and words[0] != "scratch":
            bases.append(words[0])
    return bases


_PYTHON_IMAGE = re.compile(
    r"(?:(?:docker\.io/)?library/)?python:(?P<version>3(?:\.\d+){0,2})(?:-[a-z0-9.-]+)?(?:@sha256:[0-9a-f]+)?"
)
_ENVHUB_PYTHON = re.compile(r"envhub/python:[\w.-]+")
_PIP = ({"pip", "pip3"}, {"python", "python3"})
_PIP_FLAGS = {
    "--no-cache-dir",
    "-q",
    "--quiet",
    "-U",
    "--upgrade",
    "--no-input",
    "--disable-pip-version-check",
    "--root-user-action=ignore",
    "--break-system-packages",
}
"""pip options that change nothing about what gets installed; any other option is refused locally."""
_ONLY_PIP = "only `RUN pip install PACKAGE...` is honoured by the local runtime"
_PIP_RUN = re.compile(r"(?:pip3?|python3?\s+-m\s+pip)\s+install\s")
_SHELL = re.compile(r"[;&|<>`$()]")
_NO_OPS = {"USER", "CMD", "ENTRYPOINT", "EXPOSE", "LABEL", "MAINTAINER", "STOPSIGNAL", "VOLUME"}
"""Instructions with no bearing on files or processes the local runtime starts (commands run as the
sandbox's own unprivileged uid whatever USER says; Harbor replaces CMD/ENTRYPOINT with its own)."""


@dataclass
class LocalPlan:
    """What the local runtime does to build the Dockerfile's environment."""

    python: str | None
    """The Python version FROM asks for ("3.11"), or None when any Python 3 will do."""
    workdir: str = ""
    env: dict[str, str] = field(default_factory=dict)
    copies: list[tuple[str, str]] = field(default_factory=list)
    """(source relative to environment/, absolute destination) in order."""
    pip: list[str] = field(default_factory=list)


def local_plan(dockerfile: Path) -> LocalPlan:
    """The local runtime's plan for `dockerfile`, or LocalRefused naming the first line it cannot honour."""
    instructions = parse(dockerfile.read_text())
    froms = [ins for ins in instructions if ins.keyword == "FROM"]
    if len(froms) != 1:
        raise LocalRefused(f"{dockerfile}: the local runtime takes exactly one FROM (found {len(froms)})")
    plan = LocalPlan(python=_python_of(dockerfile, froms[0]))
    workdir = "/"
    copies: list[tuple[Instruction, list[str], str]] = []
    for ins in instructions:
        if ins.keyword == "FROM" or ins.keyword in _NO_OPS:
            continue
        if ins.keyword == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, ins.args.strip().strip("\"'")))
        elif ins.keyword == "ENV":
            plan.env.update(_env_pairs(dockerfile, ins))
        elif ins.keyword == "COPY":
            sources, dest = _copy_args(dockerfile, ins)
            copies.append((ins, sources, posixpath.normpath(posixpath.join(workdir, dest)) + _slash(dest)))
        elif ins.keyword == "RUN":
            plan.pip.extend(_pip_packages(dockerfile, ins))
        else:
            raise _refuse(dockerfile, ins, f"{ins.keyword} is not honoured by the local runtime")
    if workdir == "/":
        raise LocalRefused(
            f"{dockerfile}: the local runtime needs a WORKDIR below / (its only writable place besides /tmp)"
        )
    plan.workdir = workdir
    for ins, sources, dest in copies:
        for source in sources:
            target = dest.rstrip("/")
            into = dest.endswith("/") or len(sources) > 1
            if into and not (dockerfile.parent / source).is_dir():
                target = posixpath.join(target, posixpath.basename(source.rstrip("/")))
            if target != workdir and not target.startswith(workdir + "/"):
                raise _refuse(
                    dockerfile,
                    ins,
                    f"copies to {target}, outside WORKDIR {workdir} (the only writable place)",
                )
            plan.copies.append((source, target))
    return plan


def _python_of(dockerfile: Path, ins: Instruction) -> str | None:
    image = ins.args.split()[-1] if ins.args else ""
    match = _PYTHON_IMAGE.fullmatch(image)
    if match:
        return ".".join(match.group("version").split(".")[:2]) if "." in match.group("version") else None
    if _ENVHUB_PYTHON.fullmatch(image):
        return None
    raise _refuse(
        dockerfile, ins, f"FROM {image} is not a plain Python image (python:3.x or envhub/python:*)"
    )


def _slash(dest: str) -> str:
    return "/" if dest.endswith("/") else ""


def _env_pairs(dockerfile: Path, ins: Instruction) -> dict[str, str]:
    if "$" in ins.args:
        raise _refuse(dockerfile, ins, "ENV with a $substitution is not honoured by the local runtime")
    words = shlex.split(ins.args)
    if words and "=" not in words[0]:  # the legacy `ENV KEY value with spaces` form
        return {words[0]: " ".join(words[1:])}
    pairs = {}
    for word in words:
        key, eq, value = word.partition("=")
        if not eq:
            raise _refuse(dockerfile, ins, f"cannot read {word!r} as KEY=value")
        pairs[key] = value
    return pairs


def _copy_args(dockerfile: Path, ins: Instruction) -> tuple[list[str], str]:
    text = ins.args
    words = json.loads(text) if text.startswith("[") else shlex.split(text)
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    if any(not f.startswith(("--chown=", "--chmod=")) for f in flags):
        raise _refuse(dockerfile, ins, "COPY --from or other flags are not honoured by the local runtime")
    if len(paths) < 2:
        raise _refuse(dockerfile, ins, "COPY needs a source and a destination")
    context = dockerfile.parent.resolve()
    for source in paths[:-1]:
        if any(ch in source for ch in "*?["):
            raise _refuse(dockerfile, ins, f"COPY wildcards ({source}) are not honoured by the local runtime")
        resolved = (context / source).resolve()
        if resolved != context and context not in resolved.parents:
            raise _refuse(dockerfile, ins, f"{source} is outside the build context")
        if not resolved.exists():
            raise _refuse(dockerfile, ins, f"{source} does not exist in {context}")
    return paths[:-1], paths[-1]


def _pip_packages(dockerfile: Path, ins: Instruction) -> list[str]:
    """The packages of a `RUN pip install ...` line; any other RUN is refused."""
    if ins.args.startswith("["):
        words = json.loads(ins.args)
    else:
        if not _PIP_RUN.match(ins.args):
            raise _refuse(dockerfile, ins, _ONLY_PIP)
        if _SHELL.search(ins.args):
            raise _refuse(dockerfile, ins, "a RUN with shell operators is not honoured by the local runtime")
        words = shlex.split(ins.args)
    if words[:1] and words[0] in _PIP[0]:
        rest = words[1:]
    elif words[:3] and words[0] in _PIP[1] and words[1:3] == ["-m", "pip"]:
        rest = words[3:]
    else:
        raise _refuse(dockerfile, ins, _ONLY_PIP)
    if rest[:1] != ["install"]:
        raise _refuse(dockerfile, ins, "only `pip install` is honoured by the local runtime")
    packages = [w for w in rest[1:] if not w.startswith("-")]
    if unknown := [w for w in rest[1:] if w.startswith("-") and w not in _PIP_FLAGS]:
        raise _refuse(dockerfile, ins, f"pip options {unknown} are not honoured by the local runtime")
    if not packages:
        raise _refuse(dockerfile, ins, "pip install names no package")
    return packages


def _refuse(dockerfile: Path, ins: Instruction, why: str) -> LocalRefused:
    return LocalRefused(
        f"{dockerfile}:{ins.line}: `{ins.keyword} {ins.args}`: {why}. Run this task with runtime='docker'"
    )
