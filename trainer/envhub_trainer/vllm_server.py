"""vLLM's OpenAI-compatible server as the rollout engine, driven over HTTP like any deployed policy.

Episodes talk to it through envhub's `OpenAIPolicy` (which reads back vLLM's prompt and completion
token ids and logprobs), so what is trained on is exactly what the server sampled. The trainer's
weights reach it through vLLM's development endpoints (`VLLM_SERVER_DEV_MODE=1`): the state dict is
written as safetensors, `POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path":
DIR}}` loads it in place, and `POST /reset_prefix_cache` drops KV computed by the old weights. The
engine starts the server itself (`python -m vllm.entrypoints.openai.api_server`), or attaches to one
already running at `url` (started with `VLLM_SERVER_DEV_MODE=1` and able to read the trainer's files).
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import torch

from envhub.messages import user
from envhub.policies.base import Policy
from envhub.policies.openai import OpenAIPolicy
from envhub_trainer.engine import InProcessEngine
from envhub_trainer.vllm_engine import WeightSyncError

SERVED_NAME = "policy"
"""The model name the server answers to (`--served-model-name`), whatever directory it loaded."""


class ServerStartError(RuntimeError):
    """The vLLM server exited or did not answer /health in time; the message carries its log's tail."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class VLLMServerEngine(InProcessEngine):
    """A vLLM OpenAI server (started here or at `url`) as the rollout engine, synced over HTTP."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
        chat_template: str | None = None,
        sync_timeout: float = 60.0,
        url: str | None = None,
        startup_timeout: float = 300.0,
        max_model_len: int = 2048,
        dtype: str = "float32",
        block_size: int = 32,
        concurrency: int = 64,
    ) -> None:
        from transformers import AutoTokenizer

        self.model_dir = Path(model_dir)
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.chat_template, self.sync_timeout = chat_template, sync_timeout
        self.concurrency = concurrency
        self.tokenizer: Any = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
        self.process: subprocess.Popen[bytes] | None = None
        self._weights = tempfile.TemporaryDirectory(prefix="envhub-vllm-weights-")
        self._log = Path(self._weights.name) / "server.log"
        self._cache_counts = (0.0, 0.0)
        self.version = 0
        if url is None:
            port = _free_port()
            self._start(port, seed, max_model_len, dtype, block_size, startup_timeout)
            url = f"http://127.0.0.1:{port}"
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=httpx.Timeout(30.0))
        self._wait_healthy(startup_timeout)

    # ------------------------------------------------------------ the server process

    def _start(
        self, port: int, seed: int | None, max_model_len: int, dtype: str, block_size: int, timeout: float
    ) -> None:
        command = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--served-model-name",
            SERVED_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--dtype",
            dtype,
            "--max-model-len",
            str(max_model_len),
            "--block-size",
            str(block_size),
            "--seed",
            str(seed or 0),
            "--enforce-eager",
            "--enable-prefix-caching",
        ]
        env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        with self._log.open("wb") as log:  # a file, not a pipe: a pipe nobody reads stalls the server
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise ServerStartError(
                    f"the vLLM server exited with code {self.process.returncode}: {self._log_tail()}"
                )
            try:
                if self._http.get("/health", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        self.close()
        raise ServerStartError(
            f"the vLLM server at {self.url} was not healthy within {timeout} s: {self._log_tail()}"
        )

    def _log_tail(self) -> str:
        try:
            return self._log.read_text(errors="replace")[-3000:]
        except OSError:
            return "(no log: the server was started elsewhere)"

    def close(self) -> None:
        """Stop the server this engine started (one it attached to keeps running)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._weights.cleanup()

    # ------------------------------------------------------------ the engine

    def policy(self, *, greedy: bool = False) -> Policy:
        extra: dict[str, Any] = {}
        if self.chat_template is not None:
            extra["chat_template"] = self.chat_template
        return OpenAIPolicy(
            f"{self.url}/v1",
            SERVED_NAME,
            temperature=0.0 if greedy else self.temperature,
            max_tokens=self.max_new_tokens,
            logprobs=True,  # training needs token ids: a server that drops them is an error, not a warning
            max_connections=self.concurrency,
            extra_body=extra,
        )

    def sync(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Write the weights where the server can read them, have it reload them, empty its prefix cache."""
        from safetensors.torch import save_file

        directory = Path(self._weights.name) / "weights"
        directory.mkdir(exist_ok=True)
        # clone: tied weights share storage, which save_file refuses; contiguous: it needs that too
        save_file(
            {k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()},
            directory / "model.safetensors",
        )
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(directory)}}
        try:
            answer = self._http.post(
                "/collective_rpc", json={**body, "timeout": self.sync_timeout}, timeout=self.sync_timeout + 5
            )
            answer.raise_for_status()
            self._http.post("/reset_prefix_cache").raise_for_status()
        except httpx.TimeoutException as exc:
            raise WeightSyncError(
                f"the vLLM server at {self.url} did not load weights version {version} within "
                f"{self.sync_timeout} s; it may hold a mix of old and new weights: stop the run"
            ) from exc
        except httpx.HTTPError as exc:
            detail = exc.response.text[:500] if isinstance(exc, httpx.HTTPStatusError) else str(exc)
            raise WeightSyncError(
                f"the vLLM server at {self.url} failed to load weights version {version}: {detail} "
                "(it needs VLLM_SERVER_DEV_MODE=1 for /collective_rpc, and to see the trainer's files)"
            ) from exc
        self.version = version

    def checksum(self) -> str:
        """A fingerprint of the served weights' behaviour: greedy ids and logprobs of a fixed prompt.

        The server's tensors are out of reach over HTTP; equal fingerprints mean the sync changed nothing
        the model computes, so `verify_sync` can still catch a reload that did not take."""
        answer = self._http.post(
            "/v1/chat/completions",
            json={
                "model": SERVED_NAME,
                "messages": [user("Count to five.").to_openai()],
                "temperature": 0.0,
                "max_tokens": 8,
                "logprobs": True,
            },
        )
        answer.raise_for_status()
        entries = answer.json()["choices"][0]["logprobs"]["content"]
        digest = hashlib.sha256()
        for entry in entries:
            digest.update(f"{entry['token']}|{entry['logprob']:.4f};".encode())
        return digest.hexdigest()

    def metrics(self) -> dict[str, float]:
        """Prefix-cache hit rate since the last call, from the server's Prometheus counters."""
        from prometheus_client.parser import text_string_to_metric_families

        totals = {"vllm:prefix_cache_queries": 0.0, "vllm:prefix_cache_hits": 0.0}
        text = self._http.get("/metrics").text
        for family in text_string_to_metric_families(text):
            if family.name in totals:
                totals[family.name] += sum(s.value for s in family.samples if s.name.endswith("_total"))
        queries, hits = totals["vllm:prefix_cache_queries"], totals["vllm:prefix_cache_hits"]
        looked_up, reused = queries - self._cache_counts[0], hits - self._cache_counts[1]
        self._cache_counts = (queries, hits)
        return {
            "prefix_cache_hit_rate": reused / looked_up if looked_up else 0.0,
            "prefix_cache_tokens": reused,
        }

    def rng_state(self) -> None:
        """The server samples from its own seeded generator, which cannot be saved or restored over HTTP:
        a resumed run continues with fresh samples (the weights, optimiser and data position are exact)."""

    def set_rng_state(self, state: Any) -> None:
        """Nothing to restore (see `rng_state`)."""
