"""GRPO on any envhub environment, in one file you can read top to bottom (CleanRL-style).

    tasks (env seeds) -> G episodes per task with the engine's policy -> token samples
    -> group-relative advantages -> clipped, IS-corrected loss -> AdamW step -> weight sync

Every episode is played by `envhub.rollout` (a GRPO group is G references to one task), so training
gets what the runner gives any batch: step and episode timeouts, re-runs of infrastructure failures,
one env per worker reset between episodes, per-turn policy time, the Ray backend `envhub rollout`
uses, and each step's episodes stored as a batch folder that `envhub show` opens (`run_folder.py`).

Synchronous and asynchronous runs share this loop. Async starts generating the next batch (with the
weights before this step's update) while the step trains, so each batch arrives one version stale;
the truncated importance weight in the loss corrects for it, and batches staler than `max_staleness`
are dropped and counted.

With `data_parallel: N` (processes started by `launch.py`) only the step runs on every rank: rank 0
does all the rest and hands each rank its share of the samples (`shares.py`).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import random
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from envhub.inference.tensor_thread import to_tensor_thread
from envhub.records import Episode
from envhub.rollout import EpisodeRef, failed, rollout
from envhub.rollout.runner import POLICY_SECONDS
from envhub_trainer import distributed, launch, memory, shares
from envhub_trainer.config import TrainConfig
from envhub_trainer.engine import RolloutEngine, weights_checksum
from envhub_trainer.engine_factory import make_engine
from envhub_trainer.forward import micro_batch_logprobs, pack
from envhub_trainer.grad_accumulation import fused_accumulation
from envhub_trainer.loss import (
    LossStats,
    denominator,
    group_advantages,
    grpo_loss,
    informative_groups,
    shaped_rewards,
)
from envhub_trainer.metrics import EvalMetrics, StepMetrics
from envhub_trainer.rms_norm import fused_norms
from envhub_trainer.run_folder import Run, eval_folder, load_checkpoint, save_checkpoint, step_folder
from envhub_trainer.samples import TrainSample, episode_samples
from envhub_trainer.shared_prompt import row_width, shared_prompt_logprobs, shared_rows
from envhub_trainer.tasks import TaskSampler

log = logging.getLogger(__name__)

# ---------------------------------------------------------------- rollouts


@dataclass
class RolloutBatch:
    """The episodes of one step's tasks, the weight version that generated them, and their timing."""

    tasks: list[int]
    episodes: list[list[Episode]]
    """One list of `group_size` episodes per task."""
    version: int
    draw_state: dict[str, Any]
    seconds: float
    generation_seconds: float
    """The episodes' policy calls, as the runner timed them (they overlap: a sum, not wall time)."""
    env_seconds: float
    folder: Path
    """Where the batch is stored (renamed after the step that trains on it)."""


def group_refs(tasks: list[int], group_size: int) -> list[EpisodeRef]:
    """`group_size` references to each task (its env seed): episode g * G + k is rollout k of task g."""
    return [
        EpisodeRef(index=g * group_size + k, seed=task, task=g, rollout=k)
        for g, task in enumerate(tasks)
        for k in range(group_size)
    ]


