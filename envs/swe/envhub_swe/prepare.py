"""Prepare a real SWE-bench instance for the local runtime: a checkout at base_commit and its environment
built the way the official harness builds it. (The docker runtime needs no preparation: it runs the
row's official image, see `official_runtime`.)

`envhub swe prepare --instance ID --repo CLONE` makes, under the workspaces root:

    ROOT/ID/repo                 a clone of CLONE at base_commit (shared objects; no branch, and
                                 only the tags base_commit contains, as in the official image)
    ROOT/ID/venv                 the environment: a copy of the spec's Python (as a conda env is a
                                 prefix of its own; a venv for /usr's interpreters) with the harness's
                                 packages and the repository installed as the spec says (`-e .` too)
    ROOT/ID/envhub-workspace.json  the manifest: written last, so a workspace without it is unfinished

The steps are the official harness's scripts adapted to a venv (`specs.py`). The editable install is
made from ROOT/ID/repo, then every path to it in the venv (`.pth`, editable finders, egg-links) is
rewritten to /testbed, where the sandbox holds the repository: the venv imports the sandbox's copy,
src layouts and generated modules (`_version.py`) included. Tracked files the set-up changed are kept
when they are test configuration (sphinx's `tox.ini` gains `-rA`, which the grader never takes from a
submission) and restored otherwise (install-time pins in `setup.py`), so the workspace is base_commit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from envhub.sandbox.workspace import image_present, open_to_sandbox
from envhub_swe.data import Instance
from envhub_swe.patches import TEST_INFRA, MalformedPatch, parse_patch
from envhub_swe.pythons import Interpreter, NoInterpreter, choose, probe, sandbox_binds, traversable
from envhub_swe.runtime import (
    DEFAULT_TIMEOUT_S,
    TESTBED,
    Runtime,
    RuntimeKind,
    _git,
    _sandbox_python,
    cache_root,
)
from envhub_swe.specs import NoSpec, SetupPlan, Step, setup_plan

MANIFEST = "envhub-workspace.json"


class Unsupported(RuntimeError):
    """This instance cannot run in a local environment here; the message says why and what to do."""


class SetupFailed(RuntimeError):
    """A step of the environment's set-up failed; nothing half-made is left behind (see `log`)."""

    def __init__(self, message: str, log: Path) -> None:
        super().__init__(f"{message}\nThe whole set-up log is in {log}")
        self.log = log


class Workspace(BaseModel):
    """What `prepare` made for one instance, and how: the manifest that marks a finished workspace."""

    model_config = ConfigDict(frozen=True)

    instance_id: str
    base_commit: str
    python: str
    """The interpreter's X.Y.Z."""
    interpreter: str
    """Its executable (the venv's base), bound into the sandbox at its own prefix."""
    spec_python: str
    """The X.Y the official spec names."""
    source: str
    steps: list[dict[str, object]]
    kept_changes: list[str]
    """Tracked files the set-up changed and the workspace keeps (test configuration only)."""
    restored: list[str]
    """Tracked files the set-up changed (install-time only) and prepare restored to base_commit."""
    rebased: list[str]
    """Files of the venv whose paths to the repository were rewritten to /testbed."""


