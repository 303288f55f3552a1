"""Where a repository runs: the workspace (the repo at base_commit), the sandbox, and grading in it.

Runtimes:

- `local`: a bubblewrap sandbox over the host's /usr; the repository is copied into `/testbed` and a
  Python environment (a venv whose interpreter lives under /usr) is bound read-only at its own host
  path, so that its scripts' `#!` lines and its `activate` work unchanged.
- `docker`: a container of `image` (swe-mini's image, or an image with the same layout); the
  repository is copied into `/testbed` the same way and the image's own Python runs the tests.
- `docker` with `official_image`: a container of the row's SWE-bench image, whose `/testbed` (root's,
  at base_commit) and conda environment are the workspace; nothing is uploaded, the sandbox keeps the
  image's filesystem writable (`IsolationPolicy.writable_image`) and the eval script its activation.
"""

from __future__ import annotations

import asyncio
import io
import os
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Literal

import envhub.sandbox
from envhub.sandbox import IsolationPolicy, Sandbox, SandboxUnavailable
from envhub_swe.data import MINI_DATA, Instance
from envhub_swe.evaluation import GradeReport, adapt_eval_script, filter_patch, grade_log

RuntimeKind = Literal["local", "docker"]
TESTBED = "/testbed"
MINI_IMAGE = "envhub/swe-mini:bookworm"
CONDA = "/opt/miniconda3"
"""Where SWE-bench's official images keep conda; their eval scripts activate its `testbed` env."""
MINI_TEST_PACKAGES = ("pytest",)
"""What swe-mini's tests need besides the standard library (with their own dependencies)."""


def cache_root() -> Path:
    """$ENVHUB_SWE_CACHE, else a folder under the system temp dir.

    Not under ~/.cache: the local sandbox's uid must traverse to the bound environment, and root's home
    is closed to it.
    """
    root = os.environ.get("ENVHUB_SWE_CACHE") or Path(tempfile.gettempdir()) / f"envhub-swe-{os.getuid()}"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class Runtime:
    """How to run one instance: the sandbox kind, its image or Python environment, and the limits."""

    kind: RuntimeKind = "local"
    image: str | None = None
    """docker: the image to grade in."""
    official_image: bool = False
    """docker: `image` is laid out like SWE-bench's per-instance images (the repository at base_commit in
    its own /testbed, root's, and conda at /opt/miniconda3): work in the image's filesystem as its user,
    keep the eval script's conda activation, upload nothing."""
    python_env: Path | None = None
    """local: a venv (interpreter under /usr), bound read-only at the same path."""
    skip_install: bool = True
    """Drop the eval script's `pip install -e .`: it needs a package index the sandbox cannot reach."""
    extra_binds: dict[str, str] = field(default_factory=dict)
    """local: more read-only binds (a prepared workspace's git alternates)."""
    memory_mb: int = 2048
    disk_mb: int = 512
    pids: int = 128
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if self.official_image and self.kind != "docker":
            raise ValueError("official_image is a docker runtime's image layout; use kind='docker'")

    def policy(self) -> IsolationPolicy:
        binds = dict(self.extra_binds)
        if self.kind == "local" and self.python_env is not None:
            binds[str(self.python_env)] = str(self.python_env)
        return IsolationPolicy(
            memory_mb=self.memory_mb,
            disk_mb=self.disk_mb,
            max_files=200_000,
            pids=self.pids,
            cpus=1.0,
            wall_time_s=self.timeout_s,
            max_output_bytes=16 * 1024 * 1024,
            workdir=TESTBED,
            writable_image=self.official_image,
            ro_binds=binds,
            env={
                "HOME": "/tmp",
                "GIT_CONFIG_NOSYSTEM": "1",
                "LANG": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1",
            },
        )

    @property
    def activation(self) -> str | None:
        """What replaces the script's conda activation: the bound venv's, nothing in swe-mini's image, or
        None (the script's own) in an official image."""
        if self.official_image:
            return None
        if self.kind == "local":
            return f". {self.python_env}/bin/activate" if self.python_env is not None else ""
        return ""

    @property
    def shell_env(self) -> dict[str, str]:
        """The agent's shell variables: in an official image, its testbed conda environment, active as
        the image's ~/.bashrc makes it for an interactive shell (grading activates it in its own script)."""
        if not self.official_image:
            return {}
        prefix = f"{CONDA}/envs/testbed"
        path = f"{prefix}/bin:{CONDA}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        return {"PATH": path, "CONDA_PREFIX": prefix, "CONDA_DEFAULT_ENV": "testbed"}

    async def open(self) -> Sandbox:
        """A fresh sandbox for this runtime; SandboxUnavailable says what is missing."""
        if self.kind == "local":
            return await envhub.sandbox.open("local", policy=self.policy())
        if self.kind == "docker":
            return await envhub.sandbox.open("docker", policy=self.policy(), image=self.image or MINI_IMAGE)
        raise ValueError(f"unknown runtime {self.kind!r}; choose local or docker")