async def play_groups(
    config: TrainConfig, engine: RolloutEngine, tasks: list[int], group_size: int, out: Path, *, greedy: bool
) -> list[list[Episode]]:
    """`group_size` episodes of every task (same seed, different samples), played by `envhub.rollout`
    on the engine's backend and stored in the batch folder `out`.

    An env id the registry does not know, or options its constructor does not take, are the config's
    mistake, not an episode's: `rollout` raises before anything starts instead of failing every group.
    """
    kwargs = dict(config.env_kwargs)
    if config.max_turns is not None:
        kwargs["max_turns"] = config.max_turns
    played: list[Episode] = []
    sampling = "greedy" if greedy else f"temperature={config.temperature:g}"
    await rollout(
        config.env_id,
        engine.player(greedy=greedy),
        episodes=group_refs(tasks, group_size),
        limits=config.limits,
        env_kwargs=kwargs,
        seed=None,
        out=out,
        runs_on=engine.backend,
        ray_workers=None if engine.backend == "local" else config.env_workers,
        policy_label=f"envhub-trainer {config.model} weights=v{engine.version} {sampling}",
        on_episode=played.append,  # as played: token traces exactly as the engine returned them
    )
    by_index = sorted(played, key=lambda e: int(e.episode_id))
    if len(by_index) != len(tasks) * group_size:
        wanted = len(tasks) * group_size
        raise RuntimeError(f"the rollout into {out} returned {len(by_index)} of {wanted} episodes")
    return [by_index[g * group_size : (g + 1) * group_size] for g in range(len(tasks))]


def generation_seconds(episodes: list[Episode]) -> float:
    """Seconds the episodes' turns waited for the policy, as the runner recorded them per turn."""
    return sum(float(t.info.get(POLICY_SECONDS, 0.0)) for e in episodes for t in e.turns)


async def play_batch(
    config: TrainConfig, engine: RolloutEngine, run: Run, tasks: list[int], draw: dict[str, Any]
) -> RolloutBatch:
    """One step's groups, stored under a fresh `incoming` folder until a step takes them."""
    started, version = time.perf_counter(), engine.version
    out = run.incoming()
    groups = await play_groups(config, engine, tasks, config.group_size, out, greedy=False)
    flat = [e for group in groups for e in group]
    generation = generation_seconds(flat)
    env_seconds = max(sum(e.wall_seconds for e in flat) - generation, 0.0)
    seconds = time.perf_counter() - started
    return RolloutBatch(tasks, groups, version, draw, seconds, generation, env_seconds, out)


# ---------------------------------------------------------------- batch -> samples


@dataclass
class StepData:
    samples: list[TrainSample]
    rewards: list[float]
    errors: int
    """Episodes still failed after their re-runs."""
    reruns: int
    """Re-runs it took (an episode played three times counts two)."""
    failed_groups: int
    """Groups dropped whole because one of their episodes still failed."""
    splits: int
    dropped_groups: int
    truncated: int
    group_pass_rates: dict[int, float] = field(default_factory=dict)


def build_samples(batch: RolloutBatch, config: TrainConfig) -> StepData:
    """Advantages per episode (relative to its group), handed to every token sample of that episode.

    A group is trained whole or not at all: an episode that failed through its re-runs drops its group,
    since advantages measured against the survivors alone would be biased towards whatever the failure
    correlates with, and scoring it 0 would punish the policy for the machinery's fault."""
    loss = config.loss
    episodes: list[Episode] = []
    group_of: list[int] = []
    pass_rates: dict[int, float] = {}
    errors = failed_groups = 0
    for g, (task, group) in enumerate(zip(batch.tasks, batch.episodes, strict=True)):
        broken = sum(failed(e) for e in group)
        if broken:
            errors += broken
            failed_groups += 1
            continue
        pass_rates[task] = sum(e.reward >= config.pass_threshold for e in group) / len(group)
        episodes.extend(group)
        group_of.extend([g] * len(group))
    per_episode = [
        episode_samples(e, group=g, version=batch.version) for e, g in zip(episodes, group_of, strict=True)
    ]
    lengths = [sum(s.completion_tokens for s in samples) for samples in per_episode]
    raw = [e.reward for e in episodes]
    rewards = torch.tensor(shaped_rewards(raw, lengths, loss), dtype=torch.float64)
    groups = torch.tensor(group_of)
    keep = torch.ones(len(episodes), dtype=torch.bool)
    if loss.dynamic_sampling and len(episodes):
        keep = informative_groups(rewards, groups)
    dropped_groups = len(set(group_of)) - len(set(groups[keep].tolist())) if len(episodes) else 0
    advantages = group_advantages(rewards[keep], groups[keep], loss.scale) if keep.any() else rewards[:0]
    samples: list[TrainSample] = []
    kept = [i for i in range(len(episodes)) if keep[i]]
    for i, advantage in zip(kept, advantages.tolist(), strict=True):
        for sample in per_episode[i]:
            if loss.mask_truncated and sample.truncated:
                sample = replace(sample, loss_mask=[0] * len(sample.loss_mask))
            samples.append(replace(sample, advantage=advantage))
    return StepData(
        samples=samples,
        rewards=raw,
        errors=errors,
        reruns=sum(e.attempts - 1 for group in batch.episodes for e in group),
        failed_groups=failed_groups,
        splits=sum(max(len(s) - 1, 0) for s in per_episode),
        dropped_groups=dropped_groups,
        truncated=sum(s.truncated for samples in per_episode for s in samples),
        group_pass_rates=pass_rates,
    )


