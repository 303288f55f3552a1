"""SWE-bench Lite fidelity: does envhub's grade agree with the official harness's, test by test?

python benchmarks/swe_fidelity.py [-i ID ...] [--repos DIR] [--root DIR] [--json OUT]

For each instance (default: `INSTANCES`, across Lite's repositories), from a real clone in the cache
(`--repos DIR/OWNER+NAME/repo`, what the `fetch` tool or `git clone --mirror` leaves):

1. `envhub swe prepare` builds the workspace (checkout at base_commit, the official spec's environment);
2. **reference**: the row's own `eval_script`, byte for byte, run *outside* envhub on a copy of the
   workspace and of its venv: no envhub sandbox, no adaptation (the reinstall runs, with network), only
   the paths the script names provided (a bubblewrap view of the host with the copy at /testbed and a
   stand-in `/opt/miniconda3/bin/activate` whose `conda activate testbed` activates the venv); the patch
   is applied as the harness applies it, and the log is graded by the official `swebench` package
   (`get_logs_eval`, `get_eval_report`, its log parsers);
3. **envhub**: `envhub_swe.validate` (the sandbox, the adapted script, canaries, envhub's parsers);
4. the table: gold and empty verdicts of both, and every listed test whose outcome differs.

Instances that cannot run here are listed with the reason (no clone, a commit the snapshot lacks, no
interpreter of the spec's version, a download from a host this machine cannot reach, a failed install).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from envhub_swe.data import Instance, load_lite, select
from envhub_swe.prepare import SetupFailed, Unsupported, prepare
from envhub_swe.validate import validate
from rich.console import Console
from rich.table import Table

INSTANCES = (
    # astropy (the C extensions are built: about 4 min each)
    "astropy__astropy-12907", "astropy__astropy-14182", "astropy__astropy-14995",
    # django: 3.1 on Python 3.6, 4.0 on 3.8, 4.1/4.2 on 3.9, 5.0 on 3.11
    "django__django-11797", "django__django-11815", "django__django-11848", "django__django-11905",
    "django__django-13447", "django__django-13710", "django__django-13925", "django__django-14787",
    "django__django-14915", "django__django-15061", "django__django-15781", "django__django-15789",
    "django__django-15814", "django__django-16408", "django__django-16527", "django__django-16595",
    "django__django-16873",
    # flask (src layout, console script)
    "pallets__flask-4045", "pallets__flask-4992", "pallets__flask-5063",
    # pylint
    "pylint-dev__pylint-5859", "pylint-dev__pylint-7080", "pylint-dev__pylint-7114",
    # pytest (src layout, generated version module, pytest 4 to 8)
    "pytest-dev__pytest-5227", "pytest-dev__pytest-5692", "pytest-dev__pytest-7373",
    "pytest-dev__pytest-7432", "pytest-dev__pytest-7490", "pytest-dev__pytest-8365",
    "pytest-dev__pytest-11143",
    # requests (their listed tests need the internet: shown as not runnable, with the reason)
    "psf__requests-863", "psf__requests-1963", "psf__requests-2148", "psf__requests-2317",
    "psf__requests-2674", "psf__requests-3362",
    # seaborn
    "mwaskom__seaborn-2848", "mwaskom__seaborn-3010", "mwaskom__seaborn-3190",
    # sphinx (tox --current-env)
    "sphinx-doc__sphinx-8435", "sphinx-doc__sphinx-8595",
    # sympy (bin/test, its own summary format)
    "sympy__sympy-13480", "sympy__sympy-18532", "sympy__sympy-20154", "sympy__sympy-20590",
    "sympy__sympy-21614", "sympy__sympy-23262", "sympy__sympy-24066", "sympy__sympy-24152",
    # xarray (a conda environment.yml environment, translated for pip)
    "pydata__xarray-3364", "pydata__xarray-4094", "pydata__xarray-4248", "pydata__xarray-4493",
    "pydata__xarray-5131",
)  # fmt: skip
"""The set measured in docs/swe.md: 9 of Lite's 12 repositories, each runtime's edge cases (src layouts,
generated version modules, console scripts, tox, Pythons 3.6 to 3.11), and the ones that cannot run here,
so that their reasons are shown. One pass over all of it takes about 2 hours on 2 busy cores."""

TIMEOUT_S = 1800.0
NEEDS_INTERNET = re.compile(
    r"Max retries exceeded with url|Name or service not known|Failed to resolve"
    r"|The connect\(\) request should time out"  # requests' TARPIT: this machine's egress answers it
)
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
APPLY_PATCH_PASS = ">>>>> Applied Patch"
TESTS_TIMEOUT = ">>>>> Tests Timed Out"
CONDA_SHIM = """# envhub's fidelity benchmark: `conda activate testbed` activates the prepared venv.
conda() {{
  if [ "$1" = activate ]; then . {venv}/bin/activate; fi
}}
"""


@dataclass
class Outcome:
    """One patch's verdict from one grader, and its listed tests' outcomes (passed or not)."""

    resolved: bool
    tests: dict[str, bool]
    note: str = ""


@dataclass
class Row:
    instance_id: str
    repo: str
    python: str = ""
    reason: str = ""
    """Why the instance cannot run here (empty when it ran)."""
    reference: dict[str, Outcome] = field(default_factory=dict)
    envhub: dict[str, Outcome] = field(default_factory=dict)
    seconds: float = 0.0

    def differences(self, which: str) -> list[str]:
        ref, env = self.reference.get(which), self.envhub.get(which)
        if ref is None or env is None:
            return []
        return sorted(t for t in ref.tests if ref.tests[t] != env.tests.get(t))

    @property
    def agrees(self) -> bool:
        return not self.reason and all(
            self.reference[w].resolved == self.envhub[w].resolved and not self.differences(w)
            for w in ("gold", "empty")
        )


# -- the reference: the row's eval script outside envhub, graded by the official package ------------------


def _apply_like_the_harness(repo: Path, patch: str, log: list[str]) -> bool:
    if not patch.strip():
        log.append(APPLY_PATCH_PASS)
        return True
    patch_file = repo.parent / "patch.diff"
    patch_file.write_text(patch)
    for command in (
        ["git", "apply", "--verbose", str(patch_file)],
        ["git", "apply", "--verbose", "--reject", str(patch_file)],
        ["patch", "--batch", "--fuzz=5", "-p1", "-i", str(patch_file)],
    ):
        done = subprocess.run(command, cwd=repo, capture_output=True, text=True, check=False)
        if done.returncode == 0:
            log.append(f"{APPLY_PATCH_PASS}:\n{done.stdout}{done.stderr}")
            return True
    log.append(f"{APPLY_PATCH_FAIL}:\n{done.stdout}{done.stderr}")
    return False


def _host_view(testbed: Path, venv_copy: Path, venv: Path, conda: Path) -> list[str]:
    """bwrap arguments: the host read-only, /tmp writable, the copies at /testbed and at the venv's path."""
    args = ["bwrap", "--die-with-parent", "--proc", "/proc", "--dev", "/dev"]
    for folder in (Path("/"), Path("/opt")):  # /opt is rebuilt: /opt/miniconda3 is the stand-in's
        if folder != Path("/"):
            args += ["--tmpfs", str(folder)]
        for entry in sorted(folder.iterdir()):
            if entry.name in ("proc", "dev", "tmp", "testbed", "opt", "miniconda3"):
                continue
            if entry.is_symlink():
                args += ["--symlink", os.readlink(entry), str(entry)]
            elif entry.is_dir():
                args += ["--ro-bind", str(entry), str(entry)]
    args += [
        "--bind",
        "/tmp",
        "/tmp",
        "--bind",
        str(testbed),
        "/testbed",
        "--bind",
        str(venv_copy),
        str(venv),
    ]
    args += ["--ro-bind", str(conda), "/opt/miniconda3", "--chdir", "/"]
    return args


