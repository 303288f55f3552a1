"""The run configuration: one YAML file, read into typed fields, so a run is understood without running it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from envhub.rollout import RolloutLimits
from envhub_trainer.loss import LossConfig

TRAIN_RETRIES = 2
"""Re-runs of a failed episode in training unless `limits.retries` says otherwise (a dropped group costs
a step's worth of its tasks, so the trainer tries once more than `envhub rollout`)."""

FLAT_LIMITS = {
    "concurrency": "concurrency",
    "backend_concurrency": "backend_concurrency",
    "step_timeout": "step_timeout",
    "episode_timeout": "episode_timeout",
    "episode_retries": "retries",
}
"""Earlier configs' top-level keys, and the `limits` field each now is."""


class TrainConfig(BaseModel):
    """Everything a GRPO run needs; unknown keys are an error, so a typo never silently does nothing."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    model: Path
    """A local `save_pretrained` directory (tokenizer with a chat template included)."""
    env_id: str
    env_kwargs: dict[str, object] = Field(default_factory=dict)
    max_turns: int | None = Field(None, ge=1)
    run_dir: Path = Path("runs/grpo")
    steps: int = Field(50, ge=1)
    tasks_per_step: int = Field(8, ge=1)
    group_size: int = Field(4, ge=2)
    """Episodes per task; advantages compare each episode with the others of its task."""
    lr: float = Field(1e-6, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float | None = Field(1.0, gt=0)
    micro_batch_size: int = Field(8, ge=1)
    """Samples per forward pass (packed rows when `pack_tokens` is set)."""
    pack_tokens: int | None = Field(None, ge=8)
    """Pack sequences into rows of this many tokens instead of padding each to the longest."""
    share_prompts: bool = True
    """Samples with the same prompt (a task's group) share one row: the prompt runs through the model
    once, not once per sample (`shared_prompt.py`); same loss and update. Off with `pack_tokens`."""
    max_new_tokens: int = Field(128, ge=1)
    temperature: float = Field(1.0, gt=0)
    chat_template: str | None = None
    generation_batch_size: int = Field(8, ge=1)
    """Turns of concurrent episodes generated together in one call (at most `limits.concurrency` can be)."""
    engine: Literal["hf", "vllm", "vllm-server"] = "hf"
    """The rollout engine: Hugging Face generate on a synced copy of the weights, vLLM in this process, or
    vLLM's OpenAI-compatible server over HTTP (both need vLLM; `verify_sync` then checks the engine's
    fingerprint changed, as its weight layout differs from the trainer's)."""
    engine_url: str | None = None
    """With `vllm-server`: a running server (started with VLLM_SERVER_DEV_MODE=1) instead of starting one."""
    sync_timeout: float = Field(60.0, gt=0)
    """Seconds a vLLM weight sync may take before the run stops with an error."""
    asynchronous: bool = Field(False, alias="async")
    """Generate the next batch while training on this one (with weights one step behind)."""
    max_staleness: int = Field(1, ge=0)
    """Batches generated more than this many versions behind the trainer are dropped (and counted)."""
    loss: LossConfig = Field(default_factory=LossConfig)
    pass_threshold: float = 1.0
    """An episode passes when its reward is at least this (for the pass rate and the curriculum)."""
    seed: int = 0
    data_parallel: int = Field(1, ge=1)
    """Processes training data-parallel with FSDP2; rank 0 also runs the rollout engine and the
    environments and hands every rank its share of each step's samples. `train` starts the other ranks
    itself, or joins the ones `torchrun` started (then its world size must equal this)."""
    device: str = "cpu"
    """Where the trainer's model computes: "cpu", or "cuda" on a GPU machine (one process; data parallel
    runs compute on CPU over gloo today)."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """The trainer's and the vLLM engine's weights; logits are promoted to float32 for the loss."""
    task_seed_start: int = 0
    """Training tasks are env seeds counted up from here; evaluation uses `eval_seed_start` onwards."""
    curriculum: bool = False
    """Draw tasks from a pool of `task_pool` seeds weighted by p(1-p) of their recent pass rate, skipping
    those always or never solved."""
    task_pool: int = Field(256, ge=1)
    eval_every: int = Field(0, ge=0)
    """Greedy held-out evaluation every N steps (and before the first); 0 turns it off."""
    eval_tasks: int = Field(16, ge=1)
    eval_seed_start: int = 1_000_000
    checkpoint_every: int = Field(10, ge=0)
    limits: RolloutLimits = Field(default_factory=lambda: RolloutLimits(retries=TRAIN_RETRIES))
    """The runner's limits for training and evaluation episodes, the object `envhub rollout` uses
    (`envhub.rollout.RolloutLimits`): `concurrency` env workers, each resetting its env between episodes;
    `backend_concurrency` caps per sandbox kind; `step_timeout` (past it the episode ends as a `timeout`,
    an infrastructure failure: re-run, and its group dropped if it still fails); `episode_timeout` (past
    it the episode is cut off and trained as truncated); `retries` (re-runs, each with a fresh env, of an
    episode the machinery failed: a group that still holds a failed one is dropped whole, never trained
    short; 2 unless given). The flat keys of earlier configs (`concurrency`, `backend_concurrency`,
    `step_timeout`, `episode_timeout`, `episode_retries`) are read into it (`_flat_limits`)."""
    ray: bool = False
    """Play episodes on Ray actors (env workers against engine actors); the trainer stays the driver."""
    ray_address: str | None = None
    """The Ray cluster to join (`auto`, `ray://host:port`); unset starts a local Ray on this machine."""
    env_workers: int = Field(2, ge=1)
    """With `ray`: envhub's episode actors (at most `limits.concurrency`); the episodes in flight are spread
    over them."""
    rollout_workers: int = Field(1, ge=1)
    """With `ray`: engine actors, each holding a copy of the weights (every sync reaches all of them)."""
    ray_engine_resources: dict[str, float] = Field(default_factory=dict)
    """With `ray`: custom Ray resources each engine actor asks for, e.g. {"gpu-like": 1} on a cluster
    whose model nodes advertise it (`ray start --resources`), so the engines run there."""
    ray_env_resources: dict[str, float] | None = None
    """With `ray`: custom Ray resources each episode actor asks for, e.g. {"sandbox": 1}. Unset: the
    env's default sandbox decides (`sandbox` or `browser`, when the cluster advertises it), as for
    `envhub rollout --backend ray`."""
    logged_episodes: int = Field(2, ge=0)
    """Episodes per step written to samples.jsonl for the report."""
    verify_sync: bool = False
    """After every weight sync, check the engine's weights hash equal to the trainer's (costs a hash of
    the model) and record the hash with the step."""
    tensorboard: bool = True
    """Also write TensorBoard events when `tensorboard` is installed."""

    @model_validator(mode="before")
    @classmethod
    def _flat_limits(cls, data: Any) -> Any:
        """Earlier configs' flat keys (and the trainer's default of 2 retries) read into `limits`, so a
        YAML file or a `TrainConfig(concurrency=...)` call written before `limits` keeps working."""
        if not isinstance(data, dict):
            return data
        flat = {FLAT_LIMITS[key]: data[key] for key in FLAT_LIMITS if key in data}
        limits = data.get("limits")
        if flat and limits is not None:
            raise ValueError(
                f"give the rollout limits in `limits:` only, not also as top-level keys "
                f"({', '.join(k for k in FLAT_LIMITS if k in data)}): move them under `limits:` "
                "(episode_retries is `limits.retries`)"
            )
        if isinstance(limits, dict):
            flat = limits
        elif limits is not None:
            return data  # a RolloutLimits, as given
        rest = {key: value for key, value in data.items() if key not in FLAT_LIMITS}
        return {**rest, "limits": {"retries": TRAIN_RETRIES, **flat}}

    @model_validator(mode="after")
    def _whole_groups(self) -> TrainConfig:
        if self.limits.time_budget is not None:
            raise ValueError(
                "limits.time_budget leaves episodes unplayed, and a training step needs every episode of "
                "its groups: bound episodes with limits.episode_timeout instead"
            )
        return self

    @model_validator(mode="after")
    def _devices_fit(self) -> TrainConfig:
        if self.data_parallel > 1 and self.device != "cpu":
            raise ValueError(
                f"data_parallel: {self.data_parallel} computes on CPU over gloo today; use device: cpu, "
                "or data_parallel: 1 to train on one GPU"
            )
        return self


def load_config(path: Path) -> TrainConfig:
    """Read a YAML config; relative paths in it are relative to the file."""
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of options at the top level")
    for key in ("model", "run_dir"):
        if key in data and not Path(str(data[key])).is_absolute():
            data[key] = str((path.parent / str(data[key])).resolve())
    return TrainConfig.model_validate(data)