# ---------------------------------------------------------------- one optimiser step


def micro_batches(samples: list[TrainSample], config: TrainConfig) -> list[list[list[int]]]:
    """Rows of sample indices, grouped into micro-batches of at most `micro_batch_size` samples (packed:
    rows). A row is one sample padded, several packed, or several sharing their prompt (`shared_rows`).

    Rows are ordered by length first, so each micro-batch holds rows of about one length and pads them
    little: every row is padded to its micro-batch's longest. The loss is a sum over the step's tokens,
    which the order of its terms leaves unchanged (up to float rounding)."""
    size = config.micro_batch_size
    if config.pack_tokens is not None:
        rows = pack([len(s.token_ids) for s in samples], config.pack_tokens)
    elif sharing_prompts(config):
        rows = shared_rows(samples, list(range(len(samples))), size)
    else:
        rows = [[i] for i in range(len(samples))]
    rows.sort(key=lambda row: row_tokens(samples, row, config))  # stable: ties keep their order
    if config.pack_tokens is not None:
        return [rows[i : i + size] for i in range(0, len(rows), size)]
    batches: list[list[list[int]]] = []
    held = size  # samples in the last micro-batch; full, so the first row starts one
    for row in rows:
        if held + len(row) > size:
            batches.append([])
            held = 0
        batches[-1].append(row)
        held += len(row)
    return batches


def sharing_prompts(config: TrainConfig) -> bool:
    """Rows share their prompt unless switched off or packing."""
    return config.share_prompts and config.pack_tokens is None