def reference_run(instance: Instance, workspace: Path, patch: str, scratch: Path) -> tuple[str, bool]:
    """The row's eval script on a copy of the workspace, as the harness runs it: the log, and whether it
    timed out. The harness's container is stood in for by a plain view of the host."""
    run = Path(tempfile.mkdtemp(dir=scratch, prefix=f"{instance.instance_id}-"))
    testbed, venv_copy, home = run / "testbed", run / "venv", run / "home"
    conda = run / "conda"
    subprocess.run(["cp", "-a", str(workspace / "repo"), str(testbed)], check=True)
    subprocess.run(["cp", "-a", str(workspace / "venv"), str(venv_copy)], check=True)
    (conda / "bin").mkdir(parents=True)
    (conda / "bin" / "activate").write_text(CONDA_SHIM.format(venv=workspace / "venv"))
    home.mkdir()
    log: list[str] = []
    try:
        if not _apply_like_the_harness(testbed, patch, log):
            return "\n".join(log), False
        (run / "eval.sh").write_text(instance.eval_script)
        argv = [*_host_view(testbed, venv_copy, workspace / "venv", conda), "/bin/bash", str(run / "eval.sh")]
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(home)}
        env["TZ"] = "Etc/UTC"
        try:
            done = subprocess.run(
                argv,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=TIMEOUT_S,
                check=False,
            )
            log.append(done.stdout.decode(errors="replace"))
            return "\n".join(log), False
        except subprocess.TimeoutExpired as exc:
            log.append((exc.stdout or b"").decode(errors="replace"))
            log.append(TESTS_TIMEOUT)
            return "\n".join(log), True
    finally:
        shutil.rmtree(run, ignore_errors=True)


