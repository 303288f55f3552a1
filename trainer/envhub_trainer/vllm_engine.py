"""vLLM in this process as the rollout engine: fast sampling, with the trainer's weights pushed into it.

vLLM is imported when the engine is built (never by `import envhub_trainer`). Run it in-process and
eager on CPU: `VLLM_ENABLE_V1_MULTIPROCESSING=0` (set here unless already set) and `enforce_eager`.
Turns of concurrent episodes are generated together (`MicroBatcher`), and prefix caching is on, so a
group's shared prompt and an episode's earlier turns reuse their KV cache; `metrics()` reports the hit
rate since the last call. Weights are synced with `collective_rpc("reload_weights", weights_iterator=...)`
and the prefix cache is then emptied (its KV was computed by the old weights); a sync that does not
finish within `sync_timeout` seconds raises instead of letting the run continue on old weights.

On CPU the KV cache is sized from the batch (`kv_cache_blocks`), not a fixed reservation: vLLM fills the
whole cache with zeros at start-up, so every reserved byte is resident for the whole run (the old 1 GiB
held 22,000 tokens of SmolLM2-135M in float32, for a step that needs 2,600). A batch that needs more
still completes: vLLM holds back or preempts requests until blocks free up, only slower, and `metrics()`
counts the preemptions so a cache that is too small shows in the run's metrics.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import logging
import math
import os
import threading
from pathlib import Path
from typing import Any

import torch

from envhub.core import Env
from envhub.inference.batching import MicroBatcher
from envhub.inference.chat_template import prompt_ids
from envhub.inference.tensor_thread import on_tensor_thread, submit_to_tensor_thread
from envhub.messages import Message
from envhub.policies.base import EpisodeTokens, Generation, Policy
from envhub.text_format import parse_assistant_text
from envhub.tools import ToolSpec
from envhub_trainer.engine import GENERATION_QUIET_S, InProcessEngine, weights_checksum

log = logging.getLogger(__name__)


class WeightSyncError(RuntimeError):
    """The engine did not take the trainer's weights: training on would sample with stale ones."""


class VLLMPolicy(Policy):
    """An envhub policy over the engine's `LLM`: exact prompt ids in, sampled ids and logprobs out.

    Its engine object is `self.vllm`: `Policy.engine` is the name every policy records."""

    name = "vllm"
    engine = "vllm"

    def __init__(self, engine: VLLMEngine, temperature: float) -> None:
        self.vllm, self.temperature = engine, temperature
        self._tokens = EpisodeTokens()

    def info(self) -> dict[str, Any]:
        """The model and sampling settings each episode was generated with, and the weights' version."""
        engine = self.vllm
        return {
            **super().info(),
            "model": str(engine.model_dir),
            "temperature": self.temperature,
            "max_new_tokens": engine.max_new_tokens,
            "seed": engine.seed,
            "weights_version": engine.version,
        }

    def for_episode(self, env: Env) -> Policy:
        episode = copy.copy(self)
        episode._tokens = EpisodeTokens()
        return episode

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Generation:
        prompt = await asyncio.to_thread(self.vllm.prompt_ids, messages, tools)
        completion, logprobs, stopped = await self.vllm.batcher.submit(prompt, self.temperature)
        decode = self.vllm.tokenizer.decode
        trace = self._tokens.trace(prompt, completion, logprobs, stopped=stopped, decode=decode)
        text = decode(completion, skip_special_tokens=True)
        return Generation(message=parse_assistant_text(text), tokens=trace, model=self.vllm.model_dir.name)


def kv_cache_blocks(
    *, batch_size: int, prompt_tokens: int, max_new_tokens: int, max_model_len: int, block_size: int
) -> int:
    """KV blocks for one generation call: `batch_size` sequences of `prompt_tokens + max_new_tokens`,
    each rounded up to whole blocks, and never fewer than one `max_model_len` sequence needs (vLLM refuses
    to start otherwise), plus the block vLLM keeps back as its null block."""
    per_sequence = math.ceil(min(prompt_tokens + max_new_tokens, max_model_len) / block_size)
    longest = math.ceil(max_model_len / block_size)
    return max(batch_size * per_sequence, longest) + 1