def train_step(
    model: Any,
    optimiser: torch.optim.Optimizer,
    samples: list[TrainSample],
    config: TrainConfig,
    *,
    ref_model: Any = None,
    pad_id: int = 0,
    fuse_accumulation: bool = True,
) -> dict[str, float]:
    """Accumulate the loss over micro-batches, every one divided by the step's global token count, then
    clip and step. One update per batch, so pi_old is the current model: ratio = exp(logp - sg[logp]).

    Under torch.distributed (a sharded `model`, see `distributed.py`) `samples` are this rank's share:
    the denominator counts every rank's tokens and gradients are summed over ranks, so the update equals
    one process training on all the samples.

    Alone (not distributed), each micro-batch's weight gradients are added into `.grad` by the GEMMs
    that compute them (`grad_accumulation.py`): the same sums without a separate pass per micro-batch;
    and RMSNorms run a hand-derived backward (`rms_norm.py`)."""
    trained = [s for s in samples if any(s.loss_mask[1:])]
    tokens, sequences = distributed.global_lengths([sum(s.loss_mask[1:]) for s in trained])
    scale = distributed.world_size()  # FSDP2 / DDP average gradients over ranks; the loss wants their sum
    divide_by = denominator(tokens, sequences, config.loss) / scale
    fused = fuse_accumulation and not distributed.active()
    if not fused:
        optimiser.zero_grad()  # fused: the block below starts the step's gradients itself
    stats, total = LossStats(), 0.0
    batches = micro_batches(trained, config)
    forwards = distributed.global_max(len(batches))  # before any forward: collectives run in one order
    with fused_accumulation(model, enabled=fused), fused_norms(model, enabled=fused):
        forward = shared_prompt_logprobs if sharing_prompts(config) else micro_batch_logprobs
        for rows in batches:
            logprobs, tokens_of = forward(model, trained, rows, pad_id)
            ref = None
            if ref_model is not None:
                with torch.no_grad():
                    ref, _ = forward(ref_model, trained, rows, pad_id)
            loss, micro = grpo_loss(
                logprobs,
                logprobs.detach(),
                tokens_of.advantages,
                tokens_of.sequence_ids,
                config.loss,
                denominator=divide_by,
                behaviour_logprobs=tokens_of.behaviour_logprobs,
                ref_logprobs=ref,
            )
            loss.backward()  # type: ignore[no-untyped-call]
            total += float(loss.detach()) / scale
            stats.add(micro)
    for _ in range(forwards - len(batches)):
        # Sharded layers gather their weights in every forward: all ranks must run as many.
        ids = torch.full((1, 1), pad_id, dtype=torch.long, device=next(model.parameters()).device)
        empty = model(input_ids=ids, use_cache=False).logits
        (empty.sum() * 0).backward()
    grad_norm = 0.0
    if config.max_grad_norm is not None and tokens:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
    if tokens:
        optimiser.step()
    widths = [[row_tokens(trained, row, config) for row in rows] for rows in batches]
    computed = sum(sum(w) for w in widths)
    padded = sum(len(w) * max(w) for w in widths)  # every row is as wide as its micro-batch's widest
    total, trained_tokens, model_tokens, padded_tokens = distributed.global_sum(
        [total, stats.tokens, computed, padded]
    )
    means = distributed.global_token_means(stats.means(), int(stats.tokens))  # every rank's tokens
    return {
        "loss": total,
        "grad_norm": grad_norm,
        "trained_tokens": trained_tokens,
        "model_tokens": model_tokens,
        "padded_tokens": padded_tokens,
        **means,
    }


def row_tokens(samples: list[TrainSample], row: list[int], config: TrainConfig) -> int:
    """Tokens a row runs through the model, padding aside: a shared prompt counts once."""
    if sharing_prompts(config):
        return row_width(samples, row)
    return sum(len(samples[i].token_ids) for i in row)


# ---------------------------------------------------------------- a step over several ranks


@dataclass
class Trained:
    """What a step leaves behind; only rank 0 keeps the whole weights and optimiser state."""

    losses: dict[str, float]
    weights: dict[str, torch.Tensor]
    """Every tensor whole: what rank 0 syncs its engine from and saves."""
    optimiser_state: dict[str, Any] | None


def train_share(
    model: Any, optimiser: torch.optim.Optimizer, share: shares.Share, config: TrainConfig, ref_model: Any
) -> Trained:
    """The collective part of a step, which every rank runs in this order: the update, the whole weights
    (for rank 0's engine) and, when a checkpoint follows, the whole optimiser state."""
    losses = train_step(model, optimiser, share.samples, config, ref_model=ref_model, pad_id=share.pad_id)
    weights = distributed.full_state_dict(model)
    optimiser_state = distributed.optimiser_state(model, optimiser) if share.checkpoint else None
    return Trained(losses, weights, optimiser_state)


def lead_step(
    model: Any,
    optimiser: torch.optim.Optimizer,
    samples: list[TrainSample],
    config: TrainConfig,
    *,
    ref_model: Any,
    pad_id: int,
    checkpoint: bool,
) -> Trained:
    """Rank 0: hand every rank its share of the samples and train on its own."""
    share = shares.hand_out(samples, pad_id, checkpoint, share_prompts=sharing_prompts(config))
    return train_share(model, optimiser, share, config, ref_model)