def official_grade(instance: Instance, log: str, patch: str, scratch: Path) -> Outcome:
    """The official package's verdict on a log (its parser, its resolution rule)."""
    from swebench.harness.grading import get_eval_report, get_logs_eval  # type: ignore[import-untyped]
    from swebench.harness.test_spec.test_spec import TestSpec  # type: ignore[import-untyped]

    spec = TestSpec(
        instance_id=instance.instance_id,
        repo=instance.repo,
        version=instance.version,
        repo_script_list=[],
        eval_script_list=[],
        env_script_list=[],
        arch="x86_64",
        FAIL_TO_PASS=list(instance.FAIL_TO_PASS),
        PASS_TO_PASS=list(instance.PASS_TO_PASS),
        language="py",
        docker_specs={},
        namespace=None,
    )
    log_path = scratch / f"{instance.instance_id}.reference.log"
    log_path.write_text(log)
    prediction = {"instance_id": instance.instance_id, "model_patch": patch, "model_name_or_path": "gold"}
    report = get_eval_report(spec, prediction, str(log_path), include_tests_status=True)[instance.instance_id]
    statuses, found = get_logs_eval(spec, str(log_path))
    listed = [*instance.FAIL_TO_PASS, *instance.PASS_TO_PASS]
    tests = {t: statuses.get(t) in ("PASSED", "XFAIL") for t in listed}
    note = "" if found else "no test output (patch failed, or the run errored or timed out)"
    return Outcome(resolved=bool(report["resolved"]), tests=tests, note=note)


# -- the benchmark ---------------------------------------------------------------------------------------


def clone_of(instance: Instance, repos: Path) -> Path:
    path = repos / instance.repo.replace("/", "+") / "repo"
    if not path.exists():
        raise Unsupported(
            f"no clone of {instance.repo} at {path}: fetch github:{instance.repo} "
            "(or git clone --mirror it there)"
        )
    return path