def prepare(
    instance: Instance,
    clone: Path,
    root: Path,
    *,
    python: str | None = None,
    plan: SetupPlan | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    on_output: Callable[[str], None] | None = None,
) -> Path:
    """Make ROOT/ID/{repo,venv} for `instance` from a local clone of its repository; returns ROOT/ID.

    `python` picks the interpreter (a path, or an X.Y to look up) instead of the spec's version;
    `plan` replaces the official set-up (tests use small offline plans); `timeout_s` bounds each step.
    A finished workspace is reused; a failed one is removed, its log kept beside it.
    """
    root = root.expanduser().resolve()
    clone = clone.expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    if not traversable(root):
        raise Unsupported(
            f"the workspaces root {root} is closed to other users, and the local sandbox's uid must read "
            "the workspace's venv: choose a root under a folder others can traverse (e.g. /tmp or /srv), "
            f"or open it (chmod o+x on every folder up to {root})"
        )
    dest = root / instance.instance_id
    if _finished(dest, instance) is not None:
        return dest
    _check_commit(clone, instance)
    repo, venv = dest / "repo", dest / "venv"
    try:
        plan = plan or setup_plan(instance, clone, str(repo))
        interpreter = _interpreter(plan.python, python, instance)
    except NoSpec as exc:
        raise Unsupported(f"{instance.instance_id}: {exc}") from exc
    _check_downloads(plan, instance.instance_id)
    shutil.rmtree(dest, ignore_errors=True)  # an unfinished workspace is never reused
    dest.mkdir(parents=True)
    log = SetupLog(root / f"{instance.instance_id}.prepare.log", on_output)
    try:
        workspace = _build(instance, clone, repo, venv, plan, interpreter, timeout_s, log)
    except (Unsupported, SetupFailed):
        shutil.rmtree(dest, ignore_errors=True)
        raise
    except RuntimeError as exc:  # git or the file system: said as a set-up failure, with the log
        shutil.rmtree(dest, ignore_errors=True)
        raise SetupFailed(str(exc), log.path) from exc
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    finally:
        log.close()
    log.path.replace(dest / "prepare.log")
    (dest / MANIFEST).write_text(workspace.model_dump_json(indent=2))
    return dest


def _finished(dest: Path, instance: Instance) -> Workspace | None:
    manifest = dest / MANIFEST
    if not manifest.exists():
        return None
    workspace = Workspace.model_validate_json(manifest.read_text())
    return workspace if workspace.base_commit == instance.base_commit else None


