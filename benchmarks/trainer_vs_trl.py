"""envhub's GRPO trainer (vLLM engine) next to TRL's GRPOTrainer: same model, task and batch, in one run.

    python benchmarks/trainer_vs_trl.py [--steps 5] [--rounds 3] [--out /tmp/tvt.json]  # or: make bench-trl
    python benchmarks/trainer_vs_trl.py --device cuda --dtype bfloat16                   # on a GPU machine

Both train SmolLM2-135M-Instruct on "name the larger of two numbers" (the env of train_cpu.py): 8 prompts
x 4 completions x at most 32 new tokens per optimiser step, on the same prompts in the same order (env
seeds 0, 1, 2, ...) rendered by the model's chat template and scored by the env itself, with the loss
and optimiser settings mapped one to one where they can be (the mapping is printed, differences named).
Each trainer runs in an interpreter of its own, one after the other, so threads, memory and vLLM's global
state never mix. On CPU, TRL generates with Hugging Face `generate`: its vLLM modes do not run there (colocate
fails at its first weight sync). On CUDA both generate with vLLM (TRL in colocate mode).

Printed: seconds per step (mean over the steps after the first, and the first), generation and training
tokens/s, reward and peak RSS per step and peak RSS of both; our steps/s over TRL's against the 1.5x goal;
our training time per step against its compute bound (the step's forward+backward FLOPs over the matmul
FLOP/s of the model's own GEMM shapes, the fastest of three measurements after each round), both for the
samples' tokens and per token the step ran through the model (padding excluded: the 1.5x goal; and with
it); and our peak RSS against TRL's plus what building our vLLM engine added (its weights, KV cache and
runtime), and whether it stays flat from step to step. Every row goes to --out.

`--rounds N` (3 by default) runs the pair N times, alternating which goes first, prints each round's
tables, then each ratio per round with its median and spread (min-max), and judges the goals on the
medians: one run's ratio moves by ~10% with a shared host's speed. Across rounds every bound is taken at
the fastest matmul rate the run measured, so a round whose rate was measured on a busy host cannot pass
on a lenient bound.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from envhub_trainer.models import smollm2_dir
from rich.console import Console
from rich.table import Table
from train_cpu import Larger

import envhub
from envhub.inference.chat_template import template_message
from envhub.text_format import parse_assistant_text

ENV_ID = "larger-number-v0"
PROMPTS, GROUP_SIZE, COMPLETION_TOKENS, MICRO_BATCH = 8, 4, 32, 8
EPS_LOW, EPS_HIGH, IS_CAP, MAX_GRAD_NORM = 0.2, 0.28, 2.0, 1.0
SPEEDUP_GOAL = 1.5  # our steps/s at least this times TRL's
BOUND_GOAL = 1.3  # our training time per step at most this times the compute bound of its samples
TOKEN_BOUND_GOAL = 1.5  # ... and at most this times the bound of the tokens it ran (padding excluded)
MATMUL_SAMPLES = 3
"""Matmul rate measurements after each round, the fastest kept: on a shared host one measurement can land
in a slow minute (rates of 99-131 GFLOP/s in one run, 164 in another an hour before) and make the bound
lenient."""
NAMES = {"envhub": "envhub (vLLM engine)", "trl": "TRL GRPOTrainer"}


@dataclass
class StepRow:
    """One optimiser step of either trainer, in the same units."""

    step: int
    seconds: float
    """Wall time of the step: between consecutive steps' ends; for the first, its own parts."""
    rollout_seconds: float
    """Generation plus scoring (env rewards; for TRL also its advantage bookkeeping)."""
    train_seconds: float
    """Forward, backward and optimiser step over the step's 32 sequences."""
    sync_seconds: float
    """Pushing the new weights into the generator (0 where generation uses the trained model)."""
    completion_tokens: int
    sequence_tokens: int
    """Prompt plus completion tokens of the step's sequences, padding excluded: what is trained on."""
    sequences: int
    reward_mean: float
    peak_rss_gib: float
    """The process's peak resident memory since the end of the step before (Linux; else the run's)."""
    model_tokens: int | None = None
    """Tokens the forward passes ran through the model, padding excluded: ours runs a shared prompt once
    per row (`share_prompts`); None where every sequence runs whole (TRL), i.e. `sequence_tokens`."""
    padded_tokens: int | None = None
    """The same with the padding of each micro-batch's rows to its widest: what the GEMMs ran over.
    None where not known (TRL)."""

    @property
    def computed_tokens(self) -> int:
        return self.sequence_tokens if self.model_tokens is None else self.model_tokens


def env_prompt(seed: int) -> list[dict[str, Any]]:
    """The messages our trainer sends for this seed, as chat-template dicts: TRL's dataset row."""

    async def reset() -> list[dict[str, Any]]:
        env = envhub.make(ENV_ID)
        try:
            observation, _ = await env.reset(seed=seed)
        finally:
            await env.close()
        return [template_message(m) for m in observation]

    return asyncio.run(reset())