def kv_bytes_per_token(model_dir: Path, dtype: str) -> int:
    """Keys and values of every layer for one token, from the model's config (the size vLLM logs)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    text = getattr(config, "text_config", None) or config
    heads = int(text.num_attention_heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    element = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    return 2 * int(text.num_hidden_layers) * kv_heads * head_dim * element


class VLLMEngine(InProcessEngine):
    """`vllm.LLM` in this process on a copy of the model; `sync` reloads it with the trainer's weights."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
        chat_template: str | None = None,
        sync_timeout: float = 60.0,
        max_model_len: int = 2048,
        dtype: str = "float32",
        batch_size: int = 64,
        max_wait: float = GENERATION_QUIET_S,
        block_size: int = 32,
        prompt_tokens: int = 256,
    ) -> None:
        """`prompt_tokens`: the prompt length the CPU KV cache is sized for (see `kv_cache_blocks`);
        VLLM_CPU_KVCACHE_SPACE (GiB), when set, sizes it instead."""
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        # vLLM drops torch to one thread for serving unless OMP_NUM_THREADS is set; in this process the
        # trainer's forward and backward passes share those threads, so keep them all.
        os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
        try:
            from vllm import LLM  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:
            raise ImportError(
                f"engine: vllm needs vLLM in this environment (pip install vllm): {exc}"
            ) from exc
        self.model_dir = Path(model_dir)
        self.max_new_tokens, self.temperature, self.seed = max_new_tokens, temperature, seed
        self.chat_template, self.sync_timeout = chat_template, sync_timeout
        self.kv_cache_tokens: int | None = None
        """Tokens the KV cache holds, when this engine sized it (CPU, VLLM_CPU_KVCACHE_SPACE unset)."""
        sizing: dict[str, int] = {}
        if _on_cpu() and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            blocks = kv_cache_blocks(
                batch_size=batch_size,
                prompt_tokens=prompt_tokens,
                max_new_tokens=max_new_tokens,
                max_model_len=max_model_len,
                block_size=block_size,
            )
            self.kv_cache_tokens = blocks * block_size
            sizing = {
                "num_gpu_blocks_override": blocks,  # exact, whatever vLLM's per-block layout
                "kv_cache_memory_bytes": self.kv_cache_tokens * kv_bytes_per_token(self.model_dir, dtype),
            }
        # vLLM is built, generates and reloads on the process's tensor thread, where the trainer's steps
        # run too: one OpenMP team and one malloc arena for all of it (envhub.inference.tensor_thread).
        self.llm = on_tensor_thread(
            LLM,
            model=str(self.model_dir),
            dtype=dtype,
            enforce_eager=True,
            seed=seed if seed is not None else 0,
            max_model_len=max_model_len,
            enable_prefix_caching=True,
            block_size=block_size,  # the unit of prefix reuse: vLLM's CPU default of 128 rarely fills
            disable_log_stats=False,  # keeps the prefix-cache counters that `metrics()` reads
            **sizing,
        )
        self.tokenizer: Any = self.llm.get_tokenizer()
        self._lock = threading.Lock()  # one generate or reload at a time
        self._template_lock = threading.Lock()  # a fast tokenizer refuses concurrent calls
        self.generate_calls = 0
        self._asked: dict[tuple[float, int], int] = {}
        self._cache_counts = (0, 0)
        self._preemptions = 0
        self._failed_sync: str | None = None
        # generate_ids takes the lock off the tensor thread: a sync that holds it waits on that thread
        self.batcher: MicroBatcher[list[int], float, tuple[list[int], list[float], bool]] = MicroBatcher(
            self.generate_ids, batch_size=batch_size, max_wait=max_wait
        )
        self.version = 0

    def policy(self, *, greedy: bool = False) -> Policy:
        return VLLMPolicy(self, 0.0 if greedy else self.temperature)

    def prompt_ids(self, messages: list[Message], tools: list[ToolSpec]) -> list[int]:
        with self._template_lock:
            return prompt_ids(self.tokenizer, messages, tools, self.chat_template)

    def generate_ids(
        self, prompts: list[list[int]], temperature: float
    ) -> list[tuple[list[int], list[float], bool]]:
        """Sample from token ids: (completion ids, their logprobs, whether a stop token ended it) each.

        A logprob is the raw model's (before temperature). With a `seed`, each request's sampling seed
        is derived from the seed, the weight version, the prompt and how often that same prompt was asked
        since the sync: not from timing or batch order, so a run (or a resumed one) samples the same."""
        from vllm import SamplingParams  # type: ignore[import-not-found,unused-ignore]

        with self._lock:
            self._check_usable()
            self.generate_calls += 1
            params = [
                SamplingParams(
                    temperature=temperature,
                    max_tokens=self.max_new_tokens,
                    logprobs=0,
                    seed=self._request_seed(prompt, temperature),
                )
                for prompt in prompts
            ]
            requests = [{"prompt_token_ids": p} for p in prompts]
            outputs = on_tensor_thread(self.llm.generate, requests, params, use_tqdm=False)
        results = []
        for output in outputs:
            sample = output.outputs[0]
            ids = [int(i) for i in sample.token_ids]
            logprobs = [float(step[i].logprob) for step, i in zip(sample.logprobs or [], ids, strict=True)]
            results.append((ids, logprobs, sample.finish_reason == "stop"))
        return results

    def _request_seed(self, prompt: list[int], temperature: float) -> int | None:
        """Identical prompts are interchangeable, so numbering their occurrences is order-free."""
        if self.seed is None:
            return None
        key = (temperature, hash(tuple(prompt)))  # hashes of ints are the same in every process
        occurrence = self._asked[key] = self._asked.get(key, -1) + 1
        return hash((self.seed, self.version, key, occurrence)) & (2**63 - 1)

    def rng_state(self) -> None:
        """Nothing to save: seeds follow from `seed`, the version and the prompts (see `generate_ids`);
        a resumed run syncs its weights first, which restarts the occurrence counts as a sync does."""

    def set_rng_state(self, state: Any) -> None:
        """Nothing to restore (see `rng_state`)."""

    def sync(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Push the trainer's weights into vLLM; raises WeightSyncError if that fails or times out."""
        weights = [(name, tensor.detach().to("cpu")) for name, tensor in state.items()]
        with self._lock:
            self._check_usable()
            future = submit_to_tensor_thread(
                self.llm.collective_rpc, "reload_weights", kwargs={"weights_iterator": weights}
            )
            try:
                future.result(timeout=self.sync_timeout)
            except concurrent.futures.TimeoutError as exc:
                self._failed_sync = f"the sync to version {version} timed out"
                raise WeightSyncError(
                    f"vLLM did not load weights version {version} within {self.sync_timeout} s; it may "
                    "hold a mix of old and new weights: stop the run (or raise sync_timeout)"
                ) from exc
            except Exception as exc:
                self._failed_sync = f"the sync to version {version} failed"
                raise WeightSyncError(f"vLLM failed to load weights version {version}: {exc}") from exc
            self.llm.reset_prefix_cache()  # cached KV was computed by the previous weights
            self._asked.clear()  # seeds now derive from the new version
        self.version = version

    def close(self) -> None:
        """Nothing to stop: vLLM runs in this process, on its tensor thread, and is freed with the engine."""

    def _check_usable(self) -> None:
        """After a failed sync vLLM may hold a mix of weights (and a reload may still be running)."""
        if self._failed_sync is not None:
            raise WeightSyncError(
                f"this vLLM engine is unusable: {self._failed_sync}; start a new one (resume the run)"
            )

    def metrics(self) -> dict[str, float]:
        """Since the last call: the prefix-cache hit rate (cached prompt tokens / prompt tokens looked
        up), and how often a full KV cache made vLLM preempt a request (it is recomputed later: the
        results stay right, the batch gets slower; a steady count says the cache is sized too small)."""
        totals = {"vllm:prefix_cache_queries": 0, "vllm:prefix_cache_hits": 0, "vllm:num_preemptions": 0}
        with self._lock:
            snapshot = self.llm.get_metrics()
        for metric in snapshot:
            if metric.name in totals:
                totals[metric.name] += int(getattr(metric, "value", 0))
        queries, hits = totals["vllm:prefix_cache_queries"], totals["vllm:prefix_cache_hits"]
        looked_up, reused = queries - self._cache_counts[0], hits - self._cache_counts[1]
        self._cache_counts = (queries, hits)
        preempted = max(totals["vllm:num_preemptions"] - self._preemptions, 0)  # a new engine resets them
        self._preemptions = totals["vllm:num_preemptions"]
        if preempted and self.kv_cache_tokens is not None:
            log.warning(
                "vLLM preempted %d requests: its KV cache of %d tokens is too small for a generation "
                "batch (results stay right, generation is slower); size it for longer prompts "
                "(VLLMEngine prompt_tokens) or set VLLM_CPU_KVCACHE_SPACE to a size in GiB",
                preempted,
                self.kv_cache_tokens,
            )
        return {
            "prefix_cache_hit_rate": reused / looked_up if looked_up else 0.0,
            "prefix_cache_tokens": float(reused),
            "kv_cache_preemptions": float(preempted),
        }

    def checksum(self) -> str:
        """sha256 of vLLM's own weights (its fused layout: compare versions of it, not with HF names)."""
        with self._lock:
            [state] = on_tensor_thread(self.llm.collective_rpc, _worker_state)
        return weights_checksum(state)


def _on_cpu() -> bool:
    """vLLM's platform here (its CPU build): where the KV cache is ours to size."""
    from vllm.platforms import current_platform  # type: ignore[import-not-found,unused-ignore]

    return bool(current_platform.is_cpu())


def _worker_state(worker: Any) -> dict[str, torch.Tensor]:
    """Runs inside the vLLM worker: its model's weights, copied to CPU."""
    return {name: t.detach().to("cpu").clone() for name, t in worker.model_runner.model.state_dict().items()}