def _check_commit(clone: Path, instance: Instance) -> None:
    """Refuse a clone that lacks base_commit, naming why: not a git repository, a clone of another
    project (most of the files the row's patches change were never in its history), or the right project
    without that commit (a shallow or older clone)."""
    commit, instance_id = instance.base_commit, instance.instance_id
    found = subprocess.run(
        ["git", "-C", str(clone), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True, check=False
    )
    if found.returncode == 0:
        return
    upstream = f"https://github.com/{instance.repo}"
    if not _git_ok(clone, "rev-parse", "--git-dir"):
        raise Unsupported(
            f"{instance_id}: {clone} is not a git repository; pass --repo a clone of {upstream}"
        )
    paths = old_paths(instance)
    if not _has_history_of(clone, paths):
        origin = _git_out(clone, "config", "--get", "remote.origin.url")
        raise Unsupported(
            f"{instance_id}: {clone} is not a clone of {instance.repo}"
            + (f" (its origin is {origin})" if origin else "")
            + f": base commit {commit[:12]} is not in it, and most of the files the instance's patches "
            f"change (e.g. {paths[0]}) were never in its history; pass --repo a clone of {upstream}"
        )
    if _git_out(clone, "rev-parse", "--is-shallow-repository") == "true":
        raise Unsupported(
            f"{instance_id}: base commit {commit} is not in {clone}, a shallow clone of {instance.repo}: "
            f"fetch its full history (git -C {clone} fetch --unshallow) and prepare again"
        )
    raise Unsupported(
        f"{instance_id}: base commit {commit} is not in {clone}, a clone of {instance.repo} without that "
        f"commit (older than the row, or a fork's): fetch it (git -C {clone} fetch {upstream}) or clone "
        f"{upstream} afresh, and prepare again"
    )


def old_paths(instance: Instance) -> list[str]:
    """The files the gold and test patches change that existed before them: every clone of the row's
    repository has had them."""
    paths: list[str] = []
    for patch in (instance.patch, instance.test_patch):
        try:
            sections = parse_patch(patch)
        except MalformedPatch:
            continue
        paths += [s.old_path for s in sections if s.old_path is not None]
    return list(dict.fromkeys(paths))


def _has_history_of(clone: Path, paths: list[str]) -> bool:
    """Whether at least half of `paths` are in the clone: at HEAD, or else in any commit it holds. A
    repository of another project shares a `setup.py` or a `CHANGES.rst` at most, never the package's own
    modules and tests; the row's own project, however old or new the clone, has most of them."""
    if not paths:
        return True
    at_head = _git_out(clone, "ls-tree", "-r", "--name-only", "HEAD", "--", *paths).splitlines()
    seen = set(at_head) & set(paths)
    if 2 * len(seen) < len(paths):
        history = _git_out(clone, "log", "--all", "--name-only", "--format=", "--", *paths)
        seen |= set(history.splitlines()) & set(paths)
    return 2 * len(seen) >= len(paths)


def _git_ok(clone: Path, *args: str) -> bool:
    return subprocess.run(["git", "-C", str(clone), *args], capture_output=True, check=False).returncode == 0


def _git_out(clone: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(clone), *args], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def _check_complete(repo: Path, clone: Path, instance_id: str) -> None:
    """Every file of base_commit was checked out: a snapshot can lack some blobs (large data files)."""
    missing = _git(repo, "ls-files", "--deleted").splitlines()
    if missing:
        raise Unsupported(
            f"{instance_id}: {clone} lacks {len(missing)} file(s) of base_commit (e.g. {missing[0]}): the "
            "clone is incomplete (a snapshot without its large files?); clone the full repository"
        )


_URL = re.compile(r"\b(?:https?|ftp)://[^\s\"'<>]+")


def downloads(plan: SetupPlan) -> list[str]:
    """The URLs the plan's steps fetch themselves (a pre-install's `wget`, a requirement's
    `git+https://`), outside comments; the package index is not among them."""
    urls: list[str] = []
    for step in plan.steps:
        if step.run:
            lines = [line for line in step.command.splitlines() if not line.lstrip().startswith("#")]
            urls += [url for line in lines for url in _URL.findall(line)]
    return list(dict.fromkeys(urls))


def _unreachable(url: str) -> str | None:
    """Why this machine cannot open a connection to the URL's host, or None when it can."""
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443, "ftp": 21}[parts.scheme]
    try:
        socket.create_connection((parts.hostname or "", port), timeout=15).close()
    except OSError as exc:
        return str(exc) or type(exc).__name__
    return None


def _check_downloads(plan: SetupPlan, instance_id: str) -> None:
    """Refuse before building when a step would download from a host this machine cannot reach
    (matplotlib's qhull from qhull.org): the build would otherwise fail half-way."""
    for url in downloads(plan):
        why = _unreachable(url)
        if why is not None:
            raise Unsupported(
                f"{instance_id}: its official set-up downloads {url}, and this machine cannot reach "
                f"{urlsplit(url).hostname} ({why}); prepare it on a machine that can, or grade it with "
                "the docker runtime in the row's official image"
            )


def _interpreter(version: str, explicit: str | None, instance: Instance) -> Interpreter:
    if version == "3" and explicit is None:  # swe-mini: any Python 3 the sandbox already sees
        found = probe(_sandbox_python())
        assert found is not None
        return found
    try:
        return choose(version, explicit)
    except NoInterpreter as exc:
        raise Unsupported(
            f"{instance.instance_id} runs on Python {version} in the official harness: {exc}"
        ) from exc


