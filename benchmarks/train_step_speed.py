"""One GRPO training step of bench-trl's shape, timed and profiled on its own (no rollout, no vLLM).

    python benchmarks/train_step_speed.py [--repeats 5] [--threads 2] [--profile | --gemms] [--with-vllm]

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

`--gemms` times one step's matrix multiplies three ways, taking turns: in the step (profiled, by shape),
replayed back to back on random operands of the step's shapes and strides, and each shape alone and hot
(the kind of rate the bound assumes). Where the step's GEMMs are as fast as their replay, what separates
them from the bound is the GEMMs themselves, not the code between them.

`--with-vllm` first builds the vLLM engine in this process and generates one batch with it, as a
bench-trl process holds one (its memory beside the trainer's); needs .venv-vllm. Everything runs on the
process's tensor thread, as in the trainer (`envhub.inference.tensor_thread`): one OpenMP team.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from envhub_trainer import memory
from envhub_trainer.config import TrainConfig
from envhub_trainer.grpo import micro_batches, row_tokens, train_step
from envhub_trainer.loss import LossConfig
from envhub_trainer.models import smollm2_dir
from envhub_trainer.samples import TrainSample

from envhub.inference.tensor_thread import on_tensor_thread

PROMPT_TOKENS, COMPLETION_TOKENS, SEQUENCES, GROUP_SIZE = 50, 32, 32, 4
WARM_UP_STEPS = 2


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
        "--gemms", action="store_true", help="the step's GEMMs by shape, in the step and alone"
    )
    parser.add_argument(
        "--with-vllm", action="store_true", help="build the vLLM engine in this process first"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    memory.huge_pages_for_tensors()  # as the trainer's process does, before any large tensor
    if args.with_vllm:
        from envhub_trainer.vllm_engine import VLLMEngine

        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        engine = VLLMEngine(smollm2_dir(), max_new_tokens=COMPLETION_TOKENS, batch_size=SEQUENCES, seed=0)
        engine.generate_ids([list(range(1, PROMPT_TOKENS + 1))] * SEQUENCES, 1.0)
    on_tensor_thread(measure, args)


def measure(args: argparse.Namespace) -> None:
    """Load, warm up and time the variants (on the tensor thread)."""
    memory.keep_freed_memory()  # as the trainer's process does
    model, optimiser = load_model()
    samples, config = bench_samples(), bench_config()
    # The first step faults in ~450 k pages and the second still 65-80 k; from the third a step reuses
    # what the last one freed (0-10 k), as every step of a long run does.
    for _ in range(WARM_UP_STEPS):
        train_step(model, optimiser, samples, config)
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            train_step(model, optimiser, samples, config)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))
        return
    if args.gemms:
        show_gemms(model, optimiser, samples, config, args.repeats)
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


GemmShape = tuple[str, int, int, int]
"""(operator, rows M rounded to 50, inner K, columns N) of a matrix multiply."""

GEMM_OPERANDS = {"mm": slice(0, 2), "addmm_": slice(1, 3)}
"""Where each GEMM operator's two factors are among its inputs (`addmm_`'s first is what it adds into)."""


def step_gemms(
    model: Any, optimiser: torch.optim.Optimizer, samples: list[TrainSample], config: TrainConfig
) -> dict[GemmShape, tuple[int, float, float]]:
    """Calls, seconds and FLOPs of one profiled step's `mm` and `addmm_` (the weight-gradient
    accumulation), by shape."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        train_step(model, optimiser, samples, config)
    groups: dict[GemmShape, tuple[int, float, float]] = {}
    for event in prof.events():
        operands = GEMM_OPERANDS.get(event.name.removeprefix("aten::"))
        if operands is None:
            continue
        left, right = event.input_shapes[operands]
        m, k, n = left[0], left[1], right[1]
        key = (event.name, 50 * max(round(m / 50), 1), k, n)
        calls, seconds, flops = groups.get(key, (0, 0.0, 0.0))
        groups[key] = (calls + 1, seconds + event.self_cpu_time_total / 1e6, flops + 2.0 * m * k * n)
    return groups


