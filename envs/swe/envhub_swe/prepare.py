"""Prepare a real SWE-bench instance for the local runtime: a checkout at base_commit and a venv.
(The docker runtime needs no preparation: it runs the row's official image, see `official_runtime`.)

`envhub swe prepare --instance ID --repo CLONE` makes, under the workspaces root:

    ROOT/ID/repo   a clone of CLONE at base_commit (shared objects, no refs beyond base_commit)
    ROOT/ID/venv   a venv over /usr's Python with the repo/version's pinned test dependencies,
                   and a .pth pointing at /testbed (what `pip install -e .` would give, in the sandbox)

Instances whose pinned dependencies cannot run on this Python are refused with the reason, so they
are never graded as a model failure.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from envhub_swe.data import Instance
from envhub_swe.runtime import TESTBED, Runtime, RuntimeKind, _git, _sandbox_python, docker_image_present


class Unsupported(RuntimeError):
    """This instance cannot run in a local environment on this Python; the message says why."""


@dataclass(frozen=True)
class Spec:
    """A repo/version's test environment, after the official harness's specifications."""

    packages: tuple[str, ...]
    max_python: tuple[int, int] | None = None
    """The newest Python its pinned dependencies run on, when older than today's."""
    why: str = ""


SPECS: dict[tuple[str, str], Spec] = {
    **{
        ("pytest-dev/pytest", v): Spec(
            (), (3, 9), "pytest releases before 6.2 break on Python 3.10+ (py.path and assertion rewriting)"
        )
        for v in ("5.0", "5.1", "5.2", "5.3", "5.4", "6.0")
    },
    **{
        ("psf/requests", v): Spec(
            (), (3, 9), "requests before 2.27 pins urllib3/chardet releases that fail on 3.10+"
        )
        for v in ("0.13", "0.14", "1.2", "2.0", "2.3", "2.4", "2.5", "2.7", "2.8", "2.9", "2.10", "2.12")
    },
    **{
        ("pylint-dev/pylint", v): Spec(
            (), (3, 9), "the astroid releases pinned by pylint before 2.13 do not parse Python 3.10+"
        )
        for v in ("2.8", "2.9", "2.10", "2.11", "2.13")
    },
    ("pallets/flask", "2.3"): Spec(
        (
            "pytest==7.4.0",
            "werkzeug==2.3.7",
            "jinja2==3.1.2",
            "itsdangerous==2.1.2",
            "click==8.1.7",
            "blinker==1.6.2",
        )
    ),
    ("pydata/xarray", "2022.06"): Spec(("pytest", "numpy<2", "pandas<2.1", "packaging")),
    ("mini/textkit", "0.1"): Spec(("pytest",)),
    ("mini/stats", "0.1"): Spec(("pytest",)),
    ("mini/kvstore", "0.1"): Spec(()),
    ("mini/semver", "0.1"): Spec(()),
}
"""A first subset, not the harness's whole table: other repo/versions need `requirements=`."""


def check_python(instance: Instance, python: tuple[int, int]) -> Spec:
    """The instance's spec, or Unsupported when it cannot run on `python` or has no spec yet."""
    spec = SPECS.get((instance.repo, instance.version))
    if spec is None:
        raise Unsupported(
            f"no environment specification for {instance.repo} {instance.version} yet; pass a requirements "
            "file (--requirements) with the official harness's pins for it"
        )
    if spec.max_python is not None and python > spec.max_python:
        need = ".".join(map(str, spec.max_python))
        raise Unsupported(
            f"{instance.instance_id} cannot run on Python {python[0]}.{python[1]}: {spec.why}. "
            f"Use Python {need} (a /usr/bin/python{need} the sandbox can see) or the docker runtime "
            "with the official image"
        )
    return spec


def prepare(
    instance: Instance,
    clone: Path,
    root: Path,
    *,
    requirements: Path | None = None,
    install: bool = True,
) -> Path:
    """Make ROOT/ID/{repo,venv} for `instance` from a local clone of its repository; returns ROOT/ID."""
    python = _sandbox_python()
    version = subprocess.run(
        [str(python), "-c", "import sys; print(sys.version_info[0], sys.version_info[1])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    spec = None if requirements else check_python(instance, (int(version[0]), int(version[1])))
    dest = root / instance.instance_id
    repo, venv = dest / "repo", dest / "venv"
    dest.mkdir(parents=True, exist_ok=True)
    if not (repo / ".git").exists():
        _git(dest, "clone", "-q", "--shared", "--no-checkout", str(clone.resolve()), str(repo))
    _git(repo, "checkout", "-q", "--detach", instance.base_commit)
    for ref in _git(repo, "for-each-ref", "--format=%(refname)").splitlines():
        _git(repo, "update-ref", "-d", ref)  # no branch or tag may lead to the fix
    _git(repo, "reflog", "expire", "--expire=now", "--all")
    if not (venv / "bin" / "python").exists():
        subprocess.run([str(python), "-m", "venv", str(venv)], check=True)
    packages = [] if spec is None else list(spec.packages)
    if install and (packages or requirements):
        args = ["-r", str(requirements)] if requirements else packages
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *args], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "envhub-testbed.pth").write_text(TESTBED + "\n")
    return dest


def prepared(instance: Instance, root: Path | None, kind: RuntimeKind) -> tuple[Runtime, Path | None]:
    """The runtime and workspace of an instance: a checkout prepared under `root` (local), or the row's
    official image, whose own /testbed is the workspace (docker: workspace None)."""
    if kind == "docker":
        return official_runtime(instance), None
    if root is None:
        raise Unsupported(
            "the local runtime needs prepared workspaces: run `envhub swe prepare` and pass workspaces=ROOT"
        )
    dest = root / instance.instance_id
    if not (dest / "repo" / ".git").exists():
        raise Unsupported(
            f"{instance.instance_id} is not prepared under {root}: run "
            f"`envhub swe prepare --instance {instance.instance_id} --repo PATH_TO_CLONE --root {root}`"
        )
    alternates = dest / "repo" / ".git" / "objects" / "info" / "alternates"
    binds = {}
    if alternates.exists():
        for line in alternates.read_text().splitlines():
            binds[line.strip()] = line.strip()  # the shared objects, at the path the clone names them by
    return Runtime(kind="local", python_env=dest / "venv", extra_binds=binds, disk_mb=4096), dest / "repo"


def official_runtime(instance: Instance) -> Runtime:
    """The docker runtime in the row's own SWE-bench image (its `image` column), which must be on this
    machine's Docker engine: envhub never pulls."""
    image = instance.image
    if not image:
        raise Unsupported(
            f"{instance.instance_id} names no image (the row's `image` column is empty); the docker "
            "runtime grades in the official per-instance image, "
            "e.g. swebench/sweb.eval.x86_64.<owner>_1776_<id>:latest"
        )
    if not docker_image_present(image):
        raise Unsupported(
            f"{instance.instance_id} runs in its official image {image}, which is not on this machine's "
            "Docker engine (or no engine answers: check `docker info`). Get it with "
            f"`docker pull {image}` on a machine that can reach Docker Hub; where this one cannot, "
            "`docker save` it there and `docker load` it here"
        )
    return Runtime(kind="docker", image=image, official_image=True, disk_mb=4096, memory_mb=4096, pids=512)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `envhub swe prepare`")