def _build(
    instance: Instance,
    clone: Path,
    repo: Path,
    venv: Path,
    plan: SetupPlan,
    interpreter: Interpreter,
    timeout_s: float,
    log: SetupLog,
) -> Workspace:
    _git(repo.parent, "clone", "-q", "--shared", "--no-checkout", str(clone), str(repo))
    _git(repo, "checkout", "-q", "--detach", instance.base_commit)
    _check_complete(repo, clone, instance.instance_id)
    _keep_only_tags_before(repo)  # as the harness's clone: a version from git (setuptools_scm) needs them
    _make_environment(interpreter, venv, repo, timeout_s, log)
    done: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="envhub-swe-home-") as home:
        for step in plan.steps:
            done.append({"command": step.command, "run": step.run, "note": step.note})
            if not step.run:
                log.write(f"# skipped: {step.command.splitlines()[0]}  ({step.note})\n")
                continue
            _run_step(step, venv, repo, Path(home), timeout_s, log)
    kept, restored = _settle_tracked_changes(repo)
    rebased = rebase_paths(venv, repo, TESTBED)
    _keep_only_tags_before(repo)  # no branch or tag may lead to the fix (the set-up may have made some)
    _git(repo, "reflog", "expire", "--expire=now", "--all")
    open_to_sandbox(venv)
    return Workspace(
        instance_id=instance.instance_id,
        base_commit=instance.base_commit,
        python=".".join(map(str, interpreter.version)),
        interpreter=str(interpreter.executable),
        spec_python=plan.python,
        source=plan.source,
        steps=done,
        kept_changes=kept,
        restored=restored,
        rebased=rebased,
    )


class SetupLog:
    """The set-up's whole output, in a file beside the workspace (it outlives a failed one)."""

    def __init__(self, path: Path, on_output: Callable[[str], None] | None) -> None:
        self.path = path
        self._file = path.open("w")
        self._on_output = on_output

    def write(self, text: str) -> None:
        self._file.write(text)
        self._file.flush()
        if self._on_output is not None:
            self._on_output(text)

    def close(self) -> None:
        self._file.close()


def _keep_only_tags_before(repo: Path) -> None:
    """Delete every ref but the tags base_commit contains: no ref reaches a later commit, and `git
    describe` (setuptools_scm's version, also at the eval script's reinstall) sees what it sees in the
    harness's clone, which deletes the tags after base_commit's date."""
    merged = set(_git(repo, "tag", "--merged", "HEAD").splitlines())
    for ref in _git(repo, "for-each-ref", "--format=%(refname)").splitlines():
        if not (ref.startswith("refs/tags/") and ref.removeprefix("refs/tags/") in merged):
            _git(repo, "update-ref", "-d", ref)


def _run_step(step: Step, venv: Path, repo: Path, home: Path, timeout_s: float, log: SetupLog) -> None:
    """One set-up step in bash, the venv active, in the repository, as the harness's `set -euxo pipefail`
    script runs it; HOME is the build's own folder (the harness writes `$HOME/requirements.txt`)."""
    script = f". {venv}/bin/activate\nset -euxo pipefail\n{step.command}\n"
    log.write(f"$ {step.command}\n")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    for key in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CERT", "SSL_CERT_FILE"):
        if key in os.environ:
            env[key] = os.environ[key]
    _run(["/bin/bash", "-c", script], repo, timeout_s, log, f"`{step.command.splitlines()[0]}`", env)


def _run(
    argv: list[str],
    cwd: Path,
    timeout_s: float,
    log: SetupLog,
    what: str,
    env: dict[str, str] | None = None,
) -> None:
    """Run one command, its output streamed to the log; SetupFailed with the output's tail if it fails."""
    started = time.monotonic()
    process = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    timer = threading.Timer(timeout_s, lambda: os.killpg(process.pid, signal.SIGKILL))
    timer.start()
    tail: deque[str] = deque(maxlen=15)
    try:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode(errors="replace")
            tail.append(line.rstrip("\n"))
            log.write(line)
        code = process.wait()
    finally:
        timer.cancel()
    log.write(f"# exit {code} after {time.monotonic() - started:.1f} s\n")
    if code == -signal.SIGKILL and time.monotonic() - started >= timeout_s:
        raise SetupFailed(f"{what} timed out after {timeout_s:g} s (--timeout allows more)", log.path)
    if code != 0:
        shown = "\n".join(tail)
        raise SetupFailed(f"{what} failed (exit {code}):\n{shown}", log.path)


