"""`envhub.make("swe-bench-lite")` with no other argument: the runtime and workspace chosen for the user.

With a Docker engine that holds the row's official image, that image is the runtime (the harness's own
environment). Otherwise the local runtime's workspace is prepared on first use, as `envhub swe prepare`
would make it, into the cache (`$ENVHUB_SWE_CACHE/workspaces`), from a mirror clone kept in the cache
too (`$ENVHUB_SWE_CACHE/repos/OWNER+NAME.git`). The clone comes from GitHub, or from wherever
`$ENVHUB_SWE_REPO_SOURCE` says (a template such as `/srv/mirrors/{owner}+{name}` or
`https://git.example.com/{repo}.git`): offline machines and tests point it at local mirrors.

Concurrent episodes of one instance share one workspace: a file lock per instance lets the first prepare
it while the others wait, then reuse it.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console

from envhub.sandbox.workspace import image_present
from envhub_swe.data import Instance
from envhub_swe.prepare import MANIFEST, Unsupported, prepare
from envhub_swe.runtime import DEFAULT_TIMEOUT_S, cache_root

SOURCE_VAR = "ENVHUB_SWE_REPO_SOURCE"
DEFAULT_SOURCE = "https://github.com/{repo}.git"


def repo_source(repo: str) -> str:
    """Where the clone of `repo` (`owner/name`) comes from."""
    owner, _, name = repo.partition("/")
    template = os.environ.get(SOURCE_VAR) or DEFAULT_SOURCE
    try:
        return template.format(repo=repo, owner=owner, name=name)
    except (KeyError, IndexError) as exc:
        raise Unsupported(
            f"${SOURCE_VAR}={template!r} names an unknown field {exc}: use {{repo}}, {{owner}} and {{name}}, "
            "e.g. /srv/mirrors/{owner}+{name}"
        ) from exc


def official_image_ready(instance: Instance) -> bool:
    """Whether the docker runtime can grade this row in its own image now (envhub never pulls)."""
    return bool(instance.image) and image_present(instance.image)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _git(*args: str, timeout_s: float) -> None:
    done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise Unsupported(f"`git {' '.join(args)}` failed: {done.stderr.strip()[-500:]}")


def ensure_clone(instance: Instance, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Path:
    """A mirror clone in the cache that holds the row's base commit, cloned or fetched as needed."""
    owner, _, name = instance.repo.partition("/")
    clone = cache_root() / "repos" / f"{owner}+{name}.git"
    with _locked(clone.with_name(clone.name + ".lock")):
        if not clone.exists():
            source = repo_source(instance.repo)
            _git("clone", "--quiet", "--mirror", source, str(clone), timeout_s=timeout_s)
        has_commit = subprocess.run(
            ["git", "--git-dir", str(clone), "cat-file", "-e", f"{instance.base_commit}^{{commit}}"],
            capture_output=True,
            check=False,
        )
        if has_commit.returncode != 0:
            _git("--git-dir", str(clone), "fetch", "--quiet", "origin", timeout_s=timeout_s)
    return clone


def ensure_workspace(instance: Instance, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Path:
    """The workspaces root holding a finished workspace of `instance`, prepared now if it is not."""
    root = cache_root() / "workspaces"
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)  # the sandbox's uid reads the environment under it
    with _locked(root / f".{instance.instance_id}.lock"):
        if (root / instance.instance_id / MANIFEST).exists():
            return root
        console = Console(stderr=True)
        with console.status(f"{instance.instance_id}: cloning {instance.repo}") as status:
            clone = ensure_clone(instance, timeout_s=timeout_s)
            status.update(f"{instance.instance_id}: preparing its environment (first use only)")

            def show(line: str) -> None:
                if line.strip():
                    status.update(f"{instance.instance_id}: {line.strip()[:100]}")

            prepare(instance, clone, root, timeout_s=timeout_s, on_output=show)
        console.print(f"{instance.instance_id}: workspace ready under {root}")
    return root