async def env_reward(seed: int, text: str) -> float:
    """The reward our trainer's episode gets for this completion: the env's own step, not a copy of it."""
    env = envhub.make(ENV_ID)
    try:
        await env.reset(seed=seed)
        result = await env.step(parse_assistant_text(text))
    finally:
        await env.close()
    return float(result.reward)


def peak_rss_gib() -> float:
    """Peak resident memory of this process (and any child it waited for)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 2**20  # ru_maxrss is in KiB on Linux


def _status_gib(field: str) -> float | None:
    """A memory line of /proc/self/status (VmRSS, VmHWM) in GiB; None off Linux."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return None
    kib = next((int(line.split()[1]) for line in lines if line.startswith(f"{field}:")), None)
    return None if kib is None else kib / 2**20


def rss_gib() -> float:
    """Resident memory of this process now."""
    return _status_gib("VmRSS") or 0.0


WINDOW_PEAKS: list[float] = []
"""This process's peak RSS in each window `step_peak_gib` closed: together they span the whole run."""


def step_peak_gib() -> float:
    """The peak RSS since the last call (Linux resets the high-water mark on request; elsewhere the
    figure is the run's peak so far). Measured here, the same way for both trainers, whatever they log.

    The reset also resets what getrusage reports (ru_maxrss), as does our trainer's own each step: the
    run's peak is the largest window's, kept in WINDOW_PEAKS."""
    peak = _status_gib("VmHWM")
    with contextlib.suppress(OSError):  # not Linux: the run's peak so far
        Path("/proc/self/clear_refs").write_text("5")  # 5: reset the peak RSS, nothing else
    WINDOW_PEAKS.append(peak if peak is not None else peak_rss_gib())
    return WINDOW_PEAKS[-1]


# ---------------------------------------------------------------- the two trainers (each in its own process)


def run_envhub(args: argparse.Namespace) -> dict[str, Any]:
    """Our trainer with `engine: vllm`, configured as the module docstring says."""
    from envhub_trainer import grpo
    from envhub_trainer.config import TRAIN_RETRIES, TrainConfig
    from envhub_trainer.grpo import train
    from envhub_trainer.loss import LossConfig

    from envhub.rollout import RolloutLimits

    envhub.register(ENV_ID, Larger, override=True)
    run_dir = Path(tempfile.mkdtemp(prefix="envhub-vs-trl-"))
    config = TrainConfig(
        model=args.model,
        env_id=ENV_ID,
        run_dir=run_dir,
        steps=args.steps,
        tasks_per_step=PROMPTS,
        group_size=GROUP_SIZE,
        lr=args.lr,
        weight_decay=0.0,
        max_grad_norm=MAX_GRAD_NORM,
        micro_batch_size=MICRO_BATCH,
        pack_tokens=args.pack_tokens,
        share_prompts=not args.no_share_prompts,
        max_new_tokens=COMPLETION_TOKENS,
        temperature=1.0,
        engine="vllm",
        generation_batch_size=PROMPTS * GROUP_SIZE,  # the whole step in one vLLM call, as TRL does
        limits=RolloutLimits(concurrency=PROMPTS * GROUP_SIZE, retries=TRAIN_RETRIES),
        loss=LossConfig(
            scale="batch",
            eps_low=EPS_LOW,
            eps_high=EPS_HIGH,
            normalisation="token",
            is_cap=IS_CAP,
            kl_coef=0.0,
        ),
        seed=args.seed,
        eval_every=0,
        checkpoint_every=0,
        tensorboard=False,
        device=args.device,
        dtype=args.dtype,  # the trainer's weights and the vLLM engine's
    )
    stamps: list[float] = []
    peaks: list[float] = []
    engine_rss: list[float] = []

    def on_step(row: dict[str, Any]) -> None:
        stamps.append(time.perf_counter())
        peaks.append(step_peak_gib())

    def measured_engine(*args: Any, **kwargs: Any) -> Any:
        """The configured engine, with the RSS its building added: the vLLM engine's share."""
        before = rss_gib()
        engine = make_engine(*args, **kwargs)
        engine_rss.append(rss_gib() - before)
        step_peak_gib()  # the start-up's peak, before our trainer resets the mark for its first step
        return engine

    make_engine = grpo.make_engine  # type: ignore[attr-defined]
    grpo.make_engine = measured_engine  # type: ignore[attr-defined]
    started = time.perf_counter()
    step_peak_gib()  # the first step's peak starts here
    try:
        metrics = train(config, on_step=on_step)
    finally:
        grpo.make_engine = make_engine  # type: ignore[attr-defined]
        shutil.rmtree(run_dir, ignore_errors=True)
    rows = []
    for i, m in enumerate(metrics):
        parts = m["rollout_seconds"] + m["train_seconds"] + m["sync_seconds"]
        rows.append(
            StepRow(
                step=m["step"],
                seconds=parts if i == 0 else stamps[i] - stamps[i - 1],
                rollout_seconds=m["rollout_seconds"],
                train_seconds=m["train_seconds"],
                sync_seconds=m["sync_seconds"],
                completion_tokens=round(m["rollout_tokens_per_second"] * m["rollout_seconds"]),
                sequence_tokens=round(m["train_tokens_per_second"] * m["train_seconds"]),
                sequences=m["samples"],
                reward_mean=m["reward_mean"],
                peak_rss_gib=peaks[i],
                model_tokens=round(m["model_tokens"]),
                padded_tokens=round(m["padded_tokens"]) if "padded_tokens" in m else None,
            )
        )
    return {
        "rows": [asdict(r) for r in rows],
        "startup_seconds": stamps[0] - started - rows[0].seconds,
        "generator": "vLLM in-process, prefix cache on",
        "engine_rss_gib": engine_rss[0] if engine_rss else None,
    }