def _settle_tracked_changes(repo: Path) -> tuple[list[str], list[str]]:
    """Keep the set-up's changes to test configuration (the grader never takes those from a submission,
    so they hold at grading time as in the official image); restore every other tracked file."""
    changed = _git(repo, "diff", "--name-only", "HEAD").splitlines()
    kept = [path for path in changed if TEST_INFRA.search(path)]
    restored = [path for path in changed if path not in kept]
    if restored:
        _git(repo, "checkout", "-q", "HEAD", "--", *restored)
    return kept, restored


def rebase_paths(venv: Path, repo: Path, target: str) -> list[str]:
    """Rewrite the venv's paths to `repo` (editable finders, `.pth`, egg-links, direct_url.json,
    scripts) as `target`, where the sandbox holds the repository. Returns the files changed."""
    old = str(repo).encode()
    changed: list[str] = []
    for site in (venv / "lib").glob("python3*/site-packages"):
        candidates = [p for p in site.iterdir() if p.is_file()]
        candidates += list(site.glob("*.dist-info/direct_url.json")) + list(site.glob("*.egg-link"))
        candidates += list(site.glob("*.egg-info/*.txt"))
        for path in dict.fromkeys(candidates):
            if _replace_in(path, old, target.encode()):
                changed.append(str(path.relative_to(venv)))
    for script in (venv / "bin").iterdir():
        if script.is_file() and not script.is_symlink() and _replace_in(script, old, target.encode()):
            changed.append(str(script.relative_to(venv)))
    return changed


def _replace_in(path: Path, old: bytes, new: bytes) -> bool:
    """Replace in a new file (an environment's files may be hard links to the interpreter's own)."""
    if path.stat().st_size > 4 * 1024 * 1024:
        return False
    data = path.read_bytes()
    if old not in data or b"\0" in data[:4096]:
        return False
    fresh = path.with_name(f".{path.name}.envhub-new")
    fresh.write_bytes(data.replace(old, new))
    shutil.copymode(path, fresh)
    fresh.replace(path)
    return True


ACTIVATE = """# envhub: activates this environment (a copy of {prefix}: a prefix of its own, as conda's)
export PATH="{env}/bin:$PATH"
export ENVHUB_PYTHON_ENV="{env}"
hash -r 2>/dev/null || true
"""


def _make_environment(
    interpreter: Interpreter, env: Path, repo: Path, timeout_s: float, log: SetupLog
) -> None:
    """The environment the steps install into: like conda's `create -n testbed python=X`, a prefix of
    its own, so that even a link to its `python` (tox --current-env makes .tox/ENV/bin/python one) runs
    in it. A venv cannot do that (a linked venv python loses its pyvenv.cfg): interpreters outside /usr
    are copied whole, as hard links where possible; /usr's own get a venv (its prefix is the system's)."""
    if interpreter.visible_in_sandbox:
        create = [str(interpreter.executable), "-m", "venv", "--copies", str(env)]
        log.write(f"$ {' '.join(create)}\n")
        _run(create, repo, timeout_s, log, "creating the venv")
        return
    log.write(f"$ cp -al {interpreter.prefix} {env}  (a copy of the interpreter's prefix)\n")
    linked = subprocess.run(
        ["cp", "-al", str(interpreter.prefix), str(env)], capture_output=True, check=False
    )
    if linked.returncode != 0:
        shutil.rmtree(env, ignore_errors=True)
        shutil.copytree(interpreter.prefix, env, symlinks=True)
    old, new = str(interpreter.prefix).encode(), str(env).encode()
    for script in (env / "bin").iterdir():  # pip's and idle's #! lines name the original interpreter
        if script.is_file() and not script.is_symlink():
            _replace_in(script, old, new)
    (env / "bin" / "activate").write_text(ACTIVATE.format(prefix=interpreter.prefix, env=env))
    python = env / "bin" / f"python{interpreter.minor}"
    if not python.exists():
        raise SetupFailed(f"{interpreter.prefix} has no bin/python{interpreter.minor}", log.path)
    for name in ("python", "python3"):
        if not (env / "bin" / name).exists():
            (env / "bin" / name).symlink_to(python.name)


