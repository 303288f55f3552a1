"""Where a repository runs: the workspace (the repo at base_commit), the sandbox, and grading in it.

Runtimes:

- `local`: a bubblewrap sandbox over the host's /usr; the repository is copied into `/testbed` and a
  Python environment (a venv, and the interpreter it was made from) is bound read-only at its own
  host path, so that its scripts' `#!` lines and its `activate` work unchanged.
- `docker`: a container of `image` (swe-mini's image, or an image with the same layout); the
  repository is copied into `/testbed` the same way and the image's own Python runs the tests.
- `docker` with `official_image`: a container of the row's SWE-bench image, whose `/testbed` (root's,
  at base_commit) and conda environment are the workspace; nothing is uploaded, the sandbox keeps the
  image's filesystem writable (`IsolationPolicy.writable_image`) and the eval script its activation.

The sandbox of either kind is opened, and the repository copied in, by `envhub.sandbox.workspace`, the
workspace runtime SWE shares with Harbor; what is SWE's own is here: the limits and binds, the Python
environments, the image's repository checks, the submission's diff and the guarded grading.
"""

from __future__ import annotations

import dataclasses
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

import envhub.sandbox
from envhub.sandbox import IsolationPolicy, Sandbox, SandboxUnavailable
from envhub.sandbox.workspace import WorkspaceKind, copy_in, open_sandbox, open_to_sandbox, sandbox_python
from envhub_swe.canaries import Canaries, candidates, command_with, plan, to_read
from envhub_swe.data import MINI_DATA, Instance
from envhub_swe.evaluation import END, START, EvalSteps, GradeReport, adapt_eval_script, grade_log
from envhub_swe.monitor import added_lines, scan
from envhub_swe.parsers import parser_name
from envhub_swe.patches import (
    RUNNER_MODULES,
    FilteredPatch,
    Guard,
    MalformedPatch,
    filter_patch,
    parse_patch,
    runner_paths,
)
from envhub_swe.runner_config import CONFIG_NAME, KNOWN_CONFIG_NAMES, PROBE, RunnerFacts, runner_files
from envhub_swe.tamper_guard import GUARD_DIR, SANDBOX_DIR, GuardRun

RuntimeKind = WorkspaceKind
TESTBED = "/testbed"
MINI_IMAGE = "envhub/swe-mini:bookworm"
CONDA = "/opt/miniconda3"
"""Where SWE-bench's official images keep conda; their eval scripts activate its `testbed` env."""
DEFAULT_TIMEOUT_S = 1800.0
"""The official harness's limit for one evaluation (`run_evaluation --timeout`)."""
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
    """local: a venv, bound read-only at the same path; its base interpreter is under /usr or comes
    in through `extra_binds` (see `pythons.sandbox_binds`)."""
    skip_install: bool = True
    """Drop the eval script's `pip install -e .`: it needs a package index the sandbox cannot reach."""
    extra_binds: dict[str, str] = field(default_factory=dict)
    """local: more read-only binds (a prepared workspace's git alternates, its venv's interpreter)."""
    memory_mb: int = 2048
    disk_mb: int = 512
    pids: int = 128
    timeout_s: float = DEFAULT_TIMEOUT_S
    """The longest one command may run, the tests included: the official harness's 1800 s by default."""

    def __post_init__(self) -> None:
        if self.official_image and self.kind != "docker":
            raise ValueError("official_image is a docker runtime's image layout; use kind='docker'")

    def policy(self, *, guard: bool = False) -> IsolationPolicy:
        binds = dict(self.extra_binds)
        if self.kind == "local" and self.python_env is not None:
            binds[str(self.python_env)] = str(self.python_env)
        if guard:  # read-only: the graded code cannot rewrite what loads first
            binds[str(GUARD_DIR)] = SANDBOX_DIR
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
    def environment_activation(self) -> str:
        """The shell line that puts the test environment first, in every runtime (the official images'
        is the eval scripts' own conda activation)."""
        if self.official_image:
            return f"source {CONDA}/bin/activate; conda activate testbed"
        return self.activation or ""

    @property
    def shell_env(self) -> dict[str, str]:
        """The agent's shell variables: in an official image, its testbed conda environment, active as
        the image's ~/.bashrc makes it for an interactive shell (grading activates it in its own script)."""
        if not self.official_image:
            return {}
        prefix = f"{CONDA}/envs/testbed"
        path = f"{prefix}/bin:{CONDA}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        return {"PATH": path, "CONDA_PREFIX": prefix, "CONDA_DEFAULT_ENV": "testbed"}

    async def open(self, *, guard: bool = False) -> Sandbox:
        """A fresh sandbox for this runtime; SandboxUnavailable says what is missing. With `guard`, the
        test-process guard is in place at `tamper_guard.SANDBOX_DIR`, read-only."""
        image = (self.image or MINI_IMAGE) if self.kind == "docker" else None
        return await open_sandbox(self.kind, self.policy(guard=guard), image=image)


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
    """The local sandbox's Python of envhub's own X.Y, else its python3: swe-mini's venv takes pytest
    from this environment, which must match it."""
    return sandbox_python(f"{sys.version_info.major}.{sys.version_info.minor}")[0]


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
    open_to_sandbox(tmp)
    (tmp / ".complete").touch()
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def mini_runtime(kind: RuntimeKind = "local", **options: object) -> Runtime:
    """The runtime swe-mini runs in: local (venv with pytest) or docker (sandboxes/swe-mini image)."""
    if kind == "local":
        return Runtime(kind="local", python_env=mini_python_env(), **options)  # type: ignore[arg-type]
    return Runtime(kind="docker", image=MINI_IMAGE, **options)  # type: ignore[arg-type]


