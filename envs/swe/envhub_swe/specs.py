"""A repo/version's test environment as the official SWE-bench harness builds it, adapted to a venv.

The knowledge is the official `swebench` package's (pinned by envs/swe's `harness` extra): its
`MAP_REPO_VERSION_TO_SPECS` (Python version, conda and pip packages, pre-install steps, install
command) and the very scripts it builds an environment and an instance image with
(`make_env_script_list_py`, `make_repo_script_list_py`). envhub only translates those scripts' lines
for a venv on this machine, one rule each (`ADAPTATIONS`):

- `conda create -n testbed python=X PKGS` becomes a venv of Python X (see `pythons.py`) and a pip
  install of PKGS; `conda activate testbed` becomes the venv's activation;
- the requirements files the harness downloads from raw.githubusercontent.com at the row's
  environment_setup_commit are read from the local clone at that commit instead (same code, same
  cleaning: only its `requests.get` is served locally);
- a conda `environment.yml` (xarray, matplotlib 3.5+), also read from the clone, becomes one pip
  install (`conda_env.py`: every dropped or renamed entry and why);
- the instance image's clone, history trimming and final `git commit` are prepare's own work
  (the workspace stays at base_commit), and `apt-get` lines are skipped (no system packages are
  installed on the host; the skip is recorded in the workspace's manifest).

swebench 5 dropped these tables (its rows carry ready-made images), so 4.1.0 is the last release
that holds them; `HARNESS_VERSION` is checked when the plan is made.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from envhub_swe.conda_env import CondaEnvironment
from envhub_swe.data import Instance
from envhub_swe.steps import NoSpec as NoSpec  # in `steps`, shared with `conda_env`; importable here too
from envhub_swe.steps import Step as Step

HARNESS_VERSION = "4.1.0"
"""The swebench release whose environment specifications are used (the last one that ships them)."""
RAW_GITHUB = "https://raw.githubusercontent.com/"
ENV_NAME = "testbed"


@dataclass(frozen=True)
class SetupPlan:
    """How to build an instance's environment: the Python version and the steps, in order."""

    python: str
    """The `X.Y` the spec names (or, for swe-mini, any Python 3 under /usr: `3`)."""
    steps: tuple[Step, ...]
    source: str
    official: tuple[str, ...] = field(default=())
    """The harness's own script lines, before adaptation (kept in the manifest for review)."""


SEED = 'python -m pip install --upgrade "pip<24.1" "setuptools<70" "wheel<0.44"'
"""A conda `python=X` environment of the official images' time (2024) came with pip 24.0, setuptools
69.5 and wheel 0.43; a venv seeds older ones (setuptools 58 on 3.9) that cannot build some of the
repositories' editable installs. Older Pythons get the newest releases they support."""


# -- the harness ---------------------------------------------------------------------------------------


def harness() -> Any:
    """The official harness's Python test-spec module (swebench.harness.test_spec.python)."""
    try:
        from swebench.harness.test_spec import python as test_spec_python  # type: ignore[import-untyped]
    except ImportError as exc:
        raise NoSpec(
            "preparing a SWE-bench instance takes its environment from the official `swebench` package, "
            f"which is not installed: pip install 'swebench=={HARNESS_VERSION}' "
            "(or pip install -e 'envs/swe[harness]')"
        ) from exc
    installed = metadata.version("swebench")
    if installed != HARNESS_VERSION:
        raise NoSpec(
            f"swebench {installed} is installed, but envhub reads the environment specifications of "
            f"swebench {HARNESS_VERSION} (later releases no longer ship them): "
            f"pip install 'swebench=={HARNESS_VERSION}'"
        )
    return test_spec_python


def specs_for(instance: Instance) -> dict[str, Any]:
    """The official spec of the instance's repo/version (MAP_REPO_VERSION_TO_SPECS)."""
    harness()
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS  # type: ignore[import-untyped]

    spec = MAP_REPO_VERSION_TO_SPECS.get(instance.repo, {}).get(instance.version)
    if spec is None:
        raise NoSpec(
            f"swebench {HARNESS_VERSION} has no environment for {instance.repo} {instance.version!r}"
        )
    return dict(spec)