def follow(model: Any, optimiser: torch.optim.Optimizer, config: TrainConfig, ref_model: Any) -> None:
    """Every rank but 0: train on the share rank 0 hands out for each step, until it sends a stop."""
    kept_memory = memory.FreeMemoryKeeper()
    for share in shares.received():
        train_share(model, optimiser, share, config, ref_model)
        kept_memory.after_step()


# ---------------------------------------------------------------- the loop


def train(
    config: TrainConfig, *, on_step: Callable[[dict[str, Any]], None] | None = None
) -> list[dict[str, Any]]:
    """Run (or resume) GRPO as `config` says; returns this session's metric rows.

    With `data_parallel: N` this process is rank 0 and starts ranks 1..N-1 itself (`launch.py`); under
    torchrun every process calls this, and the ranks other than 0 return no rows."""
    with launch.ranks(config, train):
        return asyncio.run(_train(config, on_step or (lambda row: None)))


async def _train(config: TrainConfig, on_step: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """Every rank loads (or resumes) the model and optimiser; rank 0 then runs the loop, rolling out and
    logging, and the other ranks `follow` it, training on their share of each step."""
    run = Run(config.run_dir)
    if distributed.rank() == 0:
        run.directory.mkdir(parents=True, exist_ok=True)
        (run.directory / "config.json").write_text(config.model_dump_json(indent=2, by_alias=True))
    resume = (run.checkpoint / "state.json").exists()
    source = run.checkpoint / "model" if resume else config.model
    kept = memory.keep_freed_memory()  # a step reuses the last one's memory instead of faulting it back in
    huge = memory.huge_pages_for_tensors()  # before the model's weights: fewer TLB misses in every GEMM
    # every tensor op of the run on the process's tensor thread: one OpenMP team, one malloc arena
    model, ref_model, optimiser, state = await to_tensor_thread(_load_model, config, run, source, resume)
    if distributed.rank() == 0:
        # this thread's torch thread count is the steps' too: each tensor-thread call carries it over
        run.log("runtime.jsonl", _runtime_row(state.get("step") if resume else None, kept, huge))
    weights = await to_tensor_thread(distributed.full_state_dict, model)
    if distributed.rank() != 0:
        await to_tensor_thread(follow, model, optimiser, config, ref_model)  # nothing else runs on this rank
        return []
    lead = _Lead(config, run, model, ref_model, optimiser, weights, state if resume else None)
    try:  # whatever fails on rank 0 from here, the others are told to stop (unless mid-step with it)
        return await lead.loop(source, on_step)
    finally:
        lead.close()


def _runtime_row(resumed_from: int | None, kept_freed_memory: bool, huge_pages: bool) -> dict[str, Any]:
    """What this process runs the steps with that the config does not say, and that moves a step's
    speed: a run that got no huge pages (a large tensor came first) is slower, and its folder says why."""
    return {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "resumed_from_step": resumed_from,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "kept_freed_memory": kept_freed_memory,
        "huge_pages": huge_pages,
    }


def _load_model(
    config: TrainConfig, run: Run, source: Path, resume: bool
) -> tuple[Any, Any, torch.optim.Optimizer, dict[str, Any]]:
    """The model (sharded under data parallelism), its frozen reference (None without a KL term), the
    optimiser and, when resuming, the checkpoint's state (`{}` on a fresh run)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(config.seed)
    random.seed(config.seed)
    dtype = getattr(torch, config.dtype)
    model: Any = AutoModelForCausalLM.from_pretrained(source, local_files_only=True, dtype=dtype)
    model.to(config.device).train()
    # The reference stays whole on every rank: it runs only on real micro-batches, while sharded layers
    # need every rank to run the same number of forwards.
    ref_model = copy.deepcopy(model).eval() if config.loss.kl_coef > 0 else None
    if distributed.active():
        model = distributed.shard(model)
    # fused: one pass over each tensor instead of a kernel per operation (TRL's default optimiser too)
    optimiser = torch.optim.AdamW(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay, fused=True
    )
    state: dict[str, Any] = {}
    if resume:
        state, optimiser_state = load_checkpoint(run)
        distributed.load_optimiser_state(model, optimiser, optimiser_state)
        if ref_model is not None:  # the reference is the run's starting model, not the checkpoint
            reference: Any = AutoModelForCausalLM.from_pretrained(
                config.model, local_files_only=True, dtype=dtype
            )
            ref_model = reference.to(config.device).eval()
    return model, ref_model, optimiser, state


class _Lead:
    """Rank 0's loop and what it holds between steps: the engine, the task sampler, the trainer's
    weights and their version, and the rollout generating ahead (async runs)."""

    def __init__(
        self,
        config: TrainConfig,
        run: Run,
        model: Any,
        ref_model: Any,
        optimiser: torch.optim.Optimizer,
        weights: dict[str, torch.Tensor],
        resumed: dict[str, Any] | None,
    ) -> None:
        """`resumed`: the checkpoint's state when resuming, None on a fresh run."""
        self.config, self.run, self.model, self.ref_model, self.optimiser = (
            config,
            run,
            model,
            ref_model,
            optimiser,
        )
        self.weights = weights
        self.resumed = resumed
        self.step: int = resumed["step"] if resumed is not None else 0
        self.version: int = resumed["version"] if resumed is not None else 0
        self.pending: asyncio.Task[RolloutBatch] | None = None
        self.engine: RolloutEngine | None = None
        self.kept_memory = memory.FreeMemoryKeeper()
        self.followers_wait = distributed.world_size() > 1  # in `follow`, for the next share
        self.dropped_stale = 0
        self.last_checksum: str | None = None
        self.pad_id = 0
        self.on_step: Callable[[dict[str, Any]], None] = lambda row: None

    async def loop(self, source: Path, on_step: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
        """Roll out, train and log until `config.steps`, resuming where the checkpoint left off."""
        config, run = self.config, self.run
        self.on_step = on_step
        self.engine = engine = make_engine(config, source)
        self.pad_id = engine.tokenizer.pad_token_id or 0
        self.sampler = self._open_run(engine)
        rows: list[dict[str, Any]] = []
        self.last_checksum = engine.checksum() if config.verify_sync and config.engine != "hf" else None
        if config.eval_every and self.step == 0:
            rows_eval = await evaluate(config, engine, run, self.step)
            run.log("metrics.jsonl", EvalMetrics(step=0, eval_reward=rows_eval, version=self.version).row())
        while self.step < config.steps:
            memory.reset_peak_rss()  # the step's peak RSS starts here (rollout, training, sync)
            waited = time.perf_counter()
            batch = await (self.pending or self._start_rollout())
            waited = time.perf_counter() - waited
            self.pending = (
                self._start_rollout() if config.asynchronous and self.step + 1 < config.steps else None
            )
            staleness = self.version - batch.version
            if staleness > config.max_staleness:
                self.dropped_stale += sum(len(g) for g in batch.episodes)
                log.warning("dropped a batch %d versions stale (max %d)", staleness, config.max_staleness)
                shutil.rmtree(batch.folder)  # no step trains on it
                continue
            rows.append(await self._step(batch, staleness, waited))
        return rows

    def _open_run(self, engine: RolloutEngine) -> TaskSampler:
        """The task sampler, the engine's sampling state and the run folder, as the checkpoint left them
        (or fresh), and the TensorBoard writer if asked for."""
        config, run = self.config, self.run
        sampler = TaskSampler(
            config.task_seed_start, curriculum=config.curriculum, pool=config.task_pool, seed=config.seed
        )
        if self.resumed is not None:
            sampler.load_state_dict(self.resumed["sampler"])
            engine.set_rng_state(self.resumed["engine_rng"])
            run.truncate_after(self.step)
            log.info("resumed %s at step %d", run.directory, self.step)
        run.drop_episodes_after(
            self.step if self.resumed is not None else -1
        )  # a fresh run: an earlier run's go too
        if config.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                run.tensorboard = SummaryWriter(str(run.directory / "tb"))
            except ImportError:
                log.info("tensorboard is not installed: metrics go to metrics.jsonl only")
        return sampler

    def _start_rollout(self) -> asyncio.Task[RolloutBatch]:
        """Sync the engine to the trainer's current weights, then generate the next batch."""
        assert self.engine is not None
        if self.engine.version != self.version:
            self.engine.sync(self.weights, self.version)
        tasks = self.sampler.draw(self.config.tasks_per_step)
        draw = self.sampler.state_dict()
        return asyncio.create_task(play_batch(self.config, self.engine, self.run, tasks, draw))

    async def _step(self, batch: RolloutBatch, staleness: int, waited: float) -> dict[str, Any]:
        """Train on one batch, sync the engine, log the step's row (and checkpoint when due)."""
        config, engine = self.config, self.engine
        assert engine is not None
        data = build_samples(batch, config)
        for task, rate in data.group_pass_rates.items():
            self.sampler.update(task, rate)
        checkpoint = bool(config.checkpoint_every) and (
            (self.step + 1) % config.checkpoint_every == 0 or self.step + 1 == config.steps
        )
        started = time.perf_counter()
        self.followers_wait = False
        trained = await to_tensor_thread(
            lead_step,
            self.model,
            self.optimiser,
            data.samples,
            config,
            ref_model=self.ref_model,
            pad_id=self.pad_id,
            checkpoint=checkpoint,
        )
        self.followers_wait = distributed.world_size() > 1
        self.kept_memory.after_step()  # malloc's free pages back to the system, when they outgrow a step
        self.weights = trained.weights
        train_seconds = time.perf_counter() - started
        self.version += 1
        self.step += 1
        self.run.keep(batch.folder, step_folder(self.step))
        sync_started = time.perf_counter()
        if self.pending is None and self.step < config.steps:
            engine.sync(self.weights, self.version)
        sync_seconds = time.perf_counter() - sync_started
        checks = self._verify_sync()
        figures: dict[str, Any] = {
            **_step_figures(
                data,
                trained,
                batch,
                config,
                step=self.step,
                version=self.version,
                staleness=staleness,
                dropped_stale=self.dropped_stale,
                waited=waited,
                train_seconds=train_seconds,
                sync_seconds=sync_seconds,
            ),
            **(self.sampler.counts() if config.curriculum else {}),
            **engine.metrics(),
            **checks,
        }
        if config.eval_every and self.step % config.eval_every == 0:
            figures["eval_reward"] = await evaluate(config, engine, self.run, self.step)
        figures["peak_rss_gib"] = memory.peak_rss_bytes() / memory.GIB
        row = StepMetrics.model_validate(figures).row()  # the type the report and plots read
        self._log(row, batch)
        self.on_step(row)
        if checkpoint:
            assert trained.optimiser_state is not None  # gathered by the step, as it was due
            state = {
                "step": self.step,
                "version": self.version,
                "sampler": {
                    **self.sampler.state_dict(),
                    **{k: batch.draw_state[k] for k in ("position", "rng")},
                },
                "engine_rng": engine.rng_state(),
            }
            save_checkpoint(
                self.run, self.model, self.weights, engine.tokenizer, trained.optimiser_state, state
            )
        return row

    def _verify_sync(self) -> dict[str, Any]:
        """With `verify_sync`, the engine's weights checksum after a sync: HF's must equal the trainer's,
        vLLM's (it fuses layers) must at least have changed."""
        config, engine = self.config, self.engine
        assert engine is not None
        if not (config.verify_sync and self.pending is None and self.step < config.steps):
            return {}
        checksum = engine.checksum()
        if config.engine != "hf":  # vLLM fuses layers: its hash can only show the weights changed
            if checksum == self.last_checksum:
                raise RuntimeError(
                    f"weight sync failed at version {self.version}: vLLM's weights did not change"
                )
            self.last_checksum = checksum
        elif checksum != weights_checksum(self.weights):
            raise RuntimeError(f"weight sync failed at version {self.version}: engine and trainer differ")
        return {"weights_checksum": checksum}

    def _log(self, row: dict[str, Any], batch: RolloutBatch) -> None:
        """The step's row to metrics.jsonl (and TensorBoard), its first episodes to samples.jsonl."""
        self.run.log("metrics.jsonl", row)
        for episode in [g[0] for g in batch.episodes][: self.config.logged_episodes]:
            self.run.log(
                "samples.jsonl",
                {
                    "step": self.step,
                    "reward": episode.reward,
                    "messages": [{"role": m.role, "text": m.text} for m in episode.messages],
                },
            )
        if self.run.tensorboard is not None:
            for key, value in row.items():
                if isinstance(value, int | float):
                    self.run.tensorboard.add_scalar(key, value, self.step)

    def close(self) -> None:
        """Stop what the loop started, on success and on error alike."""
        if self.followers_wait:
            shares.stop_followers()
        if self.pending is not None:
            self.pending.cancel()
        if self.engine is not None:
            self.engine.close()  # a server process, Ray actors: stopped on success and on error alike
        if self.run.tensorboard is not None:
            self.run.tensorboard.close()


def _step_figures(
    data: StepData,
    trained: Trained,
    batch: RolloutBatch,
    config: TrainConfig,
    *,
    step: int,
    version: int,
    staleness: int,
    dropped_stale: int,
    waited: float,
    train_seconds: float,
    sync_seconds: float,
) -> dict[str, Any]:
    """The step's row before the sampler's, the engine's and the sync check's figures join it."""
    completion_tokens = sum(s.completion_tokens for s in data.samples)
    return {
        "step": step,
        "version": version,
        "reward_mean": statistics.fmean(data.rewards) if data.rewards else 0.0,
        "reward_std": statistics.pstdev(data.rewards) if data.rewards else 0.0,
        "pass_rate": sum(r >= config.pass_threshold for r in data.rewards) / max(len(data.rewards), 1),
        **trained.losses,
        "staleness": staleness,
        "dropped_stale_episodes": dropped_stale,
        "dropped_groups": data.dropped_groups,
        "episode_errors": data.errors,
        "episode_reruns": data.reruns,
        "failed_groups": data.failed_groups,
        "sample_splits": data.splits,
        "truncated_samples": data.truncated,
        "samples": len(data.samples),
        "rollout_seconds": batch.seconds,
        "rollout_wait_seconds": waited,
        "generation_seconds": batch.generation_seconds,
        "env_seconds": batch.env_seconds,
        "train_seconds": train_seconds,
        "sync_seconds": sync_seconds,
        "rollout_tokens_per_second": completion_tokens / max(batch.seconds, 1e-9),  # wall: turns overlap
        "train_tokens_per_second": sum(len(s.token_ids) for s in data.samples) / max(train_seconds, 1e-9),
    }


async def evaluate(config: TrainConfig, engine: RolloutEngine, run: Run, step: int) -> float:
    """Mean reward of greedy episodes on held-out seeds (one per task): the curve to judge a run by.

    Stored in `RUN/episodes/eval-step-N`, N the steps trained before it."""
    tasks = list(range(config.eval_seed_start, config.eval_seed_start + config.eval_tasks))
    out = run.episodes / eval_folder(step)
    groups = await play_groups(config, engine, tasks, 1, out, greedy=True)
    return statistics.fmean(g[0].reward for g in groups)