def alone_gflops(shape: GemmShape, repeats: int = 5) -> float:
    """The same product run on its own, its operands hot in cache: the fastest of `repeats`."""
    _, m, k, n = shape
    left, right, out = torch.randn(m, k), torch.randn(k, n), torch.zeros(m, n)
    best = math.inf
    for _ in range(repeats + 1):
        started = time.perf_counter()
        out.addmm_(left, right)
        best = min(best, time.perf_counter() - started)
    return 2.0 * m * k * n / best / 1e9


def recorded_gemms(
    model: Any, optimiser: torch.optim.Optimizer, samples: list[TrainSample], config: TrainConfig
) -> list[Callable[[], object]]:
    """Every `mm` and `addmm_` of one step, in order, as a call on random operands of the same shapes and
    strides: the step's GEMMs replayed back to back, with nothing else between them. Each call keeps
    operands of its own, as in the step (a weight is not hot in cache from its previous use), so the
    replay holds ~8.6 GiB for bench-trl's step (its operands summed from the profiled shapes)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    calls: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []

    def like(tensor: torch.Tensor) -> torch.Tensor:
        return torch.empty_strided(tensor.shape, tensor.stride()).normal_()

    class Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call,unused-ignore]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            name = func.overloadpacket.__name__
            if name in GEMM_OPERANDS:
                left, right = args[GEMM_OPERANDS[name]]
                out = torch.zeros(args[0].shape) if name == "addmm_" else None
                calls.append((like(left), like(right), out))
            return func(*args, **(kwargs or {}))

    with Recorder():  # type: ignore[no-untyped-call,unused-ignore]
        train_step(model, optimiser, samples, config)
    return [
        functools.partial(out.addmm_, left, right)
        if out is not None
        else functools.partial(torch.mm, left, right)
        for left, right, out in calls
    ]


def show_gemms(
    model: Any,
    optimiser: torch.optim.Optimizer,
    samples: list[TrainSample],
    config: TrainConfig,
    repeats: int,
) -> None:
    """One step's GEMMs three ways: in the step (profiled, by shape), replayed back to back with the
    step's shapes and strides, and each shape alone and hot, its fastest of five (the matmul benchmark's
    kind of rate). The three take turns `repeats` times and each keeps its best: on a host whose speed
    swings from minute to minute, none gets only the slow minutes."""
    replay = recorded_gemms(model, optimiser, samples, config)
    in_step: dict[GemmShape, tuple[int, float, float]] = {}
    alone: dict[GemmShape, float] = {}
    replayed = math.inf
    for _ in range(repeats):
        for shape, (calls, seconds, flops) in step_gemms(model, optimiser, samples, config).items():
            if shape not in in_step or seconds < in_step[shape][1]:
                in_step[shape] = (calls, seconds, flops)
        started = time.perf_counter()
        for gemm in replay:
            gemm()
        replayed = min(replayed, time.perf_counter() - started)
        for shape in in_step:
            alone[shape] = max(alone.get(shape, 0.0), alone_gflops(shape))
    total_seconds = sum(g[1] for g in in_step.values())
    total_flops = sum(g[2] for g in in_step.values())
    alone_seconds = sum(flops / alone[shape] / 1e9 for shape, (_, _, flops) in in_step.items())
    print(
        f"operator, M (~50), K, N: calls, seconds in the step, GFLOP/s in the step / alone "
        f"(best of {repeats})"
    )
    for shape, (calls, seconds, flops) in sorted(in_step.items(), key=lambda item: -item[1][1]):
        print(f"  {shape}: {calls}, {seconds:.3f} s, {flops / seconds / 1e9:.0f} / {alone[shape]:.0f}")
    print(f"the step's {len(replay)} GEMMs, {total_flops / 1e9:.0f} GFLOP:")
    for name, seconds in (
        ("in the step", total_seconds),
        ("replayed back to back", replayed),
        ("each shape alone, hot", alone_seconds),
    ):
        print(f"  {name}: {seconds:.2f} s, {total_flops / seconds / 1e9:.0f} GFLOP/s")
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