def run_trl(args: argparse.Namespace) -> dict[str, Any]:
    """TRL's GRPOTrainer on the same prompts, reward and settings; timed around its generation."""
    from datasets import Dataset
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[import-not-found,attr-defined,unused-ignore]

    envhub.register(ENV_ID, Larger, override=True)
    use_vllm = args.device != "cpu"
    rollouts: list[tuple[float, int, int, int]] = []  # seconds, completion tokens, sequence tokens, sequences
    rewards: list[list[float]] = []

    class TimedGRPOTrainer(GRPOTrainer):  # type: ignore[misc,unused-ignore]
        """Times generation + scoring (TRL's `_generate_and_score_completions`) and counts its tokens."""

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            started = time.perf_counter()
            batch: dict[str, Any] = super()._generate_and_score_completions(inputs)
            completion, prompt = int(batch["completion_mask"].sum()), int(batch["prompt_mask"].sum())
            sequences = int(batch["completion_mask"].shape[0])
            rollouts.append((time.perf_counter() - started, completion, completion + prompt, sequences))
            return batch

    class StepClock(TrainerCallback):
        """Wall-clock stamps at the start and end of every optimiser step."""

        def __init__(self) -> None:
            self.begin: list[float] = []
            self.end: list[float] = []
            self.peaks: list[float] = []

        def on_step_begin(
            self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
        ) -> None:
            self.begin.append(time.perf_counter())

        def on_step_end(
            self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
        ) -> None:
            self.end.append(time.perf_counter())
            self.peaks.append(step_peak_gib())

    async def larger_reward(
        completions: list[list[dict[str, str]]], seed: list[int], **_: Any
    ) -> list[float]:
        scores = await asyncio.gather(
            *(env_reward(s, c[-1]["content"]) for s, c in zip(seed, completions, strict=True))
        )
        rewards.append(list(scores))
        return list(scores)

    seeds = range(PROMPTS * args.steps)  # our trainer draws seeds 0..7, then 8..15, ...
    dataset = Dataset.from_list([{"prompt": env_prompt(s), "seed": s} for s in seeds])
    output_dir = Path(tempfile.mkdtemp(prefix="trl-vs-envhub-"))
    config = GRPOConfig(
        output_dir=str(output_dir),
        max_steps=args.steps,
        per_device_train_batch_size=MICRO_BATCH,
        gradient_accumulation_steps=PROMPTS * GROUP_SIZE // MICRO_BATCH,  # one generation batch a step
        num_generations=GROUP_SIZE,
        max_completion_length=COMPLETION_TOKENS,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=MAX_GRAD_NORM,
        loss_type="dapo",
        epsilon=EPS_LOW,
        epsilon_high=EPS_HIGH,
        scale_rewards="batch",
        beta=0.0,
        num_iterations=1,
        gradient_checkpointing=False,  # TRL's default is on; ours recomputes nothing, nor does TRL here
        shuffle_dataset=False,
        use_cpu=args.device == "cpu",
        bf16=args.dtype == "bfloat16",
        model_init_kwargs={"dtype": args.dtype},
        use_vllm=use_vllm,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.3,
        vllm_importance_sampling_mode="token_truncate",  # ours: min(pi_old / pi_vllm, cap) per token
        vllm_importance_sampling_clip_max=IS_CAP,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=args.seed,
    )
    clock = StepClock()
    started = time.perf_counter()
    step_peak_gib()  # the first step's peak starts here
    trainer = TimedGRPOTrainer(
        model=str(args.model),
        reward_funcs=larger_reward,  # type: ignore[arg-type,unused-ignore]  # TRL awaits async ones
        args=config,
        train_dataset=dataset,
        callbacks=[clock],
    )
    try:
        trainer.train()
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)
    rows = []
    for i, (rollout, completion, tokens, sequences) in enumerate(rollouts):
        step_seconds = clock.end[i] - clock.begin[i]
        rows.append(
            StepRow(
                step=i + 1,
                seconds=step_seconds if i == 0 else clock.end[i] - clock.end[i - 1],
                rollout_seconds=rollout,
                train_seconds=step_seconds - rollout,
                sync_seconds=0.0,  # colocated vLLM's sync happens inside generation and is counted there
                completion_tokens=completion,
                sequence_tokens=tokens,
                sequences=sequences,
                reward_mean=statistics.fmean(rewards[i]),
                peak_rss_gib=clock.peaks[i],
            )
        )
    return {
        "rows": [asdict(r) for r in rows],
        "startup_seconds": clock.begin[0] - started,
        "generator": "vLLM colocate" if use_vllm else "Hugging Face generate (use_vllm=False)",
    }