IMAGE_REPO_CHECK = f"""cd {TESTBED} || exit 3
head=$(git rev-parse HEAD) || exit 3
if [ "$head" != "$1" ]; then
    parent=$(git rev-parse -q --verify "HEAD^" || true)
    subject=$(git log -1 --format=%s HEAD)
    [ "$parent" = "$1" ] && [ "$subject" = SWE-bench ] || {{
        echo "{TESTBED} is at $head: neither base_commit $1 nor the harness's set-up commit on it" >&2
        exit 3
    }}
fi
"""
"""The harness's images end their set-up with `git commit --allow-empty -am SWE-bench` on base_commit
(so that what the install changed is not part of anyone's diff): HEAD is that commit, or base_commit."""
IMAGE_REPO_HIDE = """set -e
git config core.fileMode false
git checkout -q --detach HEAD
git for-each-ref --format='delete %(refname)' | git update-ref --stdin
git reflog expire --expire=now --all
dirty=$(git status --porcelain --untracked-files=no)
[ -z "$dirty" ] || { echo "the image changed tracked files after its last commit: $dirty" >&2; exit 3; }
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
        await copy_in(sandbox, workspace, TESTBED)


# -- the submission -----------------------------------------------------------------------------------

SNAPSHOT_COMMAND = f'rm -rf -- "$1" && tar -c --exclude=.git -f "$1" -C {TESTBED} .'
"""The agent's files, every `.git` left behind: the agent's git configuration, hooks, attributes and
objects never reach the grader. `tar` reads no configuration, and in the local sandbox it is the host's."""

_GIT_NO_CONFIG = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": "/nonexistent"}
"""git in a sandbox with no system or global configuration (the repository's own still applies)."""
ISOLATED_GIT = {
    **_GIT_NO_CONFIG,
    "GIT_ATTR_NOSYSTEM": "1",
    "XDG_CONFIG_HOME": "/nonexistent",
    "GIT_DIR": "/tmp/envhub-diff.git",
    "GIT_WORK_TREE": "/tmp/envhub-tree",
    "GIT_INDEX_FILE": "/tmp/envhub-diff.git/index",
}
"""git with no configuration but the grader's own: no system, global or repository config files."""
NEUTRAL_ATTRIBUTES = "* -text !eol -ident !filter !diff !merge !working-tree-encoding\n"
"""$GIT_DIR/info/attributes outranks every .gitattributes in the tree: no conversion, filter or driver."""
DIFF_SCRIPT = r"""set -e
mkdir -p "$GIT_WORK_TREE"
tar -x --no-same-owner --no-same-permissions -f /tmp/envhub-tree.tar -C "$GIT_WORK_TREE"
(unset GIT_WORK_TREE GIT_INDEX_FILE; git init -q --bare --template= "$GIT_DIR")
mkdir -p "$GIT_DIR/info" "$GIT_DIR/objects/info"
echo "$1/.git/objects" > "$GIT_DIR/objects/info/alternates"
cp /tmp/envhub-attributes "$GIT_DIR/info/attributes"
cp /tmp/envhub-exclude "$GIT_DIR/info/exclude"
git -c core.bare=false read-tree "$2"
git -c core.bare=false -c core.fileMode=false add -A
git -c core.bare=false diff --cached --binary --no-ext-diff --no-textconv --no-color --no-renames "$2" \
    > /tmp/envhub-diff.patch
"""
"""The diff of the agent's files against the pristine repository's HEAD (base_commit, or the harness's
set-up commit on it in an official image), taken in a sandbox the agent never ran in."""


