"""SWE-bench rows: the real Lite dataset from a path the user gives, and the bundled swe-mini set.

The package never ships SWE-bench Lite: it is read with pyarrow from `path=`, `$ENVHUB_SWE_BENCH_LITE`,
or the Hugging Face datasets cache, and a missing copy is an error that says where to put it.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, field_validator

ENV_VAR = "ENVHUB_SWE_BENCH_LITE"
SPLITS = ("test", "dev")
MINI_DATA = Path(__file__).parent / "mini" / "data"
HF_NAMES = ("SWE-bench___swe-bench_lite", "princeton-nlp___swe-bench_lite")
"""Folder names the datasets cache gives SWE-bench/SWE-bench_Lite (and its old name)."""


class DatasetNotFound(FileNotFoundError):
    """SWE-bench Lite is not where we looked; the message says where to put it and how to get it."""


class Instance(BaseModel):
    """One SWE-bench row. FAIL_TO_PASS and PASS_TO_PASS are decoded from their JSON strings."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    repo: str
    instance_id: str
    base_commit: str
    patch: str
    test_patch: str
    problem_statement: str
    hints_text: str = ""
    created_at: str = ""
    version: str = ""
    FAIL_TO_PASS: tuple[str, ...]
    PASS_TO_PASS: tuple[str, ...]
    environment_setup_commit: str = ""
    image: str = ""
    eval_script: str = ""
    log_parser: str = ""
    eval_type: str = ""

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _decode(cls, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    @field_validator("created_at", "version", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return "" if value is None else str(value)

    @property
    def test_files(self) -> list[str]:
        """The files the test patch touches: reset to base_commit before it is applied."""
        return _patched_files(self.test_patch)


def _patched_files(patch: str) -> list[str]:
    files = []
    for line in patch.splitlines():
        if line.startswith("diff --git a/"):
            files.append(line.split(" b/", 1)[0].removeprefix("diff --git a/"))
    return files


def _missing(split: str, looked: list[str]) -> DatasetNotFound:
    return DatasetNotFound(
        f"SWE-bench Lite ({split} split) was not found; looked in: {', '.join(looked) or 'nowhere'}.\n"
        f"Put the official parquet files ({'/'.join(SPLITS)}.parquet, from the SWE-bench repository's "
        "data/SWE-bench_Lite/ or the Hugging Face dataset SWE-bench/SWE-bench_Lite) in a folder and pass "
        f"path=FOLDER (CLI: --data FOLDER) or set {ENV_VAR}=FOLDER; or run "
        "`datasets.load_dataset('SWE-bench/SWE-bench_Lite')` once so its cache is used."
    )


def _hf_cache_files(split: str) -> list[Path]:
    root = Path(os.environ.get("HF_DATASETS_CACHE") or Path.home() / ".cache" / "huggingface" / "datasets")
    found: list[Path] = []
    for name in HF_NAMES:
        found += sorted((root / name).glob(f"**/*-{split}*.arrow"))
        found += sorted((root / name).glob(f"**/{split}-*.parquet"))
    return found


def find_lite(split: str, path: str | Path | None = None) -> list[Path]:
    """The files holding SWE-bench Lite's `split`, from `path`, $ENVHUB_SWE_BENCH_LITE or the HF cache."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    looked: list[str] = []
    for where in (path, os.environ.get(ENV_VAR)):
        if not where:
            continue
        p = Path(where).expanduser()
        candidate = p if p.is_file() else p / f"{split}.parquet"
        looked.append(str(candidate))
        if candidate.is_file():
            return [candidate]
        if path is not None:  # an explicit path that is wrong is an error, not a cue to look elsewhere
            raise _missing(split, looked)
    cached = _hf_cache_files(split)
    if cached:
        return cached
    looked.append("the Hugging Face datasets cache")
    raise _missing(split, looked)


def _read(file: Path) -> list[dict[str, Any]]:
    if file.suffix == ".arrow":
        import pyarrow as pa

        with pa.memory_map(str(file)) as source:
            rows: list[dict[str, Any]] = pa.ipc.open_stream(source).read_all().to_pylist()
            return rows
    table_rows: list[dict[str, Any]] = pq.read_table(file).to_pylist()
    return table_rows


def load_lite(split: str = "test", path: str | Path | None = None) -> list[Instance]:
    """SWE-bench Lite's rows of `split` (test: 300, dev: 23), in the dataset's order."""
    return [Instance.model_validate(row) for file in find_lite(split, path) for row in _read(file)]


def load_mini() -> list[Instance]:
    """The bundled swe-mini rows (12 instances over 4 tiny repositories)."""
    lines = (MINI_DATA / "instances.jsonl").read_text().splitlines()
    return [Instance.model_validate(json.loads(line)) for line in lines if line.strip()]


def load(dataset: str, *, split: str = "test", path: str | Path | None = None) -> list[Instance]:
    """Rows of `swe-bench-lite` or `swe-mini` (which has one split and ignores `split` and `path`)."""
    if dataset == "swe-mini":
        return load_mini()
    if dataset == "swe-bench-lite":
        return load_lite(split, path)
    raise ValueError(f"unknown dataset {dataset!r}; choose swe-bench-lite or swe-mini")


def select(
    instances: Sequence[Instance],
    *,
    instance: str | Iterable[str] | None = None,
    sample: int | None = None,
    seed: int = 0,
) -> list[Instance]:
    """Pick instances by id (one or several, in the order given), or a seeded sample, or all."""
    rows = list(instances)
    if instance is not None:
        wanted = [instance] if isinstance(instance, str) else list(instance)
        by_id = {row.instance_id: row for row in rows}
        unknown = [i for i in wanted if i not in by_id]
        if unknown:
            raise KeyError(f"unknown instance ids: {', '.join(unknown)} (the dataset has {len(rows)} rows)")
        rows = [by_id[i] for i in wanted]
    if sample is not None:
        if not 0 < sample <= len(rows):
            raise ValueError(f"sample must be between 1 and {len(rows)}, got {sample}")
        rows = random.Random(seed).sample(rows, sample)
    return rows