def docker_image_present(image: str) -> bool:
    """Whether a Docker engine answers and has `image` (no pull: no registry is assumed)."""
    if shutil.which("docker") is None:
        return False
    done = subprocess.run(["docker", "image", "inspect", image], capture_output=True, timeout=30)
    return done.returncode == 0


# -- workspaces ---------------------------------------------------------------------------------------


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {done.stderr.strip()}")
    return done.stdout.strip()


def _commit_env() -> dict[str, str]:
    return {"GIT_COMMITTER_NAME": "envhub", "GIT_COMMITTER_EMAIL": "envhub@invalid"}


def mini_workspace(instance: Instance) -> Path:
    """swe-mini's repository at base_commit, with no history after it (the fix is in the bundle)."""
    dest = cache_root() / "workspaces" / instance.instance_id
    if (dest / ".git").is_dir() and _git(dest, "rev-parse", "HEAD") == instance.base_commit:
        return dest
    bundle = MINI_DATA / f"{instance.repo.split('/')[1]}.bundle"
    tmp = Path(tempfile.mkdtemp(dir=dest.parent.parent if dest.parent.exists() else cache_root()))
    _git(tmp, "init", "-q", "-b", "main")
    _git(tmp, "fetch", "-q", "--no-tags", str(bundle), f"refs/tags/{instance.instance_id}")
    _git(tmp, "checkout", "-q", "-B", "main", "FETCH_HEAD")
    (tmp / ".git" / "FETCH_HEAD").unlink()
    _git(tmp, "config", "user.name", "envhub")
    _git(tmp, "config", "user.email", "envhub@invalid")
    if _git(tmp, "rev-parse", "HEAD") != instance.base_commit:
        raise RuntimeError(f"{bundle} gives the wrong base commit for {instance.instance_id}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def _sandbox_python() -> Path:
    """An interpreter under /usr: the only one the local sandbox can see."""
    for candidate in (
        f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}",
        "/usr/bin/python3",
    ):
        if Path(candidate).exists():
            return Path(candidate)
    raise SandboxUnavailable("the local runtime needs a Python under /usr (apt-get install python3)")


def _with_dependencies(names: tuple[str, ...]) -> list[metadata.Distribution]:
    """The installed distributions of `names` and everything they require here."""
    from packaging.requirements import Requirement

    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in found:
            continue
        try:
            found[key] = dist = metadata.distribution(name)
        except metadata.PackageNotFoundError as exc:
            raise SandboxUnavailable(
                f"swe-mini's local runtime copies {name} from this Python environment; pip install {name}"
            ) from exc
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(found.values())