RUNNERS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {"envhub": run_envhub, "trl": run_trl}


def child(args: argparse.Namespace) -> None:
    """Entry point of a child process: run one trainer and write its rows to `args.result`."""
    result = RUNNERS[args.child](args)
    step_peak_gib()  # closes the last window, from the last step's end to here
    result["peak_rss_gib"] = max(WINDOW_PEAKS)
    args.result.write_text(json.dumps(result))


def run_child(name: str, args: argparse.Namespace, log: Path, label: str = "") -> dict[str, Any] | None:
    """One trainer in a fresh interpreter, its output to `log`; None (and the log's tail) if it failed."""
    result = log.with_suffix(".json")
    result.unlink(missing_ok=True)
    command = [sys.executable, __file__, *sys.argv[1:], "--child", name, "--result", str(result)]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(args.threads))
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("HF_HUB_OFFLINE", "1")
    load = os.getloadavg()[0]  # other work on the machine skews both runs: say how much there was
    where = f"{label}, " if label else ""
    print(
        f"running {NAMES[name]} ({where}{args.steps} steps; load {load:.2f}), output in {log} ...", flush=True
    )
    with log.open("w") as out:
        code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, check=False).returncode
    if code != 0 or not result.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        print(f"{NAMES[name]} failed (exit code {code}); the end of {log}:\n{tail}", flush=True)
        return None
    loaded: dict[str, Any] = json.loads(result.read_text())
    result.unlink()
    return {**loaded, "load_average": load}


# ---------------------------------------------------------------- the compute bound


@dataclass
class Shape:
    """What the FLOP count and the matmul benchmark need to know about the model."""

    parameters: int
    layers: int
    hidden: int
    linears: list[tuple[int, int, int]]
    """(in features, out features, how many in the model) of every linear layer, LM head included."""


