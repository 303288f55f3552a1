"""The docker runtime in SWE-bench's official per-instance images, tested up to the wire.

The official images cannot be pulled here (no registry), so `sandboxes/swe-mini/build-official-layout.sh`
builds a swe-mini instance's image with the same layout (/testbed at base_commit, root's, `chmod -R 777`,
a tag reaching later commits, an untracked install artefact, USER root, conda's activate at
/opt/miniconda3) and a Lite-format parquet row names it in its `image` column: from there everything
runs the code path of a real Lite row (`load_lite` -> `prepared(..., "docker")` -> `grade`).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from envhub_swe.data import Instance, load_lite, load_mini, select
from envhub_swe.env import SWEBenchLite
from envhub_swe.prepare import Unsupported, prepared
from envhub_swe.runtime import MINI_IMAGE, Runtime, grade
from envhub_swe.validate import validate
from test_swe_data import LITE, needs_lite

import envhub
from envhub.messages import Message, ToolCall
from envhub.sandbox.workspace import image_present

ROOT = Path(__file__).resolve().parents[3]
BUILD = ROOT / "sandboxes" / "swe-mini" / "build-official-layout.sh"
INSTANCE = "mini__stats-2"
IMAGE = f"envhub/swe-mini-layout:{INSTANCE}"


def _docker_skip() -> str | None:
    try:
        done = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no Docker engine is reachable ({type(exc).__name__})"
    if done.returncode != 0:
        return "no Docker engine is reachable (`docker info` failed); run sandboxes/ci-setup.sh"
    if not image_present(MINI_IMAGE):
        return f"the layout image is built on {MINI_IMAGE}, which is missing: sandboxes/swe-mini/build.sh"
    return None


_SKIP = _docker_skip()
needs_docker = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")


def write_lite(folder: Path, rows: list[Instance]) -> Path:
    """Rows as SWE-bench Lite's parquet stores them (the test lists as JSON strings)."""
    records = [
        {
            **row.model_dump(),
            "FAIL_TO_PASS": json.dumps(row.FAIL_TO_PASS),
            "PASS_TO_PASS": json.dumps(row.PASS_TO_PASS),
        }
        for row in rows
    ]
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records), folder / "test.parquet")
    return folder