DIFF_FILE = "/tmp/envhub-diff.patch"


class SubmissionRefused(Exception):
    """The agent's workspace cannot become a submission, because of something the agent did: scored 0."""


async def snapshot(sandbox: Sandbox) -> bytes:
    """The agent's repository files as a tar archive (no `.git`), taken at submit time."""
    archive = f"/tmp/envhub-submission-{secrets.token_hex(8)}.tar"  # a name the agent cannot plant
    result = await sandbox.exec(["/bin/sh", "-c", SNAPSHOT_COMMAND, "sh", archive], timeout=300)
    if result.timed_out or result.exit_code != 0:
        reason = "timed out" if result.timed_out else result.stderr.strip()[-300:]
        raise SubmissionRefused(f"the repository could not be archived for grading: {reason}")
    try:
        return await sandbox.read_file(archive)
    except OSError as exc:  # swapped for a link or a pipe by the agent's processes, still running
        raise SubmissionRefused(f"the repository's archive could not be read: {exc}") from exc


async def diff_snapshot(instance: Instance, tree: bytes, runtime: Runtime, workspace: Path | None) -> str:
    """The patch from base_commit to the agent's files, computed in a fresh sandbox by git with the
    grader's configuration only: what the agent configured cannot decide what is submitted."""
    async with await runtime.open() as sandbox:
        await _pristine_repo(sandbox, instance, workspace)
        untracked = await _untracked(sandbox)
        await sandbox.write_file("/tmp/envhub-tree.tar", tree)
        await sandbox.write_file("/tmp/envhub-attributes", NEUTRAL_ATTRIBUTES)
        await sandbox.write_file(
            "/tmp/envhub-exclude", "".join(f"/{_gitignore_escape(p)}\n" for p in untracked)
        )
        head = await sandbox.exec(["git", "-C", TESTBED, "rev-parse", "HEAD"], env=_GIT_NO_CONFIG, timeout=60)
        if not head.ok:
            raise envhub.InfrastructureError(f"the base repository has no HEAD: {head.stderr.strip()[-300:]}")
        result = await sandbox.exec(
            ["/bin/sh", "-c", DIFF_SCRIPT, "sh", TESTBED, head.stdout.strip()], env=ISOLATED_GIT, timeout=300
        )
        if result.timed_out or result.exit_code != 0:
            reason = "timed out" if result.timed_out else result.stderr.strip()[-300:]
            raise SubmissionRefused(f"the submitted files could not be compared with base_commit: {reason}")
        return (await sandbox.read_file(DIFF_FILE)).decode(errors="surrogateescape")


async def _untracked(sandbox: Sandbox) -> list[str]:
    """Files the pristine /testbed holds that git does not track (an official image's install leaves some)."""
    result = await sandbox.exec(
        ["git", "-C", TESTBED, "ls-files", "-z", "--others", "--exclude-standard", "--directory"],
        env=_GIT_NO_CONFIG,
        timeout=120,
    )
    if not result.ok:
        raise envhub.InfrastructureError(
            f"listing the base repository's files failed: {result.stderr[-300:]}"
        )
    return [path for path in result.stdout.split("\0") if path]


async def _pristine_repo(sandbox: Sandbox, instance: Instance, workspace: Path | None) -> None:
    if workspace is None:
        await check_image_repo(sandbox, instance.base_commit)
    else:
        await copy_in(sandbox, workspace, TESTBED)


# -- grading ------------------------------------------------------------------------------------------

PATCH_FILE = "/tmp/envhub-submission.patch"
LIST_MODULES = (
    "import pkgutil, sys; print('\\n'.join(sorted(set(sys.stdlib_module_names) | "
    "{m.name for m in pkgutil.iter_modules()} | set(sys.builtin_module_names))))"
)
"""Every top-level module the test environment can import (run from `/`, so the repository is not on
the path unless the environment itself installs it)."""