def mini_python_env() -> Path:
    """A venv for swe-mini's tests: /usr's Python plus pytest, copied offline from this environment."""
    dest = cache_root() / "mini-env"
    if (dest / ".complete").exists():
        return dest
    tmp = Path(tempfile.mkdtemp(dir=cache_root()))
    # Made at its final path (the venv's activate script names it), then filled in a temp folder.
    shutil.rmtree(dest, ignore_errors=True)
    subprocess.run([str(_sandbox_python()), "-m", "venv", "--without-pip", str(dest)], check=True)
    shutil.rmtree(tmp)
    dest.rename(tmp)
    site = next((tmp / "lib").glob("python3*/site-packages"))
    for dist in _with_dependencies(MINI_TEST_PACKAGES):
        for file in dist.files or ():
            source = Path(str(dist.locate_file(file)))
            if source.is_file() and not str(file).startswith(".."):
                target = site / file
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
    (tmp / "bin" / "pytest").write_text(
        f"#!{dest}/bin/python\nimport sys\nfrom pytest import console_main\nsys.exit(console_main())\n"
    )
    (tmp / "bin" / "pytest").chmod(0o755)
    for path in tmp.rglob("*"):
        path.chmod(path.stat().st_mode | 0o444 | (0o111 if path.is_dir() else 0))
    tmp.chmod(0o755)
    (tmp / ".complete").touch()
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def mini_runtime(kind: RuntimeKind = "local", **options: object) -> Runtime:
    """The runtime swe-mini runs in: local (venv with pytest) or docker (sandboxes/swe-mini image)."""
    if kind == "local":
        return Runtime(kind="local", python_env=mini_python_env(), **options)  # type: ignore[arg-type]
    return Runtime(kind="docker", image=MINI_IMAGE, **options)  # type: ignore[arg-type]