def run_instance(instance: Instance, repos: Path, root: Path, scratch: Path, keep_logs: Path | None) -> Row:
    row = Row(instance_id=instance.instance_id, repo=instance.repo)
    started = time.monotonic()
    try:
        workspace = prepare(instance, clone_of(instance, repos), root, timeout_s=TIMEOUT_S)
    except (Unsupported, SetupFailed) as exc:
        row.reason = str(exc).splitlines()[0][:300]
        return row
    row.python = json.loads((workspace / "envhub-workspace.json").read_text())["python"]
    for which, patch in (("gold", instance.patch), ("empty", "")):
        log, _ = reference_run(instance, workspace, patch, scratch)
        if keep_logs is not None:
            keep_logs.mkdir(parents=True, exist_ok=True)
            (keep_logs / f"{instance.instance_id}.{which}.reference.log").write_text(log)
        row.reference[which] = official_grade(instance, log, patch, scratch)
        if which == "gold" and not row.reference[which].resolved and NEEDS_INTERNET.search(log):
            row.reason = (
                "its listed tests need the internet (httpbin.org, or a connect timeout to an unroutable "
                "address), which this machine's network does not give and a sandbox has none of: the "
                "official harness's containers have it"
            )
            return row
    (result,) = asyncio.run(
        validate(
            [instance], dataset="swe-bench-lite", workspaces=root, timeout_s=TIMEOUT_S, keep_logs=keep_logs
        )
    )
    for which, report in (("gold", result.gold), ("empty", result.empty)):
        assert report is not None
        outcome = {**{t: False for t in report.fail_to_pass.failed + report.fail_to_pass.missing}}
        outcome |= {t: True for t in report.fail_to_pass.passed}
        outcome |= {t: False for t in report.pass_to_pass.failed + report.pass_to_pass.missing}
        outcome |= {t: True for t in report.pass_to_pass.passed}
        note = result.gold_cause if which == "gold" else (report.problem or "")
        row.envhub[which] = Outcome(resolved=report.resolved, tests=outcome, note=note)
    row.seconds = round(time.monotonic() - started, 1)
    return row


def table(rows: list[Row]) -> Table:
    out = Table(
        title="SWE-bench Lite: envhub (local runtime) vs the official harness's grading of the same run"
    )
    for column in ("instance", "py", "gold ref/envhub", "empty ref/envhub", "tests differing", "agree", "s"):
        out.add_column(column)

    def verdict(row: Row, which: str) -> str:
        ref, env = row.reference[which], row.envhub[which]
        return f"{'R' if ref.resolved else '-'} / {'R' if env.resolved else '-'}"

    for row in rows:
        if row.reason:
            out.add_row(
                row.instance_id, "", "", "", f"[yellow]not runnable[/yellow]: {row.reason}", "n/a", ""
            )
            continue
        diffs = [f"{w}: {t}" for w in ("gold", "empty") for t in row.differences(w)]
        shown = "; ".join(diffs[:3]) + (f" (+{len(diffs) - 3})" if len(diffs) > 3 else "")
        out.add_row(
            row.instance_id,
            row.python,
            verdict(row, "gold"),
            verdict(row, "empty"),
            shown or "0",
            "[green]yes[/green]" if row.agrees else "[red]no[/red]",
            f"{row.seconds:.0f}",
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-i", "--instances", nargs="*", default=list(INSTANCES))
    parser.add_argument(
        "--data", default=os.environ.get("ENVHUB_SWE_BENCH_LITE"), help="Lite's parquet folder"
    )
    parser.add_argument(
        "--repos",
        type=Path,
        default=Path("/work/.mirror"),
        help="clones: DIR/OWNER+NAME/repo (a fork with the history works: link it under the upstream's name)",
    )
    parser.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "envhub-swe-fidelity")
    parser.add_argument("--keep-logs", type=Path, default=None, help="folder for every run's whole log")
    parser.add_argument("--json", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    rows_by_id = {r.instance_id: r for split in ("test", "dev") for r in load_lite(split, args.data)}
    instances = select(list(rows_by_id.values()), instance=args.instances)
    root = args.root.resolve()
    scratch = root / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    console = Console(width=200)
    rows: list[Row] = []
    for instance in instances:
        console.print(f"[bold]{instance.instance_id}[/bold] ...")
        row = run_instance(instance, args.repos, root, scratch, args.keep_logs)
        rows.append(row)
        console.print(table([row]))
        if args.json is not None:
            args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    console.print(table(rows))
    ran = [r for r in rows if not r.reason]
    console.print(
        f"agreement: {sum(r.agrees for r in ran)}/{len(ran)} instances that ran "
        f"({len(rows) - len(ran)} cannot run here); gold resolves by both on "
        f"{sum(r.reference['gold'].resolved and r.envhub['gold'].resolved for r in ran)}"
    )
    sys.exit(0 if all(r.agrees for r in ran) else 1)


if __name__ == "__main__":
    main()