async def _apply(sandbox: Sandbox, patch: str) -> str | None:
    """Apply the submission like the harness: git apply, then with --reject, then patch --fuzz."""
    if not patch.strip():
        return None
    for command in (
        f"git apply --verbose {PATCH_FILE}",
        f"git apply --verbose --reject {PATCH_FILE}",
        f"patch --batch --fuzz=5 -p1 -i {PATCH_FILE}",
    ):
        result = await sandbox.exec(f"cd {TESTBED} && {command}", env=_GIT_NO_CONFIG, timeout=120)
        if result.ok:
            return None
    return f"the patch does not apply: {(result.stdout + result.stderr).strip()[-300:]}"


async def _guard(sandbox: Sandbox, runtime: Runtime, test_command: str) -> Guard:
    """What the submission may not change here: the runner, what it reads before the tests (asked of
    the environment's own pytest), and modules shadowing the environment's."""
    activate = f"{runtime.environment_activation}; " if runtime.environment_activation else ""
    found = await sandbox.exec(
        ["/bin/bash", "-c", f'{activate}cd / && python -I -c "$1"', "bash", LIST_MODULES], timeout=120
    )
    # The host's standard library is a floor, should the environment's interpreter not answer.
    environment = set(found.stdout.split()) | RUNNER_MODULES | set(sys.stdlib_module_names)
    probe = await sandbox.exec(
        ["/bin/bash", "-c", f'{activate}cd / && python -I -c "$1" "$2"', "bash", PROBE, CONFIG_NAME.pattern],
        timeout=120,
    )
    facts = RunnerFacts.parse(probe.stdout)
    listed = await sandbox.exec(["git", "-C", TESTBED, "ls-files", "-z"], env=_GIT_NO_CONFIG, timeout=120)
    if not listed.ok:
        raise envhub.InfrastructureError(
            f"listing the base repository's files failed: {listed.stderr[-300:]}"
        )
    paths = [path for path in listed.stdout.split("\0") if path]
    names = {*facts.config_names, *KNOWN_CONFIG_NAMES, "conftest.py"}
    configs = await _read_files(sandbox, [p for p in paths if p.rsplit("/", 1)[-1] in names])
    guard = Guard(
        environment=frozenset(environment),
        runner=runner_paths(test_command),
        runner_files=runner_files(facts, test_command, configs),
    )
    base = {
        root + path[len(root) :].split("/")[0].removesuffix(".py")
        for path in paths
        for root in guard.roots
        if path.startswith(root)
    }
    return dataclasses.replace(guard, base_modules=frozenset(base))


_READ_FILES = f'cd {TESTBED} && tar -c -f "$1" --no-recursion -- "${{@:2}}"'
_MAX_CONFIG_FILES = 500


async def _read_files(sandbox: Sandbox, paths: list[str]) -> dict[str, str]:
    """The text of some of the base repository's files (its configuration and conftest files), in one
    archive; a file that cannot be read is left out (it is protected by its name all the same)."""
    if not paths:
        return {}
    archive = f"/tmp/envhub-config-{secrets.token_hex(8)}.tar"
    done = await sandbox.exec(
        ["/bin/bash", "-c", _READ_FILES, "bash", archive, *paths[:_MAX_CONFIG_FILES]], timeout=120
    )
    if not done.ok:
        return {}
    texts: dict[str, str] = {}
    with tarfile.open(fileobj=io.BytesIO(await sandbox.read_file(archive))) as tar:
        for member in tar.getmembers():
            handle = tar.extractfile(member) if member.isfile() and member.size < 1_000_000 else None
            if handle is not None:
                texts[member.name.removeprefix("./")] = handle.read().decode(errors="replace")
    return texts


async def _checked_patch(
    sandbox: Sandbox, guard: Guard, patch: str
) -> tuple[FilteredPatch | None, str | None]:
    """The submission without what it may not change, or why it cannot be graded (scored 0)."""
    try:
        filtered = filter_patch(patch, guard)
    except MalformedPatch as exc:
        return None, f"malformed patch: {exc}"
    own = {module.rsplit("/", 1)[-1] for module in guard.base_modules}  # pytest's repository names _pytest
    flags = tuple(flag.describe() for flag in scan(filtered.kept, own_modules=own))
    filtered = dataclasses.replace(filtered, flags=flags)
    if not filtered.kept.strip():
        return filtered, None
    text = filtered.kept if filtered.kept.endswith("\n") else filtered.kept + "\n"
    await sandbox.write_file(PATCH_FILE, text.encode(errors="surrogateescape"))
    numstat = await sandbox.exec(
        ["git", "-C", TESTBED, "apply", "--numstat", "-z", PATCH_FILE], env=_GIT_NO_CONFIG, timeout=120
    )
    if not numstat.ok:
        return filtered, f"the patch does not apply: {numstat.stderr.strip()[-300:]}"
    touched = _numstat_paths(numstat.stdout)
    hidden = [p for p in touched if p not in filtered.kept_paths or guard.reason(p) is not None]
    if hidden:
        return filtered, f"malformed patch: git would touch files its headers hide ({', '.join(hidden)})"
    return filtered, None