def model_shape(model: Path) -> Shape:
    """Read from the config (the weights stay on the meta device: nothing is loaded)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model)
    with torch.device("meta"):
        empty = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call,unused-ignore]
        parameters = sum(p.numel() for p in empty.parameters())
    d, layers = config.hidden_size, config.num_hidden_layers
    kv = config.num_key_value_heads * (d // config.num_attention_heads)
    ff = config.intermediate_size
    linears = [(d, d, 2 * layers), (d, kv, 2 * layers), (d, ff, 2 * layers), (ff, d, layers)]
    return Shape(parameters, layers, d, [*linears, (d, config.vocab_size, 1)])


def step_flops(row: StepRow, shape: Shape, tokens: int | None = None) -> float:
    """Forward + backward FLOPs of a step over `tokens` (default: the samples' own): 6 N T for the weights
    (the tied embedding counted once, as the LM head's matmul) plus 12 L d s T for causal-free attention
    scores and values, s the samples' mean length."""
    tokens = row.sequence_tokens if tokens is None else tokens
    mean_length = row.sequence_tokens / max(row.sequences, 1)
    weights = 6 * shape.parameters * tokens
    attention = 12 * shape.layers * shape.hidden * mean_length * tokens
    return weights + attention


def matmul_flops_per_second(shape: Shape, tokens: int, device: str, dtype: str, repeats: int = 7) -> float:
    """FLOP/s of the GEMMs a training step runs (each linear's forward, input-gradient and weight-gradient
    products for `tokens` rows), weighted by how often the model runs each: the rate the bound assumes.

    Each shape's fastest repeat counts: the bound is what the machine can do, not what a busy one did."""
    import torch

    kind = getattr(torch, dtype)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    total_seconds = total_flops = 0.0
    for features_in, features_out, count in shape.linears:
        x = torch.randn(tokens, features_in, device=device, dtype=kind)
        w = torch.randn(features_out, features_in, device=device, dtype=kind)
        dy = torch.randn(tokens, features_out, device=device, dtype=kind)
        times = []
        for _ in range(repeats + 1):  # the first is a warm-up
            sync()
            started = time.perf_counter()
            torch.matmul(x, w.T)  # forward
            torch.matmul(dy, w)  # gradient of the input
            torch.matmul(dy.T, x)  # gradient of the weight
            sync()
            times.append(time.perf_counter() - started)
        total_seconds += count * min(times[1:])
        total_flops += count * 3 * 2 * tokens * features_in * features_out
    return total_flops / total_seconds


# ---------------------------------------------------------------- the report


def steady(rows: list[StepRow]) -> list[StepRow]:
    """The steps that stand for a long run: not the first (warm-up), nor the last where there are enough,
    as our trainer skips the last step's weight sync (nothing generates after it)."""
    return rows[1:-1] if len(rows) >= 3 else rows[1:]


def mean(rows: list[StepRow], value: Callable[[StepRow], float]) -> float:
    return statistics.fmean(value(r) for r in rows)


def mapping(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """How each setting of ours maps to TRL's, and where they differ."""
    trl_engine = "vLLM colocate" if args.device != "cpu" else "HF generate (use_vllm=False)"
    trl_is = (
        f"vllm_importance_sampling_mode=token_truncate, clip_max {IS_CAP}"
        if args.device != "cpu"
        else "none: HF generate samples from the trained weights"
    )
    return [
        ("model", f"SmolLM2-135M-Instruct, {args.dtype}, {args.device}", "same"),
        (
            "prompts",
            "env seeds 0.. in order, chat template",
            "the env's reset messages, same template, in order",
        ),
        ("reward", "the env's @reward", "the env's step on the decoded completion"),
        ("batch", f"{PROMPTS} prompts x {GROUP_SIZE}", f"num_generations={GROUP_SIZE}, 32 per generation"),
        (
            "completion",
            f"max_new_tokens={COMPLETION_TOKENS}, T=1",
            f"max_completion_length={COMPLETION_TOKENS}, T=1",
        ),
        ("generation", "vLLM in-process, one call of 32", f"{trl_engine}, one call of 32"),
        (
            "micro-batches",
            f"{MICRO_BATCH} sequences, padded"
            if args.no_share_prompts or args.pack_tokens
            else f"{MICRO_BATCH} sequences; a prompt's {GROUP_SIZE} share a row, the prompt run once",
            f"{MICRO_BATCH} x gradient_accumulation_steps=4",
        ),
        ("optimiser", f"AdamW lr {args.lr:g}, constant, clip 1", f"AdamW lr {args.lr:g}, constant, clip 1"),
        ("advantage", "/ batch std (population, +1e-6)", "scale_rewards=batch (Bessel std, +1e-4)"),
        ("loss", f"clip {EPS_LOW}/{EPS_HIGH}, sum / step tokens", f"dapo, epsilon {EPS_LOW}/{EPS_HIGH}"),
        ("KL", "kl_coef 0", "beta 0"),
        ("IS correction", f"min(pi_old / pi_vLLM, {IS_CAP}) per token", trl_is),
        ("grad checkpointing", "none", "off (TRL's default is on)"),
    ]


def show(
    args: argparse.Namespace,
    runs: dict[str, dict[str, Any] | None],
    shape: Shape,
    flops: float,
    heading: str = "",
    *,
    with_mapping: bool = True,
) -> dict[str, Any]:
    """Print one round's tables and verdicts (the settings' mapping too, unless told not to); returns
    its summary, which goes into the JSON file."""
    console = Console()
    if with_mapping:
        table = Table(title="How the two runs are configured")
        for column in ("setting", NAMES["envhub"], NAMES["trl"]):
            table.add_column(column)
        for row in mapping(args):
            table.add_row(*row)
        console.print(table)

    rows = {name: [StepRow(**r) for r in run["rows"]] for name, run in runs.items() if run is not None}
    names = [n for n in NAMES if n in rows]
    summary: dict[str, Any] = {}
    for name in names:
        steps, run = steady(rows[name]), runs[name] or {}
        summary[name] = {
            "seconds_per_step": mean(steps, lambda r: r.seconds),
            "first_step_seconds": rows[name][0].seconds,
            "startup_seconds": run["startup_seconds"],
            "rollout_seconds": mean(steps, lambda r: r.rollout_seconds),
            "train_seconds": mean(steps, lambda r: r.train_seconds),
            "sync_seconds": mean(steps, lambda r: r.sync_seconds),
            "generation_tokens_per_second": sum(r.completion_tokens for r in steps)
            / sum(r.rollout_seconds for r in steps),
            "train_tokens_per_second": sum(r.sequence_tokens for r in steps)
            / sum(r.train_seconds for r in steps),
            "reward_mean": statistics.fmean(r.reward_mean for r in rows[name]),
            "peak_rss_gib": run["peak_rss_gib"],
            "step_peak_rss_gib": [r.peak_rss_gib for r in rows[name]],
            "rss_growth_gib": rows[name][-1].peak_rss_gib
            - rows[name][min(1, len(rows[name]) - 1)].peak_rss_gib,
            "engine_rss_gib": run.get("engine_rss_gib"),
            "bound_seconds": mean(steps, lambda r: step_flops(r, shape) / flops),
            "model_tokens": mean(steps, lambda r: r.computed_tokens),
            "computed_bound_seconds": mean(steps, lambda r: step_flops(r, shape, r.computed_tokens) / flops),
            "load_average": run["load_average"],
        }
        summary[name]["train_over_bound"] = summary[name]["train_seconds"] / summary[name]["bound_seconds"]
        summary[name]["train_over_computed_bound"] = (
            summary[name]["train_seconds"] / summary[name]["computed_bound_seconds"]
        )
        if all(r.padded_tokens is not None for r in steps):
            padded = mean(steps, lambda r: step_flops(r, shape, r.padded_tokens) / flops)
            summary[name]["padded_tokens"] = mean(steps, lambda r: float(r.padded_tokens or 0))
            summary[name]["train_over_padded_bound"] = summary[name]["train_seconds"] / padded

    span = "2" if args.steps == 2 else f"2-{args.steps - 1}"
    table = Table(
        title=f"{heading}{args.steps} steps x {PROMPTS * GROUP_SIZE} completions, {args.threads} threads"
    )
    table.add_column("metric")
    for name in names:
        table.add_column(f"{NAMES[name]}\n{(runs[name] or {})['generator']}", justify="right")
    lines = [
        (f"seconds / step (mean of steps {span})", "seconds_per_step", "{:.2f}"),
        ("  rollout: generation + reward", "rollout_seconds", "{:.2f}"),
        ("  training: forward, backward, AdamW", "train_seconds", "{:.2f}"),
        ("  weight sync to the generator", "sync_seconds", "{:.2f}"),
        ("first step, seconds", "first_step_seconds", "{:.2f}"),
        ("start-up before step 1, seconds", "startup_seconds", "{:.1f}"),
        ("generation tokens / s", "generation_tokens_per_second", "{:.0f}"),
        ("training tokens / s (prompt + completion)", "train_tokens_per_second", "{:.0f}"),
        ("compute bound of training its samples, seconds", "bound_seconds", "{:.2f}"),
        ("training / that bound", "train_over_bound", "{:.2f}x"),
        ("tokens through the model / step", "model_tokens", "{:.0f}"),
        ("compute bound of those tokens, seconds", "computed_bound_seconds", "{:.2f}"),
        ("training / that bound", "train_over_computed_bound", "{:.2f}x"),
        ("tokens through the model with their padding / step", "padded_tokens", "{:.0f}"),
        ("training / bound of those (padding counted as run)", "train_over_padded_bound", "{:.2f}x"),
        ("reward, mean over all steps", "reward_mean", "{:.3f}"),
        ("peak RSS, GiB", "peak_rss_gib", "{:.2f}"),
        ("  last step's peak - step 2's, GiB", "rss_growth_gib", "{:+.2f}"),
        ("load average (1 min) before the run", "load_average", "{:.2f}"),
    ]
    for label, key, form in lines:
        table.add_row(label, *(form.format(summary[n][key]) if key in summary[n] else "-" for n in names))
    console.print(table)

    table = Table(
        title=f"{heading}per step: seconds (rollout / train), mean reward of the 32 completions, peak RSS"
    )
    table.add_column("step", justify="right")
    for name in names:
        table.add_column(f"{name} s", justify="right")
        table.add_column(f"{name} reward", justify="right")
        table.add_column(f"{name} GiB", justify="right")
    for i in range(max(len(rows[n]) for n in names)):
        cells = [str(i + 1)]
        for name in names:
            if i < len(rows[name]):
                r = rows[name][i]
                cells += [
                    f"{r.seconds:.2f} ({r.rollout_seconds:.2f} / {r.train_seconds:.2f})",
                    f"{r.reward_mean:.3f}",
                    f"{r.peak_rss_gib:.2f}",
                ]
            else:
                cells += ["", "", ""]
        table.add_row(*cells)
    console.print(table)

    console.print(
        f"matmul rate of the model's GEMMs ({args.dtype}, {args.device}, {args.threads} threads): "
        f"{flops / 1e9:.1f} GFLOP/s; a step's FLOPs = 6 x {shape.parameters / 1e6:.1f}M parameters x tokens "
        f"+ 12 x layers x hidden x mean length x tokens (attention)"
    )
    if "envhub" in summary:
        ours = summary["envhub"]
        ratio = ours["train_over_computed_bound"]
        verdict = "met" if ratio <= TOKEN_BOUND_GOAL else "missed"
        console.print(
            f"training time per token run through the model ({ours['model_tokens']:.0f} a step): "
            f"{ratio:.2f}x its compute bound (goal <= {TOKEN_BOUND_GOAL}x): {verdict}; "
            f"of its samples: {ours['train_over_bound']:.2f}x (earlier goal <= {BOUND_GOAL}x)"
        )
    if "envhub" in summary and "trl" in summary:
        ours, theirs = summary["envhub"], summary["trl"]
        speedup = theirs["seconds_per_step"] / ours["seconds_per_step"]
        summary["speedup"] = speedup
        verdict = "met" if speedup >= SPEEDUP_GOAL else "missed"
        console.print(f"steps/s, ours / TRL's: {speedup:.2f}x (goal >= {SPEEDUP_GOAL}x): {verdict}")
        samples = PROMPTS * GROUP_SIZE * args.steps
        noise = 2 * math.sqrt(
            sum(p * (1 - p) / samples for p in (ours["reward_mean"], theirs["reward_mean"]))
        )
        difference = ours["reward_mean"] - theirs["reward_mean"]
        reward_verdict = (
            "better" if difference > noise else "worse" if difference < -noise else "equal within noise"
        )
        console.print(
            f"mean reward over the {args.steps} steps, ours - TRL's: {difference:+.3f} "
            f"(two standard errors: {noise:.3f}): {reward_verdict}"
        )
        if ours["engine_rss_gib"] is not None:
            allowance = theirs["peak_rss_gib"] + ours["engine_rss_gib"]
            verdict = "met" if ours["peak_rss_gib"] <= allowance else "missed"
            console.print(
                f"peak RSS, ours: {ours['peak_rss_gib']:.2f} GiB; TRL's {theirs['peak_rss_gib']:.2f} GiB + "
                f"our vLLM engine's {ours['engine_rss_gib']:.2f} GiB = {allowance:.2f} GiB (goal: at most "
                f"that): {verdict}"
            )
    else:
        console.print("one of the runs failed: no comparison (see its log above)")
    return summary


RATIOS: list[tuple[str, str, Callable[[dict[str, Any]], float | None]]] = [
    ("steps/s, envhub / TRL", "speedup", lambda s: s.get("speedup")),
    (
        "envhub training / bound of its samples",
        "envhub_bound",
        lambda s: _get(s, "envhub", "train_over_bound"),
    ),
    # TRL runs every sample whole: the bound of its samples is the bound of the tokens it ran
    ("TRL training / its bound", "trl_bound", lambda s: _get(s, "trl", "train_over_bound")),
    (
        "envhub training per token run / its bound",
        "envhub_token_bound",
        lambda s: _get(s, "envhub", "train_over_computed_bound"),
    ),
    (
        "  the same, padding counted as run",
        "envhub_padded_bound",
        lambda s: _get(s, "envhub", "train_over_padded_bound"),
    ),
]
"""Each ratio the rounds report: label, JSON key, and how to read it from a round's summary."""
BOUND_RATIOS = {"envhub_bound", "trl_bound", "envhub_token_bound", "envhub_padded_bound"}
"""The ratios to a compute bound, which depend on the matmul rate they were taken at."""


def _get(summary: dict[str, Any], name: str, key: str) -> float | None:
    value = summary.get(name, {}).get(key)
    return None if value is None else float(value)


def show_rounds(args: argparse.Namespace, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """A row per round, then the median and spread (min-max) of each ratio, and the verdicts on the
    medians: one run's ratio moves by ~10% with the shared host's speed, so a goal is judged on the
    middle of several, with the spread beside it."""
    console = Console()
    table = Table(title=f"{len(rounds)} rounds, envhub and TRL alternately ({args.steps} steps each)")
    table.add_column("round (who ran first)")
    for entry in rounds:
        table.add_column(f"{entry['round']} ({entry['order'][0]})", justify="right")
    table.add_column("median", justify="right")
    table.add_column("min-max", justify="right")
    summaries = [entry["summary"] for entry in rounds]
    # A bound at a rate measured while the host was busy is too lenient (a slow matmul makes any step
    # look near its bound), so every round's bound is taken at the fastest rate the run measured.
    fastest = max(entry["matmul_flops_per_second"] for entry in rounds)
    slowdown = [fastest / entry["matmul_flops_per_second"] for entry in rounds]

    def figure(name: str, key: str, form: str) -> list[str]:
        return [form.format(s[name][key]) if name in s else "-" for s in summaries]

    table.add_row("load before envhub's run", *figure("envhub", "load_average", "{:.2f}"), "", "")
    table.add_row("load before TRL's run", *figure("trl", "load_average", "{:.2f}"), "", "")
    table.add_row("envhub s/step", *figure("envhub", "seconds_per_step", "{:.2f}"), "", "")
    table.add_row("TRL s/step", *figure("trl", "seconds_per_step", "{:.2f}"), "", "")
    table.add_row("matmul GFLOP/s", *(f"{e['matmul_flops_per_second'] / 1e9:.1f}" for e in rounds), "", "")
    table.add_row("bounds at GFLOP/s (the fastest)", *(f"{fastest / 1e9:.1f}" for _ in rounds), "", "")
    series: dict[str, list[float]] = {key: [] for _, key, _ in RATIOS}
    spread: dict[str, dict[str, float]] = {}
    for label, key, read in RATIOS:
        cells = []
        for summary, scale in zip(summaries, slowdown, strict=True):
            value = read(summary)
            if value is not None:
                if key in BOUND_RATIOS:
                    value *= scale  # training time x rate / FLOPs: proportional to the rate
                series[key].append(value)
            cells.append("-" if value is None else f"{value:.2f}x")
        values = series[key]
        if values:
            spread[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
            cells += [f"{spread[key]['median']:.2f}x", f"{spread[key]['min']:.2f}-{spread[key]['max']:.2f}x"]
        else:
            cells += ["-", "-"]
        table.add_row(label, *cells)
    console.print(table)
    goals = [
        ("steps/s, envhub / TRL", "speedup", ">=", SPEEDUP_GOAL),
        ("envhub training per token run / its compute bound", "envhub_token_bound", "<=", TOKEN_BOUND_GOAL),
    ]
    verdicts: dict[str, str] = {}
    for label, key, sense, goal in goals:
        if key not in spread:
            verdicts[key] = "no figure (a run failed)"
            console.print(f"{label}: no figure, a run failed (see its log)")
            continue
        middle = spread[key]["median"]
        met = middle >= goal if sense == ">=" else middle <= goal
        verdicts[key] = "met" if met else "missed"
        console.print(
            f"{label}: median {middle:.2f}x over {len(series[key])} rounds "
            f"(spread {spread[key]['min']:.2f}-{spread[key]['max']:.2f}x; goal {sense} {goal}x): "
            f"{verdicts[key]}"
        )
    return {"ratios": spread, "per_round": series, "verdicts": verdicts, "bound_flops_per_second": fastest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="run both trainers this many times, alternately, and print the median and spread of each ratio",
    )
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU machine")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument(
        "--pack-tokens",
        type=int,
        default=None,
        help="ours only: pack sequences into rows of this many tokens instead of padding (TRL pads)",
    )
    parser.add_argument(
        "--no-share-prompts",
        action="store_true",
        help="ours only: a row per sequence, its prompt run for each (as TRL does)",
    )
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads in each run")
    parser.add_argument(
        "--model", type=Path, default=None, help="a save_pretrained dir; default SmolLM2-135M"
    )
    parser.add_argument("--out", type=Path, default=Path("/tmp/trainer_vs_trl.json"))
    parser.add_argument("--child", choices=sorted(RUNNERS), help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2: the first step is reported apart from the rest")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    args.model = args.model or smollm2_dir()
    if args.child:
        child(args)
        return

    import torch

    torch.set_num_threads(args.threads)
    shape = model_shape(args.model)
    rounds: list[dict[str, Any]] = []
    for number in range(1, args.rounds + 1):
        # Alternate who goes first, so a host that speeds up or slows down over the minutes of a round
        # favours each trainer in turn.
        order = list(NAMES) if number % 2 else list(reversed(NAMES))
        logs = {name: args.out.with_name(f"{args.out.stem}-{name}-round{number}.log") for name in order}
        ran = {name: run_child(name, args, logs[name], f"round {number} of {args.rounds}") for name in order}
        runs = {name: ran[name] for name in NAMES}
        measured = [StepRow(**r) for run in runs.values() if run is not None for r in run["rows"]]
        mean_length = sum(r.sequence_tokens for r in measured) / max(sum(r.sequences for r in measured), 1)
        tokens = MICRO_BATCH * max(round(mean_length), 1)  # rows of one micro-batch
        rates = [
            matmul_flops_per_second(shape, tokens, args.device, args.dtype) for _ in range(MATMUL_SAMPLES)
        ]
        flops = max(rates)  # this round's host speed
        heading = f"round {number} of {args.rounds}: " if args.rounds > 1 else ""
        summary = show(args, runs, shape, flops, heading, with_mapping=number == 1)
        rounds.append(
            {
                "round": number,
                "order": order,
                "matmul_flops_per_second": flops,
                "matmul_samples": rates,
                "matmul_tokens": tokens,
                "runs": runs,
                "summary": summary,
            }
        )
    across = show_rounds(args, rounds) if args.rounds > 1 else {}
    args.out.write_text(
        json.dumps(
            {
                "setup": {k: str(v) for k, v in vars(args).items() if k not in ("child", "result")},
                "mapping": mapping(args),
                "parameters": shape.parameters,
                "rounds": rounds,
                "across_rounds": across,
            },
            indent=2,
        )
    )
    print(f"rows written to {args.out}")


if __name__ == "__main__":
    main()
