"""Issue 13's causes, each on a tiny offline instance (`swe_fixture`): a prepared environment must grade
the way the official harness's would. Real Lite repositories are checked by benchmarks/swe_fidelity.py.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import swe_fixture
from envhub_swe.data import MINI_DATA, Instance, load_mini, select
from envhub_swe.env import SWEEnv
from envhub_swe.evaluation import GradeReport, TestOutcome
from envhub_swe.prepare import MANIFEST, SetupFailed, Unsupported, prepare, prepared
from envhub_swe.pythons import Interpreter, NoInterpreter, choose, find_interpreters, probe, traversable
from envhub_swe.runtime import DEFAULT_TIMEOUT_S, Runtime, _sandbox_python, grade
from envhub_swe.specs import SetupPlan, Step
from envhub_swe.validate import first_cause, validate
from typer.testing import CliRunner

import envhub
from envhub.cli import app

USR_PYTHON = probe(_sandbox_python())
assert USR_PYTHON is not None


def _tiny(python: str | None = None) -> tuple[Path, Path, Instance, SetupPlan]:
    where = swe_fixture.open_folder()
    repo = swe_fixture.make_repo(where)
    wheels = swe_fixture.make_wheelhouse(where)
    assert USR_PYTHON is not None
    plan = swe_fixture.plan(python or USR_PYTHON.minor, wheels)
    return where, repo, swe_fixture.row(repo), plan


def _grade_both(row: Instance, root: Path, **options: float) -> tuple[GradeReport, GradeReport]:
    runtime, workspace = prepared(row, root, "local", **options)
    gold = asyncio.run(grade(row, row.patch, runtime, workspace))
    empty = asyncio.run(grade(row, "", runtime, workspace))
    return gold, empty


# -- causes 1 and 2: the package installed as the spec says, src layout and dependencies included ----------


def test_src_layout_package_with_generated_module_script_and_dependency_grades() -> None:
    where, repo, row, plan = _tiny()
    dest = prepare(row, repo, where / "ws", plan=plan)
    manifest = json.loads((dest / MANIFEST).read_text())
    assert manifest["rebased"], "the editable install's path to the checkout was not rewritten to /testbed"
    assert (dest / "repo" / "src" / "tinypkg" / "_version.py").exists()  # generated, untracked, uploaded
    gold, empty = _grade_both(row, where / "ws")
    assert gold.resolved, gold.summary() + gold.log[-3000:]
    assert gold.pass_to_pass.passed == list(row.PASS_TO_PASS)  # the generated module and the console script
    assert not empty.resolved and empty.fail_to_pass.failed == list(row.FAIL_TO_PASS)


def test_editable_paths_point_at_testbed_not_at_the_host_checkout() -> None:
    where, repo, row, plan = _tiny()
    dest = prepare(row, repo, where / "ws", plan=plan)
    site = next((dest / "venv" / "lib").glob("python3*/site-packages"))
    texts = [p.read_text(errors="replace") for p in site.iterdir() if p.is_file()]
    assert not any(str(dest / "repo") in t for t in texts)
    assert any("/testbed/src" in t for t in texts)


# -- cause 5: the spec's Python, from pyenv, bound into the sandbox -----------------------------------


def _closed_interpreter() -> Interpreter:
    for interpreter in find_interpreters():
        if not interpreter.visible_in_sandbox and not traversable(interpreter.prefix):
            return interpreter
    pytest.skip("no interpreter outside /usr in a folder closed to other users (pyenv under /root)")


def test_an_interpreter_the_sandbox_cannot_reach_is_bound_at_its_own_path() -> None:
    interpreter = _closed_interpreter()
    where, repo, row, plan = _tiny(interpreter.minor)
    dest = prepare(row, repo, where / "ws", plan=plan)
    assert json.loads((dest / MANIFEST).read_text())["python"] == ".".join(map(str, interpreter.version))
    runtime, _ = prepared(row, where / "ws", "local")

    async def run(command: str) -> str:
        async with await runtime.open() as sandbox:
            result = await sandbox.exec(f"{runtime.activation}; {command}")
            return result.stdout + result.stderr

    assert asyncio.run(run("python -c 'import sys; print(sys.version)'")).startswith(f"{interpreter.minor}.")
    # A link to the environment's python still runs in it, as tox --current-env's .tox/ENV/bin/python does
    # with a conda environment's (a venv's python, linked, would lose its packages).
    linked = 'mkdir -p /tmp/l/bin && ln -s "$(command -v python)" /tmp/l/bin/python && /tmp/l/bin/python'
    assert asyncio.run(run(f"{linked} -c 'import tinydep; print(tinydep.double(21))'")).strip() == "42"
    gold, empty = _grade_both(row, where / "ws")
    assert gold.resolved and not empty.resolved, gold.summary()


def test_a_missing_python_version_is_refused_with_the_fix() -> None:
    with pytest.raises(NoInterpreter, match=r"no Python 3\.2 .*pyenv install 3\.2.*--python"):
        choose("3.2")
    where, repo, row, plan = _tiny("3.2")
    with pytest.raises(Unsupported, match=r"runs on Python 3\.2 in the official harness"):
        prepare(row, repo, where / "ws", plan=plan)


# -- cause 4: the harness's time limit, and an option wherever grading runs ---------------------------------


def test_grading_timeout_defaults_to_the_harness_and_is_an_env_option() -> None:
    assert Runtime().timeout_s == DEFAULT_TIMEOUT_S == 1800.0
    env = envhub.make("swe-mini", instance="mini__kvstore-1", timeout_s=42.0)
    assert isinstance(env, SWEEnv)
    runtime, _ = env._resolve(env.instances[0])
    assert runtime.timeout_s == 42.0 and runtime.policy().wall_time_s == 42.0


def test_a_test_run_past_the_limit_is_reported_as_a_timeout() -> None:
    where, repo, _, plan = _tiny()
    slow = swe_fixture.row(repo, test_command=f"sleep 120 && {swe_fixture.TEST_COMMAND}")
    prepare(slow, repo, where / "ws", plan=plan)
    (result,) = asyncio.run(validate([slow], dataset="swe-bench-lite", workspaces=where / "ws", timeout_s=8))
    assert not result.gold_resolved
    assert result.gold_cause == "the evaluation timed out after 8 s"


# -- cause 6: usability ----------------------------------------------------------------------------


def test_a_failed_install_leaves_no_workspace_and_says_which_step() -> None:
    where, repo, row, _ = _tiny()
    assert USR_PYTHON is not None
    failing = Step("python -m pip install --no-index tinynothing")
    broken = SetupPlan(python=USR_PYTHON.minor, steps=(failing,), source="test")
    with pytest.raises(SetupFailed, match=r"pip install --no-index tinynothing` failed \(exit 1\)") as failed:
        prepare(row, repo, where / "ws", plan=broken)
    assert "tinynothing" in failed.value.log.read_text()
    assert not (where / "ws" / row.instance_id).exists()
    with pytest.raises(Unsupported, match="is not prepared"):
        prepared(row, where / "ws", "local")


def test_an_interrupted_workspace_is_never_graded() -> None:
    where, repo, row, plan = _tiny()
    dest = prepare(row, repo, where / "ws", plan=plan)
    (dest / MANIFEST).unlink()  # as if prepare had been killed before finishing
    with pytest.raises(Unsupported, match="unfinished"):
        prepared(row, where / "ws", "local")
    assert prepare(row, repo, where / "ws", plan=plan) == dest  # and prepare starts it afresh
    assert (dest / MANIFEST).exists()


def _lite_folder(rows: list[Instance], where: Path) -> Path:
    data = where / "data"
    data.mkdir()
    records = [
        {
            **r.model_dump(),
            "FAIL_TO_PASS": json.dumps(r.FAIL_TO_PASS),
            "PASS_TO_PASS": json.dumps(r.PASS_TO_PASS),
        }
        for r in rows
    ]
    pq.write_table(pa.Table.from_pylist(records), data / "test.parquet")
    return data


def test_relative_roots_work_for_prepare_and_validate(monkeypatch: pytest.MonkeyPatch) -> None:
    where = swe_fixture.open_folder()
    (row,) = select(load_mini(), instance="mini__kvstore-2")  # swe-mini's own plan: nothing to install
    clone = where / "clone"
    subprocess.run(["git", "clone", "-q", str(MINI_DATA / "kvstore.bundle"), str(clone)], check=True)
    data = _lite_folder([row], where)
    monkeypatch.chdir(where)
    common = ["--dataset", "swe-bench-lite", "--data", str(data)]
    made = CliRunner().invoke(
        app, ["swe", "prepare", "--instance", row.instance_id, "--repo", "clone", "--root", "ws", *common]
    )
    assert made.exit_code == 0, made.output
    checked = CliRunner().invoke(
        app, ["swe", "validate", "-i", row.instance_id, "--workspaces", "ws", *common]
    )
    assert checked.exit_code == 0 and "1/1 valid" in checked.output, checked.output


def test_validate_names_the_first_cause_and_keeps_whole_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    where, repo, _, plan = _tiny()
    noisy = swe_fixture.row(
        repo,
        test_command="nosuchrunner --verbosity 2 tests.test_core",
        before_tests="seq 1 8000\n",  # a log longer than the report keeps
    )
    prepare(noisy, repo, where / "ws", plan=plan)
    data = _lite_folder([noisy], where)
    logs = where / "logs"
    monkeypatch.setenv("COLUMNS", "300")
    result = CliRunner().invoke(
        app,
        [
            "swe", "validate", "--dataset", "swe-bench-lite", "--data", str(data),
            "--workspaces", str(where / "ws"), "--keep-logs", str(logs),
        ],
    )  # fmt: skip
    assert result.exit_code == 1
    assert "command not found: nosuchrunner" in result.output
    gold_log = (logs / f"{noisy.instance_id}.gold.log").read_text()
    assert (
        len(gold_log) > 20_000 and "\n1\n2\n3\n" in gold_log and "nosuchrunner: command not found" in gold_log
    )
    assert (logs / f"{noisy.instance_id}.empty.log").exists()


WERKZEUG = "ImportError: cannot import name 'url_quote' from 'werkzeug.urls'"
BROKE = "the test command exited 2: the run broke"


@pytest.mark.parametrize(
    ("log", "problem", "cause"),
    [
        (
            "+ : '>>>>> Start Test Output'\nbash: line 3: pytest: command not found\n",
            None,
            "command not found: pytest",
        ),
        (
            "E   ModuleNotFoundError: No module named 'mpmath'\n",
            None,
            "ModuleNotFoundError: No module named 'mpmath'",
        ),
        (f"{WERKZEUG}\n", None, WERKZEUG),
        ("", "the evaluation timed out after 1800 s", "the evaluation timed out after 1800 s"),
        ("Ran 3 tests", BROKE, f"void: {BROKE}"),
        ("", None, "FAIL_TO_PASS failed: t1"),
    ],
)
def test_first_cause(log: str, problem: str | None, cause: str) -> None:
    report = GradeReport(
        instance_id="x",
        resolved=False,
        fail_to_pass=TestOutcome(passed=[], failed=["t1"], missing=[]),
        pass_to_pass=TestOutcome(passed=["t2"], failed=[], missing=[]),
        problem=problem,
        log=log,
    )
    assert first_cause(report) == cause


def test_the_workspace_root_must_be_reachable_by_the_sandbox(tmp_path: Path) -> None:
    _, repo, row, plan = _tiny()
    closed = tmp_path / "ws"  # pytest's tmp_path is closed to other users
    if traversable(tmp_path):
        pytest.skip("this machine's temp folder is open to every user")
    with pytest.raises(Unsupported, match="closed to other users"):
        prepare(row, repo, closed, plan=plan)


def test_a_clone_missing_files_of_base_commit_is_refused() -> None:
    where, repo, row, plan = _tiny()
    blob = subprocess.run(
        ["git", "rev-parse", "HEAD:src/tinypkg/core.py"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()  # as a snapshot without some blobs
    with pytest.raises(
        Unsupported, match=r"lacks 1 file\(s\) of base_commit \(e\.g\. src/tinypkg/core\.py\)"
    ):
        prepare(row, repo, where / "ws", plan=plan)
    assert not (where / "ws" / row.instance_id).exists()
