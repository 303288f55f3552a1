"""One GRPO training step of bench-trl's shape, timed and profiled on its own (no rollout, no vLLM).

    python benchmarks/train_step_speed.py [--repeats 5] [--threads 2] [--profile] [--with-vllm]

SmolLM2-135M-Instruct (fp32, the local copy `models.smollm2_dir` builds) trains on 32 sequences shaped
like `make bench-trl`'s: 8 prompts of 50 tokens, 4 samples each with completions of at most 32 tokens
(most at the cap, as the benchmark's are), micro-batches of 8, AdamW (fused), clip 1, the token-sum
loss. Tokens and logprobs are random: the step's compute depends on the shapes only.

Prints the step in three ways, alternated in the same minutes so a shared host's load hits all alike: a
row per sample with autograd's gradient accumulation, a row per sample with in-place accumulation
(`grad_accumulation.py`), and shared-prompt rows (`shared_prompt.py`, the default) with in-place
accumulation. For each, the process CPU seconds (what other processes' load inflates least) and wall
seconds, min and median over the repeats, and the wall time over the step's compute bound: its FLOPs
(bench-trl's formula, over the tokens each way runs through the model, padding excluded) at the matmul
rate of the model's GEMM shapes, measured in this process right after the steps (`trainer_vs_trl.py`).

`--with-vllm` first builds the vLLM engine in this process and generates one batch with it, as a
bench-trl process holds one (its memory beside the trainer's); needs .venv-vllm. Everything runs on the
process's tensor thread, as in the trainer (`envhub.inference.tensor_thread`): one OpenMP team.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from typing import Any

import torch
from envhub_trainer.config import TrainConfig
from envhub_trainer.grpo import micro_batches, row_tokens, train_step
from envhub_trainer.loss import LossConfig
from envhub_trainer.models import smollm2_dir
from envhub_trainer.samples import TrainSample

from envhub.inference.tensor_thread import on_tensor_thread

PROMPT_TOKENS, COMPLETION_TOKENS, SEQUENCES, GROUP_SIZE = 50, 32, 32, 4


def bench_samples(seed: int = 0, vocab: int = 49152) -> list[TrainSample]:
    """32 sequences of bench-trl's lengths: 8 prompts of 50 tokens, 4 samples each of 3-32 sampled
    tokens (60% at 32)."""
    rng = random.Random(seed)
    samples = []
    prompt: list[int] = []
    for i in range(SEQUENCES):
        if i % GROUP_SIZE == 0:
            prompt = [rng.randrange(vocab) for _ in range(PROMPT_TOKENS)]
        n = COMPLETION_TOKENS if rng.random() < 0.6 else rng.randint(3, COMPLETION_TOKENS - 1)
        ids = prompt + [rng.randrange(vocab) for _ in range(n)]
        mask = [0] * PROMPT_TOKENS + [1] * n
        logprobs = [0.0] * PROMPT_TOKENS + [-rng.uniform(0.1, 3.0) for _ in range(n)]
        samples.append(
            TrainSample(
                token_ids=ids,
                loss_mask=mask,
                logprobs=logprobs,
                reward=float(i % 2),
                group=i // GROUP_SIZE,
                episode_id=str(i),
                version=0,
                advantage=rng.choice([-1.0, 1.0]),
            )
        )
    return samples


def bench_config(**overrides: Any) -> TrainConfig:
    loss = LossConfig(scale="batch", eps_low=0.2, eps_high=0.28, normalisation="token", is_cap=2.0)
    fields: dict[str, Any] = {
        "model": smollm2_dir(),
        "env_id": "larger-number-v0",
        "micro_batch_size": 8,
        "max_grad_norm": 1.0,
        "weight_decay": 0.0,
        "lr": 3e-5,
        "loss": loss,
    }
    return TrainConfig(**{**fields, **overrides})


def load_model() -> tuple[Any, torch.optim.Optimizer]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(smollm2_dir(), local_files_only=True, dtype=torch.float32)
    model.train()
    return model, torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.0, fused=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--profile", action="store_true", help="profile one step instead (torch.profiler)")
    parser.add_argument(
        "--with-vllm", action="store_true", help="build the vLLM engine in this process first"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.with_vllm:
        from envhub_trainer.vllm_engine import VLLMEngine

        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        engine = VLLMEngine(smollm2_dir(), max_new_tokens=COMPLETION_TOKENS, batch_size=SEQUENCES, seed=0)
        engine.generate_ids([list(range(1, PROMPT_TOKENS + 1))] * SEQUENCES, 1.0)
    on_tensor_thread(measure, args)


def measure(args: argparse.Namespace) -> None:
    """Load, warm up and time the variants (on the tensor thread)."""
    model, optimiser = load_model()
    samples, config = bench_samples(), bench_config()
    train_step(model, optimiser, samples, config)  # warm-up
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            train_step(model, optimiser, samples, config)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))
        return
    apart = bench_config(share_prompts=False)
    variants = {
        "a row per sample, autograd accumulation": (apart, False),
        "a row per sample, in-place accumulation": (apart, True),
        "shared prompts, in-place accumulation": (config, True),
    }
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, (variant, fuse) in variants.items():
            cpu, wall = time.process_time(), time.perf_counter()
            train_step(model, optimiser, samples, variant, fuse_accumulation=fuse)
            times[name].append((time.process_time() - cpu, time.perf_counter() - wall))
    bounds = {name: bound_seconds(samples, variant) for name, (variant, _) in variants.items()}
    print(f"one training step, {SEQUENCES} sequences, {args.threads} threads, {args.repeats} repeats each")
    for name, measured in times.items():
        cpus, walls = [m[0] for m in measured], [m[1] for m in measured]
        print(
            f"  {name}: CPU s min {min(cpus):.2f} median {statistics.median(cpus):.2f}; "
            f"wall s min {min(walls):.2f} median {statistics.median(walls):.2f} "
            f"({min(walls) / bounds[name]:.2f}x / {statistics.median(walls) / bounds[name]:.2f}x "
            f"its bound of {bounds[name]:.2f} s)"
        )
    print(f"load average (1 min) {os.getloadavg()[0]:.2f}")


def bound_seconds(samples: list[TrainSample], config: TrainConfig) -> float:
    """The step's compute bound as bench-trl computes it, over the tokens this config runs through the
    model (a shared prompt once, padding excluded), at the matmul rate measured now."""
    from trainer_vs_trl import MICRO_BATCH, StepRow, matmul_flops_per_second, model_shape, step_flops

    rows = [row for batch in micro_batches(samples, config) for row in batch]
    tokens = sum(row_tokens(samples, row, config) for row in rows)
    sequence_tokens = sum(len(s.token_ids) for s in samples)
    step = StepRow(0, 0.0, 0.0, 0.0, 0.0, 0, sequence_tokens, len(samples), 0.0, 0.0, model_tokens=tokens)
    shape = model_shape(smollm2_dir())
    rate = matmul_flops_per_second(
        shape, MICRO_BATCH * round(sequence_tokens / len(samples)), "cpu", "float32"
    )
    return step_flops(step, shape, tokens) / rate


if __name__ == "__main__":
    main()
