"""`envhub.make("swe-bench-lite")` with no other argument: a local workspace prepared on first use.

Offline: the repository source points at a local mirror of a swe-mini repository
(`ENVHUB_SWE_REPO_SOURCE`), and the dataset is one row in Lite's parquet form, so the whole path runs
here: clone into the cache, prepare the workspace, play, grade, and reuse on the next episode.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from envhub_swe.auto import SOURCE_VAR, repo_source
from envhub_swe.data import MINI_DATA, load_mini, select
from envhub_swe.env import SWEBenchLite
from envhub_swe.prepare import MANIFEST, Unsupported
from envhub_swe.runtime import cache_root

import envhub
from envhub.messages import Message, ToolCall
from envhub.policies import OraclePolicy, ScriptedPolicy
from envhub.rollout import run_episode

ROW = "mini__kvstore-2"  # unittest style: its environment needs no package from the index


@pytest.fixture
def lite_row(monkeypatch: pytest.MonkeyPatch) -> str:
    """A Lite-shaped dataset of one swe-mini row, its repository mirrored locally, and a fresh cache."""
    where = Path(tempfile.mkdtemp(dir=cache_root()))  # the sandbox's uid must reach the cache
    where.chmod(0o755)
    (row,) = select(load_mini(), instance=ROW)
    owner, _, name = row.repo.partition("/")
    mirrors = where / "mirrors"
    subprocess.run(
        [
            "git",
            "clone",
            "-q",
            "--mirror",
            str(MINI_DATA / "kvstore.bundle"),
            str(mirrors / f"{owner}+{name}"),
        ],
        check=True,
    )
    data = where / "lite"
    data.mkdir()
    record = row.model_dump(mode="json")
    record["FAIL_TO_PASS"] = json.dumps(row.FAIL_TO_PASS)
    record["PASS_TO_PASS"] = json.dumps(row.PASS_TO_PASS)
    record["image"] = ""  # swe-mini's image is no official one: without it, the local runtime is chosen
    pq.write_table(pa.Table.from_pylist([record]), data / "test.parquet")
    monkeypatch.setenv("ENVHUB_SWE_BENCH_LITE", str(data))
    monkeypatch.setenv("ENVHUB_SWE_CACHE", str(where / "cache"))
    monkeypatch.setenv(SOURCE_VAR, f"{mirrors}/{{owner}}+{{name}}")
    return row.instance_id


async def test_make_with_no_argument_prepares_on_first_use_and_reuses(lite_row: str) -> None:
    env = envhub.make("swe-bench-lite")
    episode = await run_episode(env, OraclePolicy(), seed=0)
    await env.close()
    assert episode.error is None and episode.reward == 1.0
    workspace = cache_root() / "workspaces" / lite_row
    assert (workspace / MANIFEST).is_file()
    assert (cache_root() / "repos").is_dir()

    # A second env reuses the workspace: the source may be gone.
    source = Path(repo_source("mini/kvstore")).parent
    shutil.rmtree(source)
    again = envhub.make("swe-bench-lite")
    empty = await run_episode(again, empty_patch(), seed=0)
    await again.close()
    assert empty.error is None and empty.reward == 0.0


def empty_patch() -> ScriptedPolicy:
    """Submits without changing anything: the empty patch, which must not resolve."""
    return ScriptedPolicy([Message(role="assistant", tool_calls=[ToolCall.create("submit", {})])])


def test_an_unreachable_source_names_the_clone_that_failed(
    lite_row: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(SOURCE_VAR, str(tmp_path / "nowhere" / "{name}"))
    env = SWEBenchLite()
    with pytest.raises(Unsupported, match="git clone"):
        env._resolve(env.instances[0])


def test_a_bad_source_template_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SOURCE_VAR, "/srv/{project}")
    with pytest.raises(Unsupported, match=r"\{repo\}, \{owner\} and \{name\}"):
        repo_source("pallets/flask")
