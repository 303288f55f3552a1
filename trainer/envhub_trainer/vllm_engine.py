"""vLLM in this process as the rollout engine: fast sampling, with the trainer's weights pushed into it.

vLLM is imported when the engine is built (never by `import envhub_trainer`). Run it in-process and
eager on CPU: `VLLM_ENABLE_V1_MULTIPROCESSING=0` (set here unless already set) and `enforce_eager`.
Weights are synced with `collective_rpc("reload_weights", weights_iterator=...)`; a sync that does not
finish within `sync_timeout` seconds raises instead of letting the run continue on old weights.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import os
import threading
from pathlib import Path
from typing import Any

import torch

from envhub.core import Env
from envhub.messages import Message
from envhub.policies.base import Generation, Policy, TokenTrace, token_drift
from envhub.policies.hf import template_message
from envhub.text_format import parse_assistant_text
from envhub.tools import ToolSpec
from envhub_trainer.engine import weights_checksum


class WeightSyncError(RuntimeError):
    """The engine did not take the trainer's weights: training on would sample with stale ones."""


class VLLMPolicy(Policy):
    """An envhub policy over the engine's `LLM`: exact prompt ids in, sampled ids and logprobs out."""

    name = "vllm"

    def __init__(self, engine: VLLMEngine, temperature: float) -> None:
        self.engine, self.temperature = engine, temperature
        self._previous_tokens: list[int] | None = None
        self._turn = 0

    def for_episode(self, env: Env) -> Policy:
        episode = copy.copy(self)
        episode._previous_tokens, episode._turn = None, 0
        return episode

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Generation:
        prompt, completion, logprobs, stopped = await asyncio.to_thread(
            self.engine.generate, messages, tools, self.temperature
        )
        decode = self.engine.tokenizer.decode
        self._turn += 1
        reason = token_drift(self._previous_tokens, prompt, self._turn, decode)
        self._previous_tokens = prompt + completion
        trace = TokenTrace(
            prompt_token_ids=prompt,
            completion_token_ids=completion,
            completion_logprobs=logprobs,
            finish_reason="stop" if stopped else "length",
            sample_break=reason,
        )
        text = decode(completion, skip_special_tokens=True)
        return Generation(message=parse_assistant_text(text), tokens=trace, model=self.engine.model_dir.name)


class VLLMEngine:
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
    ) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        try:
            from vllm import LLM  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:
            raise ImportError(
                f"engine: vllm needs vLLM in this environment (pip install vllm): {exc}"
            ) from exc
        self.model_dir = Path(model_dir)
        self.max_new_tokens, self.temperature, self.seed = max_new_tokens, temperature, seed
        self.chat_template, self.sync_timeout = chat_template, sync_timeout
        self.llm = LLM(
            model=str(self.model_dir),
            dtype=dtype,
            enforce_eager=True,
            seed=seed if seed is not None else 0,
            max_model_len=max_model_len,
        )
        self.tokenizer: Any = self.llm.get_tokenizer()
        self._lock = threading.Lock()  # one generate or reload at a time
        self._calls = 0
        self.version = 0

    def policy(self, *, greedy: bool = False) -> Policy:
        return VLLMPolicy(self, 0.0 if greedy else self.temperature)

    def prompt_ids(self, messages: list[Message], tools: list[ToolSpec]) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            [template_message(m) for m in messages],
            tools=[t.to_openai() for t in tools] or None,
            chat_template=self.chat_template,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        if not isinstance(ids, list):
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    def generate(
        self, messages: list[Message], tools: list[ToolSpec], temperature: float
    ) -> tuple[list[int], list[int], list[float], bool]:
        """(prompt ids, completion ids, their logprobs, whether a stop token ended it)."""
        prompt = self.prompt_ids(messages, tools)
        [(completion, logprobs, stopped)] = self.generate_ids([prompt], temperature)
        return prompt, completion, logprobs, stopped

    def generate_ids(
        self, prompts: list[list[int]], temperature: float
    ) -> list[tuple[list[int], list[float], bool]]:
        """Sample from token ids; each sampled token's logprob is the raw model's (before temperature)."""
        from vllm import SamplingParams  # type: ignore[import-not-found,unused-ignore]

        with self._lock:
            self._calls += 1
            seed = None if self.seed is None else self.seed * 1_000_003 + self._calls
            params = SamplingParams(
                temperature=temperature, max_tokens=self.max_new_tokens, logprobs=0, seed=seed
            )
            outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        results = []
        for output in outputs:
            sample = output.outputs[0]
            ids = [int(i) for i in sample.token_ids]
            logprobs = [float(step[i].logprob) for step, i in zip(sample.logprobs or [], ids, strict=True)]
            results.append((ids, logprobs, sample.finish_reason == "stop"))
        return results

    def rng_state(self) -> int:
        """How many generate calls have run: each call's sampling seed is derived from it and `seed`."""
        return self._calls

    def set_rng_state(self, state: int) -> None:
        self._calls = int(state)

    def sync(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Push the trainer's weights into vLLM; raises WeightSyncError if that fails or times out."""
        weights = [(name, tensor.detach().to("cpu")) for name, tensor in state.items()]
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        try:
            with self._lock:
                future = pool.submit(
                    self.llm.collective_rpc, "reload_weights", kwargs={"weights_iterator": weights}
                )
                try:
                    future.result(timeout=self.sync_timeout)
                except concurrent.futures.TimeoutError as exc:
                    raise WeightSyncError(
                        f"vLLM did not load weights version {version} within {self.sync_timeout} s; it may "
                        "hold a mix of old and new weights: stop the run (or raise sync_timeout)"
                    ) from exc
                except Exception as exc:
                    raise WeightSyncError(f"vLLM failed to load weights version {version}: {exc}") from exc
        finally:
            pool.shutdown(wait=False)
        self.version = version

    def metrics(self) -> dict[str, float]:
        return {}

    def checksum(self) -> str:
        """sha256 of vLLM's own weights (its fused layout: compare versions of it, not with HF names)."""
        with self._lock:
            [state] = self.llm.collective_rpc(_worker_state)
        return weights_checksum(state)


def _worker_state(worker: Any) -> dict[str, torch.Tensor]:
    """Runs inside the vLLM worker: its model's weights, copied to CPU."""
    return {name: t.detach().to("cpu").clone() for name, t in worker.model_runner.model.state_dict().items()}
