"""Where a Harbor task runs: a container built from its Dockerfile, or a bubblewrap sandbox on this machine.

Both give the env one `Workspace` (`envhub.sandbox.workspace`'s, shared with SWE): an open sandbox plus
the paths Harbor's scripts use inside it (`/tests`, `/logs/verifier`, `/solution`, the working
directory), and the two moves grading needs: `stage_tests` (after the agent is done) and `read_reward`.
What is Harbor's own is here: task.toml's limits as a policy, the image built from its Dockerfile, the
Dockerfile's local plan, and the stage of /tests, /logs and /solution.

docker: the image is built from environment/ by the local engine with no registry assumed (the FROM
images must already be loaded; a missing one is named), tagged by a hash of the build context so it is
built once, and run with the image's own filesystem writable (`IsolationPolicy(writable_image=True)`:
Harbor's tasks expect to work as the image's user, root by default), still with no capabilities, the
task's limits and its network policy.

local: the Dockerfile's plan (`dockerfile.local_plan`) runs in a `local` sandbox whose working directory
is the Dockerfile's WORKDIR. /tests is a read-only bind of a host folder that stays empty until the
agent's turn is over, so nothing of the agent's can be there when the tests arrive; /logs and /solution
are read-only binds whose entries are links into the sandbox's /tmp, the one place the tests and the
oracle can write them.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envhub.integrations.harbor.dockerfile import LocalPlan, LocalRefused, base_images, local_plan, parse
from envhub.integrations.harbor.task import HarborTask, HarborTaskError, resolve_env
from envhub.sandbox import IsolationPolicy, SandboxUnavailable
from envhub.sandbox import workspace as shared
from envhub.sandbox.bwrap import DEFAULT_PATH
from envhub.sandbox.workspace import (
    WORKSPACE_KINDS,
    WorkspaceKind,
    copy_in,
    open_sandbox,
    open_to_sandbox,
    require_image,
    sandbox_python,
)

Runtime = WorkspaceKind
RUNTIMES: tuple[str, ...] = WORKSPACE_KINDS

COMMAND_LIMIT_S = 600.0
"""The longest one agent command may run (the agent's own [agent].timeout_sec still bounds the total)."""
LOCAL_ROOT = "/tmp/.harbor"
"""local: where the links of /logs and /solution point, inside the sandbox's own /tmp."""
PIP_SITE = "/opt/envhub-harbor/site"
"""local: where the packages of `RUN pip install` are bound read-only, first on PYTHONPATH."""


@dataclass
class Workspace(shared.Workspace):
    """An open sandbox for one episode and the Harbor paths inside it."""

    tests: str = "/tests"
    logs: str = "/logs"
    """The tree the tests write below; emptied whole before they run (local: the real place /logs's links
    name)."""
    verifier_logs: str = "/logs/verifier"
    """Where the tests write; what the host reads the reward from (local: the real place the link names)."""
    solution: str = "/solution"
    """Where the oracle unpacks solution/ (local: the real place /solution's links name)."""

    @property
    def stage(self) -> Path | None:
        """local: the host folder whose tests/, logs/ and solution/ are bound into the sandbox."""
        return self.host_dir

    async def stage_tests(self, task: HarborTask) -> None:
        """Put a fresh copy of tests/ at /tests and an empty verifier folder, whatever the agent left there.

        Called only once the agent's turn is over: every command of the agent has ended, and with it
        every process it started (each exec kills what it leaves behind, in both backends).
        """
        # The whole tree goes, not just the reward files: a link the agent put at /logs or on the way
        # down would otherwise steer the tests' writes (or the host's read) somewhere it controls.
        script = 'rm -rf -- "$1" && mkdir -p -- "$2"'
        result = await self.sandbox.exec(
            ["/bin/sh", "-c", script, "sh", self.logs, self.verifier_logs], timeout=120
        )
        if not result.ok:
            raise HarborTaskError(f"could not empty {self.logs} for the tests: {result.stderr.strip()}")
        if self.stage is not None:  # local: the host folder bound read-only at /tests
            target = self.stage / "tests"
            await asyncio.to_thread(_replace_tree, task.tests_dir, target)
            return
        result = await self.sandbox.exec(
            ["/bin/sh", "-c", 'rm -rf -- "$1" && mkdir -p -- "$1"', "sh", self.tests], timeout=120
        )
        if not result.ok:
            raise HarborTaskError(f"could not empty {self.tests} for the tests: {result.stderr.strip()}")
        await self.sandbox.upload_dir(task.tests_dir, self.tests)
        await self.sandbox.exec(["chmod", "+x", f"{self.tests}/test.sh"], timeout=60)

    async def read_reward(self, name: str) -> bytes | None:
        """The bytes of reward.txt or reward.json as the tests left them; None when absent, ValueError
        when it is not a file the host reads (a link, a pipe: something the tests never write)."""
        try:
            return await self.sandbox.read_file(f"{self.verifier_logs}/{name}")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ValueError(f"{name} could not be read: {exc}") from None


def policy_for(
    task: HarborTask, workdir: str, env: dict[str, str], *, writable_image: bool
) -> IsolationPolicy:
    """The task's [environment] limits and network policy as an `IsolationPolicy`."""
    c = task.config
    longest = max(COMMAND_LIMIT_S, c.verifier.timeout_sec or 0.0, c.agent.timeout_sec or 0.0)
    return IsolationPolicy(
        network=task.network,
        memory_mb=c.environment.memory_mb or 2048,
        cpus=c.environment.cpus or 1.0,
        disk_mb=c.environment.storage_mb or 1024,
        pids=256,
        max_files=200_000,
        wall_time_s=longest,
        workdir=workdir,
        env={**env, **resolve_env(c.environment.env)},
        writable_image=writable_image,
    )


# -- docker -----------------------------------------------------------------------------------------


async def open_docker(task: HarborTask) -> Workspace:
    image = task.config.environment.docker_image or await build_image(task)
    config = await asyncio.to_thread(require_image, image)
    workdir = task.config.environment.workdir or config.get("WorkingDir") or "/root"
    policy = policy_for(task, workdir, {}, writable_image=True)
    sandbox = await open_sandbox("docker", policy, image=image)
    made = await sandbox.exec(["mkdir", "-p", "/logs/agent", "/logs/verifier", workdir], timeout=60)
    if not made.ok:
        await sandbox.close()
        raise HarborTaskError(f"the image's user cannot create /logs in {image}: {made.stderr.strip()}")
    return Workspace(sandbox=sandbox, kind="docker", workdir=workdir, notes={"image": image})


def _docker() -> Any:
    import docker

    return docker.from_env(timeout=600)


def context_digest(directory: Path) -> str:
    """A hash of the build context (paths, modes, contents): the image is rebuilt only when it changes."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(directory).as_posix()}\0{path.stat().st_mode & 0o777:o}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def image_tag(task: HarborTask) -> str:
    slug = re.sub(r"[^a-z0-9_.-]+", "-", task.name.lower()).strip("-.") or "task"
    return f"envhub-harbor/{slug}:{context_digest(task.environment_dir)}"


async def build_image(task: HarborTask) -> str:
    """The task's image, built from environment/ unless an image of the same build context exists."""
    tag = image_tag(task)
    timeout = task.config.environment.build_timeout_sec
    try:
        await asyncio.wait_for(asyncio.to_thread(_build, task, tag), timeout)
    except TimeoutError:
        raise HarborTaskError(
            f"building {task.dockerfile} took longer than [environment].build_timeout_sec = {timeout:g} s"
        ) from None
    return tag


def _build(task: HarborTask, tag: str) -> None:
    import docker.errors

    client = _docker()
    try:
        try:
            client.images.get(tag)
            return
        except docker.errors.ImageNotFound:
            pass
        for base in base_images(parse(task.dockerfile.read_text())):
            try:
                client.images.get(base)
            except docker.errors.ImageNotFound:
                raise SandboxUnavailable(
                    f"{task.dockerfile} starts FROM {base}, which is not loaded in the local Docker engine "
                    f"(no registry is assumed): `docker pull {base}` where a registry is reachable, or "
                    "`docker load` it"
                ) from None
        try:
            client.images.build(
                path=str(task.environment_dir),
                tag=tag,
                rm=True,
                forcerm=True,
                pull=False,
                network_mode=None if task.network else "none",
            )
        except docker.errors.BuildError as exc:
            log = "".join(str(part.get("stream", "")) for part in exc.build_log)[-3000:]
            raise HarborTaskError(f"building {task.dockerfile} failed: {exc.msg}\n{log}") from None
    finally:
        client.close()


# -- local ------------------------------------------------------------------------------------------


def pip_site(python: str, packages: list[str]) -> Path:
    """A folder holding `packages` installed for `python` (pip's configured indexes, no network assumed
    beyond them), made once per package list and reused; readable by the sandbox's unprivileged uid."""
    key = hashlib.sha256(f"{python}\0{chr(0).join(packages)}".encode()).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / "envhub-harbor-pip"
    root.mkdir(mode=0o755, exist_ok=True)
    site = root / key
    if site.is_dir():
        return site
    building = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=root))
    result = subprocess.run(
        [  # this venv's pip, installing for `python`: a fresh machine's system Python may have no pip
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--no-input",
            "--disable-pip-version-check",
            "--target",
            str(building),
            *packages,
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if result.returncode != 0:
        shutil.rmtree(building, ignore_errors=True)
        raise HarborTaskError(
            f"`pip install {' '.join(packages)}` for the local runtime failed:\n{result.stderr[-3000:]}"
        )
    open_to_sandbox(building)
    try:
        building.rename(site)
    except OSError:  # another process made it first
        shutil.rmtree(building, ignore_errors=True)
    return site


def _replace_tree(source: Path, target: Path) -> None:
    """Fill the bound folder in place: the sandbox's bind (in the mount namespace its exec server keeps
    for the sandbox's life) holds this directory itself, so a new one at the same path is never seen."""
    target.mkdir(mode=0o755, exist_ok=True)
    for entry in target.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    shutil.copytree(source, target, symlinks=False, dirs_exist_ok=True)
    open_to_sandbox(target)
    (target / "test.sh").chmod(0o755)


def _link_stage(task: HarborTask, stage: Path) -> None:
    """Host folders bound at /tests (empty), /logs and /solution (links into the sandbox's /tmp)."""
    stage.chmod(0o755)
    (stage / "tests").mkdir(mode=0o755)
    logs = stage / "logs"
    logs.mkdir(mode=0o755)
    for name in ("agent", "verifier", "artifacts"):
        (logs / name).symlink_to(f"{LOCAL_ROOT}/logs/{name}")
    solution = stage / "solution"
    solution.mkdir(mode=0o755)
    if task.solution_dir.is_dir():
        for entry in task.solution_dir.iterdir():
            (solution / entry.name).symlink_to(f"{LOCAL_ROOT}/solution/{entry.name}")


def plan_local(task: HarborTask) -> tuple[LocalPlan, str]:
    """The local plan of the task and the sandbox's python, or LocalRefused saying why it cannot run here."""
    if task.config.environment.docker_image is not None:
        raise LocalRefused(
            f"{task.path}: [environment].docker_image names a prebuilt image; only runtime='docker' runs it"
        )
    plan = local_plan(task.dockerfile)
    found, version = sandbox_python()
    python = str(found)
    if plan.python is not None and plan.python != version:
        raise LocalRefused(
            f"{task.dockerfile} asks for Python {plan.python}; the local runtime runs this machine's "
            f"{python} ({version}). Run this task with runtime='docker'"
        )
    if task.config.environment.workdir not in (None, plan.workdir):
        raise LocalRefused(f"{task.path}: [environment].workdir differs from the Dockerfile's WORKDIR")
    return plan, python


async def open_local(task: HarborTask, planned: tuple[LocalPlan, str] | None = None) -> Workspace:
    if planned is None:
        planned = await asyncio.to_thread(plan_local, task)
    plan, python = planned
    env = dict(plan.env)
    binds: dict[str, str] = {}
    if plan.pip:
        site = await asyncio.to_thread(pip_site, python, plan.pip)
        binds[str(site)] = PIP_SITE
        env["PYTHONPATH"] = PIP_SITE + (f":{env['PYTHONPATH']}" if env.get("PYTHONPATH") else "")
        env.setdefault("PATH", f"{PIP_SITE}/bin:{DEFAULT_PATH}")
    stage = Path(tempfile.mkdtemp(prefix="envhub-harbor-"))
    try:
        await asyncio.to_thread(_link_stage, task, stage)
        binds.update(
            {
                str(stage / "tests"): "/tests",
                str(stage / "logs"): "/logs",
                str(stage / "solution"): "/solution",
            }
        )
        policy = policy_for(task, plan.workdir, env, writable_image=False).model_copy(
            update={"ro_binds": binds}
        )
        sandbox = await open_sandbox("local", policy)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    workspace = Workspace(
        sandbox=sandbox,
        kind="local",
        workdir=plan.workdir,
        logs=LOCAL_ROOT,
        verifier_logs=f"{LOCAL_ROOT}/logs/verifier",
        solution=f"{LOCAL_ROOT}/solution",
        host_dir=stage,
        notes={"python": python, "pip": " ".join(plan.pip)},
    )
    try:
        made = await sandbox.exec(["mkdir", "-p", f"{LOCAL_ROOT}/logs/agent", f"{LOCAL_ROOT}/logs/verifier"])
        if not made.ok:
            raise HarborTaskError(f"could not create {LOCAL_ROOT} in the sandbox: {made.stderr.strip()}")
        for source, dest in plan.copies:
            await copy_in(sandbox, task.environment_dir / source, dest)
    except BaseException:
        await workspace.close()
        raise
    return workspace


async def open_workspace(
    task: HarborTask, runtime: Runtime, planned: tuple[LocalPlan, str] | None = None
) -> Workspace:
    """A fresh workspace for one episode; `planned` is `plan_local`'s answer when the caller has it."""
    if shared.checked_kind(runtime) == "docker":
        return await open_docker(task)
    return await open_local(task, planned)