@pytest.fixture(scope="module")
def lite_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Lite-format dataset of one swe-mini row whose `image` is its official-layout image."""
    subprocess.run(["bash", str(BUILD), INSTANCE, IMAGE], check=True, capture_output=True, timeout=300)
    (row,) = select(load_mini(), instance=INSTANCE)
    assert "source /opt/miniconda3/bin/activate\nconda activate testbed\n" in row.eval_script
    return write_lite(tmp_path_factory.mktemp("lite"), [row.model_copy(update={"image": IMAGE})])


def test_official_runtime_keeps_the_eval_script_activation() -> None:
    runtime = Runtime(kind="docker", image="swebench/x:latest", official_image=True)
    assert runtime.policy().writable_image and runtime.activation is None
    assert runtime.shell_env["PATH"].startswith("/opt/miniconda3/envs/testbed/bin:")
    assert not Runtime(kind="docker").policy().writable_image and Runtime(kind="docker").shell_env == {}
    with pytest.raises(ValueError, match="kind='docker'"):
        Runtime(kind="local", official_image=True)


@needs_lite
def test_a_missing_official_image_is_named_with_how_to_get_it() -> None:
    row = next(r for r in load_lite("test", LITE) if r.instance_id == "django__django-10914")
    assert row.image == "swebench/sweb.eval.x86_64.django_1776_django-10914:latest"
    with pytest.raises(
        Unsupported, match=r"docker pull swebench/sweb\.eval\.x86_64\.django_1776_django-10914:latest"
    ):
        prepared(row, None, "docker")


def test_a_row_without_an_image_is_refused() -> None:
    row = load_mini()[0].model_copy(update={"image": ""})
    with pytest.raises(Unsupported, match="`image` column is empty"):
        prepared(row, None, "docker")


@needs_docker
def test_gold_resolves_and_empty_does_not_in_the_official_layout(lite_dir: Path) -> None:
    (row,) = load_lite("test", lite_dir)
    runtime, workspace = prepared(row, None, "docker")
    assert (runtime.image, runtime.official_image, workspace) == (IMAGE, True, None)
    gold = asyncio.run(grade(row, row.patch, runtime, workspace))
    assert gold.resolved, gold.summary() + "\n" + gold.log[-3000:]
    # The row's own activation ran (the image has no other pytest), and the reinstall was skipped.
    assert "+ conda activate testbed" in gold.log and "CONDA_DEFAULT_ENV=testbed" in gold.log
    assert "reinstall skipped" in gold.log and gold.runtime == "docker"
    empty = asyncio.run(grade(row, "", runtime, workspace))
    assert not empty.resolved and empty.problem is None and empty.fail_to_pass.failed
    # `envhub swe validate --dataset swe-bench-lite --runtime docker` takes the same path.
    (checked,) = asyncio.run(validate([row], dataset="swe-bench-lite", runtime="docker"))
    assert checked.ok, checked


def call(name: str, **args: object) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create(name, dict(args), id=f"c_{name}")])


@needs_docker
def test_agent_works_in_its_own_container_of_the_image(lite_dir: Path) -> None:
    async def episode(hack: bool) -> tuple[float | None, str]:
        async with SWEBenchLite(path=str(lite_dir), instance=INSTANCE, runtime="docker") as env:
            await env.reset(seed=0)
            assert env.instance is not None
            r = await env.step(
                call(
                    "bash", command="id -u; pwd; command -v pytest; git log --all --oneline | wc -l; git tag"
                )
            )
            lines = r.observation[0].text.splitlines()
            # root, in the image's /testbed, the testbed env active, no later history and no tag left:
            # base_commit and the harness's `SWE-bench` set-up commit on it
            assert lines == [
                "0",
                "/testbed",
                "/opt/miniconda3/envs/testbed/bin/pytest",
                "2",
                "",
                "[exit code 0]",
            ]
            if hack:
                # Root in its own container rewrites the env's pytest to report every listed test passed.
                # Were it graded there, it would resolve; grading starts a fresh container of the image.
                tests = [*env.instance.FAIL_TO_PASS, *env.instance.PASS_TO_PASS]
                fake = "#!/bin/sh\n" + "".join(f"echo 'PASSED {t}'\n" for t in tests)
                fake += f"echo '=== {len(tests)} passed in 0.01s ==='\n"
                script = f"cat > $(command -v pytest) <<'EOF'\n{fake}EOF\npytest -rA | tail -n1"
                r = await env.step(call("bash", command=script))
                assert f"=== {len(tests)} passed" in r.observation[0].text
            else:
                await env.step(call("bash", command=f"git apply - <<'EOF'\n{env.instance.patch}EOF\n"))
            r = await env.step(call("submit"))
            return r.reward, env.patch or ""

    reward, patch = asyncio.run(episode(hack=False))
    assert reward == 1.0
    # Only the fix: not the image's untracked egg-info, not the harness's `chmod -R 777`.
    assert patch.count("diff --git ") == 1 and "stats/core.py" in patch and "old mode" not in patch
    reward, patch = asyncio.run(episode(hack=True))
    assert reward == 0.0 and patch == ""


@needs_docker
def test_an_image_at_another_commit_is_refused(lite_dir: Path) -> None:
    """Only base_commit, or the harness's set-up commit on it, is the row's repository."""
    (row,) = select(load_mini(), instance="mini__textkit-1")  # another repository, another base commit
    runtime = Runtime(kind="docker", image=IMAGE, official_image=True)
    with pytest.raises(envhub.InfrastructureError, match="neither base_commit"):
        asyncio.run(grade(row.model_copy(update={"image": IMAGE}), row.patch, runtime, None))