def _screening(filtered: FilteredPatch | None) -> dict[str, object]:
    """The report's account of the filter and the monitor: why each file was dropped, and the added
    lines of the kept files that reach into the test machinery."""
    if filtered is None:
        return {}
    return {"dropped_reasons": dict(filtered.dropped), "monitor": list(filtered.flags)}


def _numstat_paths(output: str) -> list[str]:
    """The paths of `git apply --numstat -z`: `added\\tdeleted\\tpath\\0`, or for a rename
    `added\\tdeleted\\t\\0old\\0new\\0`."""
    fields = output.split("\0")
    paths: list[str] = []
    i = 0
    while i < len(fields):
        stat = fields[i]
        if not stat:
            i += 1
            continue
        _, _, path = stat.split("\t", 2)
        if path:
            paths.append(path)
            i += 1
        else:
            paths += fields[i + 1 : i + 3]
            i += 3
    return paths


_EXISTING_FILES = 'cd "$1" && shift && for p; do [ -f "$p" ] && [ ! -L "$p" ] && echo "$p"; done; true'


async def _add_canaries(
    sandbox: Sandbox, instance: Instance, steps: EvalSteps, parser: str
) -> tuple[Canaries | None, str]:
    """Write the canaries, copies of the instance's own tests, into the command's test files; returns
    them, or None and why they could not go in."""
    paths = candidates(steps.test_command)
    found = await sandbox.exec(["/bin/sh", "-c", _EXISTING_FILES, "sh", TESTBED, *paths], timeout=60)
    listed = [*instance.FAIL_TO_PASS, *instance.PASS_TO_PASS]
    sources: dict[str, str] = {}
    for path in to_read(steps.test_command, listed, found.stdout.splitlines()):
        try:
            sources[path] = (await sandbox.read_file(f"{TESTBED}/{path}")).decode()
        except (OSError, UnicodeDecodeError):
            continue
    chosen = plan(steps.test_command, instance.FAIL_TO_PASS, instance.PASS_TO_PASS, parser, sources)
    if isinstance(chosen, str):
        return None, f"not inserted: {chosen}"
    for path, text in chosen.sources:
        await sandbox.write_file(f"{TESTBED}/{path}", text.encode())
    return chosen, ""


async def _changed_lines(sandbox: Sandbox, filtered: FilteredPatch) -> dict[str, list[int] | None]:
    """The lines the applied submission added or changed in each file it kept, numbered in the file as
    graded (None: a new file, every line). Read from git after applying, not from the patch's headers,
    which `patch --fuzz` may have applied elsewhere."""
    added = {s.new_path for s in parse_patch(filtered.kept) if s.old_path is None and s.new_path}
    changed: dict[str, list[int] | None] = {path: None for path in added}
    tracked = [p for p in filtered.kept_paths if p not in added]
    if tracked:
        diff = await sandbox.exec(
            ["git", "-C", TESTBED, "diff", "--no-ext-diff", "--no-textconv", "--no-color", "--no-renames",
             "-U0", "HEAD", "--", *tracked],
            env=_GIT_NO_CONFIG,
            timeout=120,
        )  # fmt: skip
        for section in parse_patch(diff.stdout) if diff.ok else []:
            if section.new_path is not None:
                changed[section.new_path] = [number for number, _ in added_lines(section.text)]
    return changed


async def _read_report(sandbox: Sandbox, path: str) -> bytes | None:
    try:
        return await sandbox.read_file(path)
    except (FileNotFoundError, PermissionError):
        return None


def test_files(instance: Instance, test_command: str, canaries: Canaries | None) -> tuple[str, ...]:
    """The files whose reading or rewriting by the submission's code the guard records: the test patch's
    Python files, the files the test command names, and the canaries'. Not the test patch's data files:
    the tests hand those to the code under test (flask's `Config.from_file("tests/static/config.toml")`)."""
    paths = {p for section in parse_patch(instance.test_patch) for p in section.paths if p.endswith(".py")}
    paths |= {p for p in candidates(test_command) if p.endswith(".py")}
    if canaries is not None:
        paths.update(canaries.files)
    return tuple(sorted(paths))