class _Response:
    def __init__(self, status_code: int, text: str) -> None:
        self.status_code, self.text = status_code, text


class _LocalRaw:
    """Stands in for `requests` in the harness's module: raw.githubusercontent.com/OWNER/NAME/COMMIT/PATH
    is read from the local clone with `git show COMMIT:PATH` (404 when the clone has no such file)."""

    def __init__(self, clone: Path) -> None:
        self.clone = clone
        self.missing_commits: set[str] = set()

    def get(self, url: str, headers: object = None, **_: object) -> _Response:
        parts = url.removeprefix(RAW_GITHUB).split("/", 3)
        if not url.startswith(RAW_GITHUB) or len(parts) != 4:
            return _Response(404, "")
        commit, path = parts[2], parts[3]
        git = ["git", "--git-dir", str(_git_dir(self.clone))]
        if subprocess.run([*git, "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True).returncode:
            self.missing_commits.add(commit)
            return _Response(404, "")
        shown = subprocess.run([*git, "show", f"{commit}:{path}"], capture_output=True, text=True)
        return _Response(200, shown.stdout) if shown.returncode == 0 else _Response(404, "")


def _git_dir(clone: Path) -> Path:
    return clone / ".git" if (clone / ".git").exists() else clone


@contextmanager
def _served_from(module: Any, clone: Path) -> Iterator[_LocalRaw]:
    """The harness module's `requests` replaced by the local clone while its scripts are made."""
    local = _LocalRaw(clone)
    saved = module.requests
    module.requests = local
    try:
        yield local
    finally:
        module.requests = saved


def official_scripts(
    instance: Instance, clone: Path, repo_dir: str
) -> tuple[dict[str, Any], list[str], list[str]]:
    """The spec, and the harness's environment and repository set-up scripts for `instance`, with
    the files it would download read from `clone`."""
    module = harness()
    spec = specs_for(instance)
    row = instance.model_dump()
    with _served_from(module, clone) as local:
        try:
            env_lines = module.make_env_script_list_py(row, spec, ENV_NAME)
        except ValueError as exc:  # the requirements file is not at the setup commit
            missing = ", ".join(sorted(local.missing_commits))
            why = f"the clone lacks commit {missing}" if missing else str(exc)
            raise NoSpec(f"the official environment of {instance.instance_id} cannot be read: {why}") from exc
    repo_lines = module.make_repo_script_list_py(
        spec, instance.repo, repo_dir, instance.base_commit, ENV_NAME
    )
    return spec, list(env_lines), list(repo_lines)


# -- adaptation ------------------------------------------------------------------------------------------

Adapter = Callable[[re.Match[str]], Step]

_VENV = "the venv is active in every step"
_CLONE = "the workspace's clone at base_commit is prepare's own work"
_HISTORY = "history after base_commit: prepare deletes every ref and reflog"
_COMMIT = "the workspace stays at base_commit (see the manifest's kept/restored files)"
_APT = "system packages are not installed on the host; install them yourself"
_CREATE = rf"^conda create (?:-c \S+ )*-n {ENV_NAME} python=(?P<python>[\d.]+)(?P<pkgs>.*?) -y$"
ADAPTATIONS: list[tuple[re.Pattern[str], Adapter]] = [
    (re.compile(r"^source /opt/miniconda3/bin/activate$"), lambda m: Step(m[0], False, "conda itself")),
    (re.compile(_CREATE), lambda m: _packages(m["pkgs"].strip(), m[0])),
    (
        re.compile(rf"^conda activate {ENV_NAME} && (?P<rest>.+)$", re.S),
        lambda m: Step(m["rest"], True, _VENV),
    ),
    (re.compile(rf"^conda activate {ENV_NAME}$"), lambda m: Step(m[0], False, _VENV)),
    (re.compile(r"^(conda env|conda install)\b.*", re.S), lambda m: _conda_only(m[0])),
    (re.compile(r"^(.*&& )?apt-get\b.*"), lambda m: Step(m[0], False, _APT)),
    (
        re.compile(r"^git clone |^chmod -R 777 |^git reset --hard |^git remote remove "),
        lambda m: Step(m.string, False, _CLONE),
    ),
    (
        re.compile(
            r"^(TARGET_TIMESTAMP|AFTER_TIMESTAMP|COMMIT_COUNT)=|^git (tag -l|reflog|gc) "
            r"|^\[ \"\$COMMIT_COUNT\""
        ),
        lambda m: Step(m.string, False, _HISTORY),
    ),
    (re.compile(r'^echo "Current environment'), lambda m: Step(m.string, False, "informational")),
    (
        re.compile(r"^git config --global |^git commit --allow-empty "),
        lambda m: Step(m.string, False, _COMMIT),
    ),
]
"""Each official line that is not run as it is: its pattern and what it becomes."""


def _packages(pkgs: str, line: str) -> Step:
    if not pkgs:
        return Step(line, False, "the venv is made from the chosen interpreter")
    # conda's `name=1.2` is pip's `name==1.2.*`; quoted pip-style pins pass as they are.
    pip = re.sub(r"(?<![=<>!~])\b([A-Za-z0-9_.-]+)=(?!=)([\w.*]+)", r"\1==\2", pkgs)
    return Step(f"python -m pip install {pip}", True, f"conda packages, installed with pip: {line}")


def _conda_only(line: str) -> Step:
    raise NoSpec(
        f"its official set-up runs conda in a way envhub does not translate (`{line}`); "
        "use the docker runtime with the row's official image"
    )


def adapt(line: str, repo_dir: str) -> Step:
    """One official script line as prepare runs it."""
    if line.strip() == f"cd {repo_dir}":
        return Step(line, False, "every step runs in the repository")
    for pattern, adapter in ADAPTATIONS:
        match = pattern.match(line)
        if match:
            return adapter(match)
    if re.search(r"(?<![\w/])/testbed\b", line):  # a spec's own pre-install names the image's /testbed
        return Step(
            re.sub(r"(?<![\w/])/testbed\b", repo_dir, line), True, f"the image's /testbed is {repo_dir}"
        )
    return Step(line)


def python_of(env_lines: list[str], spec: dict[str, Any]) -> str:
    for line in env_lines:
        found = re.search(r"\bpython=([\d.]+)", line)
        if found and line.startswith("conda create"):
            return found[1]
    return str(spec["python"])


def adapt_script(
    env_lines: list[str], repo_lines: list[str], spec: dict[str, Any], repo_dir: str
) -> list[Step]:
    """The harness's two set-up scripts as prepare runs them: a conda environment file's lines as
    `conda_env.py` translates them, every other line by `adapt`."""
    conda = CondaEnvironment.of(env_lines, spec)
    steps: list[Step] = []
    for line in [*env_lines, *repo_lines]:
        steps += conda.adapt(line) or [adapt(line, repo_dir)]
    return steps


def official_plan(instance: Instance, clone: Path, repo_dir: str) -> SetupPlan:
    """The steps that build `instance`'s environment: the harness's scripts, adapted."""
    spec, env_lines, repo_lines = official_scripts(instance, clone, repo_dir)
    steps = [Step(SEED, True, "seed the venv like a conda environment")]
    steps += adapt_script(env_lines, repo_lines, spec, repo_dir)
    return SetupPlan(
        python=python_of(env_lines, spec),
        steps=tuple(steps),
        source=f"swebench {HARNESS_VERSION}: {instance.repo} {instance.version}",
        official=tuple([*env_lines, *repo_lines]),
    )


MINI_PACKAGES = {"mini/textkit": ("pytest",), "mini/stats": ("pytest",)}
"""swe-mini's bundled repositories (envhub's own, not SWE-bench's) and what their tests need."""


def setup_plan(instance: Instance, clone: Path, repo_dir: str) -> SetupPlan:
    """The official plan for a SWE-bench row; for swe-mini's own repositories, their test packages."""
    if instance.repo.startswith("mini/"):
        packages = MINI_PACKAGES.get(instance.repo, ())
        steps = (Step(f"python -m pip install {' '.join(packages)}"),) if packages else ()
        return SetupPlan(python="3", steps=steps, source="swe-mini")
    return official_plan(instance, clone, repo_dir)