def _tar(directory: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(directory, arcname=".")
    return buffer.getvalue()


async def load_workspace(sandbox: Sandbox, workspace: Path) -> None:
    """Copy the repository (with its .git) into /testbed, as one archive unpacked inside the sandbox."""
    data = await asyncio.to_thread(_tar, workspace)
    await sandbox.write_file("/tmp/envhub-workspace.tar", data)
    result = await sandbox.exec(
        f"tar -xf /tmp/envhub-workspace.tar -C {TESTBED} --no-same-owner && rm /tmp/envhub-workspace.tar",
        timeout=120,
    )
    if not result.ok:
        raise envhub.InfrastructureError(f"unpacking the workspace failed: {result.stderr.strip()[-500:]}")


IMAGE_REPO_CHECK = f"""cd {TESTBED} || exit 3
head=$(git rev-parse HEAD) || exit 3
[ "$head" = "$1" ] || {{ echo "{TESTBED} is at $head, not the row's base_commit $1" >&2; exit 3; }}
"""
IMAGE_REPO_HIDE = """set -e
git config core.fileMode false
git checkout -q --detach "$1"
git for-each-ref --format='delete %(refname)' | git update-ref --stdin
git reflog expire --expire=now --all
dirty=$(git status --porcelain --untracked-files=no)
[ -z "$dirty" ] || { echo "the image changed tracked files after base_commit: $dirty" >&2; exit 3; }
git ls-files -z --others --exclude-standard --directory
"""
"""The agent's copy of the image's repository: the SWE-bench harness leaves it `chmod -R 777`
(ignored, as its own eval scripts do), its clone's tags may reach later commits (deleted, as `prepare`
does for the local runtime), and the install leaves untracked files (excluded from the submission)."""


async def check_image_repo(sandbox: Sandbox, base_commit: str, *, for_agent: bool = False) -> None:
    """Check that the image's /testbed is the row's base_commit; for the agent, also hide the history
    after it and leave the image's own untracked files (e.g. `*.egg-info`) out of the submission."""
    script = IMAGE_REPO_CHECK + (IMAGE_REPO_HIDE if for_agent else "")
    result = await sandbox.exec(["/bin/sh", "-c", script, "sh", base_commit], timeout=120)
    if not result.ok:
        raise envhub.InfrastructureError(
            f"the image's {TESTBED} is not usable for this row: {result.stderr.strip()[-500:]}"
        )
    untracked = [path for path in result.stdout.split("\0") if path]
    if untracked:
        patterns = "".join(f"/{_gitignore_escape(path)}\n" for path in untracked)
        append = f"mkdir -p {TESTBED}/.git/info && cat >> {TESTBED}/.git/info/exclude"
        done = await sandbox.exec(append, stdin=patterns, timeout=30)
        if not done.ok:
            raise envhub.InfrastructureError(f"excluding the image's untracked files failed: {done.stderr}")


def _gitignore_escape(path: str) -> str:
    """A literal path as a .gitignore pattern (its glob characters, `!`, `#`, and trailing blanks escaped)."""
    escaped = "".join(f"\\{c}" if c in "\\*?[]!#" else c for c in path)
    stripped = escaped.rstrip(" ")
    return stripped + "\\ " * (len(escaped) - len(stripped))


async def open_workspace(sandbox: Sandbox, workspace: Path | None, base_commit: str) -> None:
    """Make /testbed the agent's workspace: the uploaded checkout, or (None) the image's own repository."""
    if workspace is None:
        await check_image_repo(sandbox, base_commit, for_agent=True)
    else:
        await load_workspace(sandbox, workspace)


DIFF_COMMAND = (
    f"cd {TESTBED} && git add -A >/dev/null 2>&1; git -c core.fileMode=false diff --cached --binary {{base}}"
)
"""The submission: every change to the working tree since base_commit, new files included."""


async def current_patch(sandbox: Sandbox, base_commit: str) -> str:
    result = await sandbox.exec(DIFF_COMMAND.format(base=base_commit), timeout=60)
    if result.exit_code != 0:
        raise envhub.InfrastructureError(f"git diff failed in the workspace: {result.stderr.strip()[-500:]}")
    return result.stdout


async def _apply(sandbox: Sandbox, patch: str) -> str | None:
    """Apply the submission like the harness: git apply, then with --reject, then patch --fuzz."""
    if not patch.strip():
        return None
    await sandbox.write_file("/tmp/envhub-submission.patch", patch if patch.endswith("\n") else patch + "\n")
    for command in (
        "git apply --verbose /tmp/envhub-submission.patch",
        "git apply --verbose --reject /tmp/envhub-submission.patch",
        "patch --batch --fuzz=5 -p1 -i /tmp/envhub-submission.patch",
    ):
        result = await sandbox.exec(f"cd {TESTBED} && {command}", timeout=60)
        if result.ok:
            return None
    return f"the patch does not apply: {(result.stdout + result.stderr).strip()[-300:]}"


async def grade(
    instance: Instance,
    patch: str,
    runtime: Runtime,
    workspace: Path | None,
    *,
    on_log: Callable[[str], None] | None = None,
) -> GradeReport:
    """Grade `patch` in a fresh sandbox: the repo at base_commit (uploaded from `workspace`, or the
    image's own when None), the patch without test changes, then the row's own eval script (which resets
    the test files and applies the hidden test patch)."""
    started = time.monotonic()
    nonce = secrets.token_hex(8)
    kept, dropped = filter_patch(patch)
    script = adapt_eval_script(
        instance.eval_script, nonce=nonce, activation=runtime.activation, skip_install=runtime.skip_install
    )
    async with await runtime.open() as sandbox:
        if workspace is None:
            await check_image_repo(sandbox, instance.base_commit)
        else:
            await load_workspace(sandbox, workspace)
        problem = await _apply(sandbox, kept)
        log = ""
        if problem is None:
            await sandbox.write_file("/tmp/envhub-eval.sh", script)
            # stdout and stderr merged in order: with `set -x` the markers go to stderr.
            result = await sandbox.exec(["/bin/bash", "-c", "exec 2>&1; bash /tmp/envhub-eval.sh"])
            log = result.stdout
            if result.timed_out:
                problem = f"the evaluation timed out after {runtime.timeout_s:g} s"
            elif result.oom_killed:
                problem = "the evaluation ran out of memory"
    if on_log is not None:
        on_log(log)
    return grade_log(
        instance,
        log,
        nonce=nonce,
        problem=problem,
        dropped_files=dropped,
        runtime=runtime.kind,
        duration_s=round(time.monotonic() - started, 3),
    )