# -- using a prepared workspace ----------------------------------------------------------------------


def prepared(
    instance: Instance, root: Path | None, kind: RuntimeKind, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> tuple[Runtime, Path | None]:
    """The runtime and workspace of an instance: a checkout prepared under `root` (local), or the row's
    official image, whose own /testbed is the workspace (docker: workspace None)."""
    if kind == "docker":
        return official_runtime(instance, timeout_s=timeout_s), None
    if root is None:
        raise Unsupported(
            "the local runtime needs prepared workspaces: run `envhub swe prepare` and pass workspaces=ROOT"
        )
    root = root.expanduser().resolve()
    dest = root / instance.instance_id
    how = f"`envhub swe prepare --instance {instance.instance_id} --repo PATH_TO_CLONE --root {root}`"
    if not (dest / "repo" / ".git").exists():
        raise Unsupported(f"{instance.instance_id} is not prepared under {root}: run {how}")
    workspace = _finished(dest, instance)
    if workspace is None:
        raise Unsupported(
            f"{instance.instance_id}'s workspace under {root} is unfinished (its set-up failed or was "
            f"interrupted) or was made by an older envhub: run {how} again"
        )
    binds = _alternates(dest / "repo")
    interpreter = probe(Path(workspace.interpreter))
    if interpreter is None:
        raise Unsupported(
            f"{instance.instance_id}'s venv was made from {workspace.interpreter}, which no longer runs: "
            f"run {how} again"
        )
    binds.update(sandbox_binds(interpreter, cache_root()))
    runtime = Runtime(
        kind="local",
        python_env=dest / "venv",
        extra_binds=binds,
        disk_mb=4096,
        memory_mb=4096,
        pids=512,
        timeout_s=timeout_s,
    )
    return runtime, dest / "repo"


def _alternates(repo: Path) -> dict[str, str]:
    """The shared clone's object stores, bound at the paths its alternates file names them by."""
    alternates = repo / ".git" / "objects" / "info" / "alternates"
    if not alternates.exists():
        return {}
    return {line.strip(): line.strip() for line in alternates.read_text().splitlines() if line.strip()}


def official_runtime(instance: Instance, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Runtime:
    """The docker runtime in the row's own SWE-bench image (its `image` column), which must be on this
    machine's Docker engine: envhub never pulls."""
    image = instance.image
    if not image:
        raise Unsupported(
            f"{instance.instance_id} names no image (the row's `image` column is empty); the docker "
            "runtime grades in the official per-instance image, "
            "e.g. swebench/sweb.eval.x86_64.<owner>_1776_<id>:latest"
        )
    if not image_present(image):
        raise Unsupported(
            f"{instance.instance_id} runs in its official image {image}, which is not on this machine's "
            "Docker engine (or no engine answers: check `docker info`). Get it with "
            f"`docker pull {image}` on a machine that can reach Docker Hub; where this one cannot, "
            "`docker save` it there and `docker load` it here"
        )
    return Runtime(
        kind="docker",
        image=image,
        official_image=True,
        disk_mb=4096,
        memory_mb=4096,
        pids=512,
        timeout_s=timeout_s,
    )


def read_manifest(dest: Path) -> dict[str, object]:
    """A prepared workspace's manifest, as JSON (for reports)."""
    data: dict[str, object] = json.loads((dest / MANIFEST).read_text())
    return data


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `envhub swe prepare`")
