"""Build the swe-mini data: one git bundle per repository and `instances.jsonl` in SWE-bench's row format.

Commits have fixed authors and dates, so a rebuild gives the same hashes (and a test checks that it
does). Run `python -m envhub_swe.mini.build` after editing `repos.py`.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from envhub_swe.mini.repos import REPOS, Edit, Issue, Repo

DATA = Path(__file__).parent / "data"
IMAGE = "envhub/swe-mini:bookworm"
HEREDOC = "EOF_114329324912"
"""The delimiter the official harness uses around test patches in its eval scripts."""


def _git(cwd: Path, *args: str, date: str = "2024-01-01T00:00:00+00:00", strip: bool = True) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "swe-mini",
        "GIT_AUTHOR_EMAIL": "swe-mini@envhub.invalid",
        "GIT_COMMITTER_NAME": "swe-mini",
        "GIT_COMMITTER_EMAIL": "swe-mini@envhub.invalid",
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    done = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True)
    return done.stdout.strip() if strip else done.stdout


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _apply(root: Path, edits: tuple[Edit, ...]) -> None:
    for edit in edits:
        path = root / edit.path
        text = path.read_text()
        if not edit.old:
            text += edit.new
        elif text.count(edit.old) != 1:
            raise ValueError(f"{edit.path}: {edit.old!r} must occur exactly once")
        else:
            text = text.replace(edit.old, edit.new)
        path.write_text(text)


def _diff(root: Path, edits: tuple[Edit, ...]) -> str:
    _apply(root, edits)
    patch = _git(root, "diff", strip=False)
    _git(root, "checkout", "--", ".")
    return patch


def test_command(repo: Repo, test_files: list[str]) -> str:
    """The repository's own test command, as the official harness writes it for that repo."""
    if repo.style == "pytest":
        return "pytest -rA " + " ".join(test_files)
    modules = [f.removesuffix(".py").replace("/", ".") for f in test_files]
    return "python runtests.py --verbosity 2 " + " ".join(modules)


def eval_script(repo: Repo, base: str, test_patch: str, test_files: list[str]) -> str:
    """An evaluation script in the official harness's format, conda activation and all."""
    files = " ".join(test_files)
    return "\n".join(
        [
            "#!/bin/bash",
            "set -uxo pipefail",
            "source /opt/miniconda3/bin/activate",
            "conda activate testbed",
            "cd /testbed",
            "git config --global --add safe.directory /testbed",
            "cd /testbed",
            "git status",
            "git show",
            f"git -c core.fileMode=false diff {base}",
            "source /opt/miniconda3/bin/activate",
            "conda activate testbed",
            "python -m pip install -e .",
            f"git checkout {base} {files}",
            f"git apply -v - <<'{HEREDOC}'",
            test_patch.rstrip("\n"),
            HEREDOC,
            ": '>>>>> Start Test Output'",
            test_command(repo, test_files),
            ": '>>>>> End Test Output'",
            f"git checkout {base} {files}",
            "",
        ]
    )


def _row(repo: Repo, issue: Issue, base: str, root: Path) -> dict[str, object]:
    test_patch = _diff(root, issue.tests)
    test_files = sorted({e.path for e in issue.tests})
    pass_to_pass = [t for f in test_files for t in repo.test_files.get(f, ())]
    short = repo.name.split("/")[1]
    return {
        "repo": repo.name,
        "instance_id": f"mini__{short}-{issue.number}",
        "base_commit": base,
        "patch": _diff(root, issue.gold),
        "test_patch": test_patch,
        "problem_statement": issue.problem,
        "hints_text": issue.hints,
        "created_at": "2024-01-01T00:00:00Z",
        "version": repo.version,
        "FAIL_TO_PASS": json.dumps(list(issue.fail_to_pass)),
        "PASS_TO_PASS": json.dumps(pass_to_pass),
        "environment_setup_commit": base,
        "image": IMAGE,
        "eval_script": eval_script(repo, base, test_patch, test_files),
        "log_parser": "parse_log_pytest" if repo.style == "pytest" else "parse_log_django",
        "eval_type": "pass_and_fail",
    }


def build_repo(repo: Repo, dest: Path) -> list[dict[str, object]]:
    """Commit the repository (base, then a later commit), bundle it, and return its instance rows."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _git(root, "init", "-q", "-b", "main")
        _write(root, repo.files)
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "-m", f"{repo.name}: initial version")
        base = _git(root, "rev-parse", "HEAD")
        rows = [_row(repo, issue, base, root) for issue in repo.issues]
        for row in rows:
            _git(root, "tag", str(row["instance_id"]), base)
        _write(root, repo.later)
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "-m", "later work", date="2024-02-01T00:00:00+00:00")
        dest.mkdir(parents=True, exist_ok=True)
        _git(root, "bundle", "create", str(dest / f"{repo.name.split('/')[1]}.bundle"), "--all")
    return rows


def build(dest: Path = DATA) -> list[dict[str, object]]:
    rows = [row for repo in REPOS for row in build_repo(repo, dest)]
    with (dest / "instances.jsonl").open("w") as out:
        for row in rows:
            out.write(json.dumps(row, sort_keys=True) + "\n")
    return rows


if __name__ == "__main__":
    print(f"built {len(build())} instances in {DATA}")