@dataclass
class _EvalRun:
    """What running the eval script in the graded sandbox left: the log, the tests' output and verdicts."""

    log: str = ""
    output: str = ""
    exit_code: int | None = None
    problem: str | None = None
    canaries: Canaries | None = None
    canary_note: str = ""
    guard_problem: str | None = None
    guard_events: list[str] = field(default_factory=list)


async def _run_eval(
    sandbox: Sandbox,
    instance: Instance,
    runtime: Runtime,
    steps: EvalSteps,
    changed: dict[str, list[int] | None],
    *,
    guarded: bool,
) -> _EvalRun:
    """The row's eval script on the applied submission: its set-up (which resets the test files and
    applies the hidden test patch), the canaries, then the tests under the test-process guard."""
    run = _EvalRun()
    await sandbox.write_file("/tmp/envhub-eval-setup.sh", steps.setup)
    # stdout and stderr merged in order: with `set -x` the trace goes to stderr.
    setup = await sandbox.exec(["/bin/bash", "-c", "exec 2>&1; bash /tmp/envhub-eval-setup.sh"])
    run.log = setup.stdout
    parser = parser_name(instance.repo, instance.log_parser)
    run.canaries, run.canary_note = await _add_canaries(sandbox, instance, steps, parser)
    command = steps.test_command if run.canaries is None else command_with(steps.test_command, run.canaries)
    watch = GuardRun(
        submission=tuple(changed),
        tests=test_files(instance, steps.test_command, run.canaries),
        root=TESTBED,
        lines=changed,
    )
    await sandbox.write_file(watch.config_path, watch.config())
    # Nothing of the grader's is left for the tests to read: the set-up script holds the test patch.
    await sandbox.exec(["rm", "-f", "/tmp/envhub-eval-setup.sh", PATCH_FILE], timeout=30)
    script = steps.test_script("\n".join([*watch.shell_lines(), command]) if guarded else command)
    test = await sandbox.exec(["/bin/bash", "-c", "exec 2>&1; " + script])
    run.output = test.stdout
    run.log += f"+ : '{START}'\n{run.output}\n+ : '{END}'\n"
    if test.timed_out:
        run.problem = f"the evaluation timed out after {runtime.timeout_s:g} s"
    elif test.oom_killed:
        run.problem = "the evaluation ran out of memory"
    else:
        run.exit_code = test.exit_code
        if guarded:
            report = await _read_report(sandbox, watch.report_path)
            run.guard_problem, run.guard_events = watch.verdict(report)
    return run


async def grade(
    instance: Instance,
    patch: str,
    runtime: Runtime,
    workspace: Path | None,
    *,
    on_log: Callable[[str], None] | None = None,
    guarded: bool = True,
) -> GradeReport:
    """Grade `patch` in a fresh sandbox: the repo at base_commit (uploaded from `workspace`, or the
    image's own when None), the patch without test changes, then the row's own eval script (which resets
    the test files and applies the hidden test patch), with canary tests added to a listed test file.

    `guarded=False` runs the tests without the test-process guard: only to measure what it costs
    (`benchmarks/swe_guard_overhead.py`); a grade without it is not a grade envhub trusts."""
    started = time.monotonic()
    steps = adapt_eval_script(
        instance.eval_script, activation=runtime.activation, skip_install=runtime.skip_install
    )
    run = _EvalRun()
    async with await runtime.open(guard=guarded) as sandbox:
        await _pristine_repo(sandbox, instance, workspace)
        guard = await _guard(sandbox, runtime, steps.test_command)
        filtered, problem = await _checked_patch(sandbox, guard, patch)
        if problem is None and filtered is not None:  # no filtered patch comes without a problem
            problem = await _apply(sandbox, filtered.kept)
            if problem is None:
                changed = await _changed_lines(sandbox, filtered)
                run = await _run_eval(sandbox, instance, runtime, steps, changed, guarded=guarded)
    if on_log is not None:
        on_log(run.log)
    return grade_log(
        instance,
        run.output,
        exit_code=run.exit_code,
        canaries=run.canaries,
        problem=problem or run.problem,
        guard=run.guard_problem,
        canary=run.canary_note,
        dropped_files=list(filtered.dropped) if filtered is not None else [],
        **_screening(filtered),
        patch=patch,
        guard_events=run.guard_events,
        runtime=runtime.kind,
        duration_s=round(time.monotonic() - started, 3),
        log=run.log[-20_000:],
    )
