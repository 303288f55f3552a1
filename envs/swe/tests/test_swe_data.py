from __future__ import annotations

import os
from pathlib import Path

import pytest
from envhub_swe.data import ENV_VAR, DatasetNotFound, load_lite, load_mini, select


def _find_lite() -> Path:
    """The shared SWE-bench Lite rows: $ENVHUB_SWE_BENCH_LITE, or `shared/` beside a parent folder."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "shared" / "data" / "swe-bench-lite"
        if candidate.is_dir():
            return candidate
    return here.parents[4] / "shared" / "data" / "swe-bench-lite"


LITE = _find_lite()
needs_lite = pytest.mark.skipif(not LITE.is_dir(), reason=f"SWE-bench Lite is not at {LITE}")


@needs_lite
def test_lite_rows_load_with_decoded_test_lists() -> None:
    test, dev = load_lite("test", LITE), load_lite("dev", LITE)
    assert (len(test), len(dev)) == (300, 23)
    django = next(r for r in test if r.instance_id == "django__django-10914")
    assert django.FAIL_TO_PASS == (
        "test_override_file_upload_permissions (test_utils.tests.OverrideSettingsTests)",
    )
    assert django.test_files == ["tests/test_utils/tests.py"]
    assert {r.repo for r in test} >= {"django/django", "sympy/sympy", "mwaskom/seaborn"}


@needs_lite
def test_environment_variable_points_at_the_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(LITE))
    assert len(load_lite("dev")) == 23


def test_missing_dataset_says_where_and_how(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path))
    with pytest.raises(DatasetNotFound) as err:
        load_lite("test")
    message = str(err.value)
    assert ENV_VAR in message and "SWE-bench/SWE-bench_Lite" in message and "path=" in message
    with pytest.raises(DatasetNotFound, match=str(tmp_path / "nowhere")):
        load_lite("test", tmp_path / "nowhere")


def test_select_by_id_list_and_seeded_sample() -> None:
    rows = load_mini()
    assert len(rows) >= 12
    assert [r.instance_id for r in select(rows, instance="mini__stats-2")] == ["mini__stats-2"]
    pair = select(rows, instance=["mini__semver-1", "mini__textkit-3"])
    assert [r.instance_id for r in pair] == ["mini__semver-1", "mini__textkit-3"]
    assert select(rows, sample=4, seed=1) == select(rows, sample=4, seed=1)
    assert select(rows, sample=4, seed=1) != select(rows, sample=4, seed=2)
    with pytest.raises(KeyError, match="nope"):
        select(rows, instance="nope")


def test_mini_covers_both_styles_and_official_format() -> None:
    rows = load_mini()
    assert {r.log_parser for r in rows} == {"parse_log_pytest", "parse_log_django"}
    for row in rows:
        assert row.FAIL_TO_PASS and row.PASS_TO_PASS and row.patch and row.test_patch
        assert ": '>>>>> Start Test Output'" in row.eval_script and row.base_commit in row.eval_script


def test_mini_build_is_reproducible(tmp_path: Path) -> None:
    from envhub_swe.mini.build import build

    rebuilt = build(tmp_path)
    assert [(r["instance_id"], r["base_commit"], r["patch"]) for r in rebuilt] == [
        (r.instance_id, r.base_commit, r.patch) for r in load_mini()
    ]
