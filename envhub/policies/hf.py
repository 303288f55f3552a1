"""A local Hugging Face transformers model as a policy, with the exact tokens and logprobs it sampled.

Training on multi-turn episodes concatenates each turn's prompt and completion into one sample; that is
only right when the chat template, re-applied to the whole conversation, reproduces the tokens already
sampled. Often it does not (re-tokenised text, dropped reasoning, re-rendered tool calls), so every turn
is checked and a `sample_break` is recorded where the tokens drift.

torch and transformers are imported on first use, so `import envhub` stays light.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import random
import threading
import warnings
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from pathlib import Path
from typing import Any, get_args

from envhub.core import Env
from envhub.inference.batching import MicroBatcher
from envhub.inference.chat_template import prompt_ids
from envhub.inference.tensor_thread import on_tensor_thread, to_tensor_thread
from envhub.messages import Message
from envhub.policies.base import Generation, Policy, ToolFormat
from envhub.text_format import parse_assistant_text, tool_prompt
from envhub.tools import ToolSpec
from envhub.trace import EpisodeTokens

__all__ = ["TransformersPolicy"]

INSTALL_HINT = "pip install 'envhub-core[hf]' (torch==2.13.0 and transformers)"


def _installed(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _stop_ids(model: Any, tokenizer: Any) -> set[int]:
    """The ids that end a turn: the generation config's eos ids and the tokenizer's."""
    configured = model.generation_config.eos_token_id
    ids = configured if isinstance(configured, list) else [configured]
    return {int(i) for i in [*ids, tokenizer.eos_token_id] if i is not None}


class _Model:
    """The model and tokenizer every episode's copy shares; the lock allows one generation at a time.

    Prompts that arrive while the model is busy (or within `max_wait` seconds of each other) are
    generated together, up to `batch_size` at a time, left-padded in one `generate` call.
    """

    def __init__(
        self, model_dir: Path, device: str, seed: int | None, batch_size: int, max_wait: float
    ) -> None:
        self.model_dir = model_dir
        self.device = device
        self.lock = threading.Lock()
        self.template_lock = (
            threading.Lock()
        )  # a fast tokenizer refuses concurrent calls ("Already borrowed")
        self.rng = random.Random(seed)
        self.model: Any = None
        self.tokenizer: Any = None
        self.generate_calls = 0
        self.batcher: MicroBatcher[list[int], tuple[int, float], tuple[list[int], list[float]]] = (
            MicroBatcher(
                lambda prompts, options: self.generate_batch(prompts, *options),
                batch_size=batch_size,
                max_wait=max_wait,
                runner=to_tensor_thread,
            )
        )

    def load(self) -> None:
        """Load on first use, on the tensor thread (`envhub.inference.tensor_thread`): loading reads the
        whole checkpoint, and tensors made on another thread would start OpenMP workers of their own.
        A loaded model is seen without that trip: every turn asks, and the thread may be generating."""
        if self.model is None:
            on_tensor_thread(self._load_locked)

    def _load_locked(self) -> None:
        with self.lock:
            self._load()

    def _load(self) -> None:
        if self.model is not None:
            return
        try:
            import torch  # noqa: F401  (fail here, with the install hint, rather than inside transformers)
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise ImportError(f"the hf policy needs torch and transformers: {INSTALL_HINT} ({exc})") from exc
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
        model: Any = AutoModelForCausalLM.from_pretrained(self.model_dir, local_files_only=True)
        self.model = model.to(self.device).eval()

    def unload(self) -> None:
        with self.lock:
            self.model = None
            self.tokenizer = None

    async def generate(
        self, prompt: list[int], max_new_tokens: int, temperature: float
    ) -> tuple[list[int], list[float]]:
        """Completion ids and logprobs of one prompt, generated in a batch with whatever else is waiting."""
        return await self.batcher.submit(prompt, (max_new_tokens, temperature))

    def generate_batch(
        self, prompts: list[list[int]], max_new_tokens: int, temperature: float
    ) -> list[tuple[list[int], list[float]]]:
        """Left-pad the prompts into one `generate` call; return each completion's ids (up to and
        including its stop token) and their logprobs under the model, exactly as one call per prompt."""
        import torch

        with self.lock:
            self._load()
            model, tokenizer = self.model, self.tokenizer
            stops = _stop_ids(model, tokenizer)
            pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
            options: dict[str, Any] = {"do_sample": False}
            if temperature > 0:
                options = {"do_sample": True, "temperature": temperature}
                torch.manual_seed(self.rng.randrange(2**63))
            width = max(len(p) for p in prompts)
            input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
            attention = torch.zeros((len(prompts), width), dtype=torch.long)
            for row, prompt in enumerate(prompts):
                input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
                attention[row, width - len(prompt) :] = 1
            with torch.inference_mode():
                out = model.generate(
                    input_ids.to(model.device),
                    attention_mask=attention.to(model.device),
                    max_new_tokens=max_new_tokens,
                    eos_token_id=sorted(stops),
                    pad_token_id=pad,
                    return_dict_in_generate=True,
                    output_logits=True,
                    **options,
                )
                generated = out.sequences[:, width:].cpu()
                logprobs = torch.log_softmax(torch.stack(out.logits, dim=1).float().cpu(), dim=-1)
                logprobs = logprobs.gather(-1, generated[:, :, None])[:, :, 0]
            self.generate_calls += 1
        results = []
        for row in range(len(prompts)):
            ids = [int(i) for i in generated[row].tolist()]
            end = next((k + 1 for k, i in enumerate(ids) if i in stops), len(ids))
            results.append((ids[:end], [float(x) for x in logprobs[row, :end].tolist()]))
        return results


class TransformersPolicy(Policy):
    """Generates with a local model directory (`save_pretrained` layout) on the CPU, or `device`.

    `temperature=0` decodes greedily. Logprobs are the model's own (log-softmax of the raw logits, before
    temperature or top-k/top-p from the model's generation config), as vLLM reports them by default.
    `chat_template` overrides the tokenizer's; `tool_format="text"` writes the tools into the system
    prompt for templates that cannot render them (SmolLM2's drops them silently). Generation runs on the
    process's tensor thread (`envhub.inference.tensor_thread`), one call at a time; sampling is seeded
    from `seed` call by call, so a run with the same calls in the same order repeats.

    With `batch_size > 1`, turns of concurrent episodes that ask within `max_wait` seconds of each other
    (or while a generation runs) share one left-padded `generate` call: greedy tokens are the same as
    one call per turn, logprobs equal up to float rounding; sampled tokens depend on how calls batch.
    """

    name = "hf"
    engine = "transformers"

    def __init__(
        self,
        model_dir: str | Path,
        *,
        max_new_tokens: int = 512,
        temperature: float = 1.0,
        seed: int | None = None,
        device: str = "cpu",
        chat_template: str | None = None,
        batch_size: int = 1,
        max_wait: float = 0.005,
        tool_format: ToolFormat = "native",
    ) -> None:
        path = Path(model_dir)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"{path} is not a model directory (no config.json): the hf policy loads a local "
                "save_pretrained() directory; no model is downloaded"
            )
        missing = [name for name in ("torch", "transformers") if find_spec(name) is None]
        if missing:
            raise ImportError(f"the hf policy needs {' and '.join(missing)}: {INSTALL_HINT}")
        if max_new_tokens < 1 or temperature < 0 or batch_size < 1 or max_wait < 0:
            raise ValueError(
                "need max_new_tokens >= 1, temperature >= 0, batch_size >= 1 and max_wait >= 0; got "
                f"{max_new_tokens}, {temperature}, {batch_size} and {max_wait}"
            )
        if tool_format not in get_args(ToolFormat):
            raise ValueError(f"tool_format must be 'native' or 'text', got {tool_format!r}")
        self.tool_format: ToolFormat = tool_format
        self.model_dir = path
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.chat_template = chat_template
        self._config: dict[str, Any] = json.loads((path / "config.json").read_text())
        self.seed = seed
        self.device = device
        self.batch_size = batch_size
        self._shared = _Model(path, device, seed, batch_size, max_wait)
        self._tokens = EpisodeTokens()
        self._written: dict[str, str] = {}
        """This episode's tool-calling messages (as JSON) to the text the model wrote (text tool format)."""

    def info(self) -> dict[str, Any]:
        """The model (its directory, and the architecture its config names), the sampling settings
        (`max_tokens` is transformers' `max_new_tokens`; no top-p: sampling is plain softmax), the
        engine's version, the device and batching, and the chat template when it is not the model's."""
        config = self._config
        template = self.chat_template
        return {
            **super().info(),
            "engine_version": _installed("transformers"),
            "torch_version": _installed("torch"),
            "model": str(self.model_dir.resolve()),
            "model_type": config.get("model_type"),
            "architectures": config.get("architectures"),
            "temperature": self.temperature,
            "do_sample": self.temperature > 0,
            "max_tokens": self.max_new_tokens,
            "seed": self.seed,
            "device": self.device,
            "batch_size": self.batch_size,
            "tool_format": self.tool_format,
            "chat_template_sha256": None
            if template is None
            else hashlib.sha256(template.encode()).hexdigest(),
        }

    def for_episode(self, env: Env) -> Policy:
        """A copy that shares the loaded model but tracks this episode's tokens."""
        episode = copy.copy(self)
        episode._tokens = EpisodeTokens()
        episode._written = {}
        return episode

    # ------------------------------------------------------------ what a trainer's engine needs

    def load(self) -> None:
        """Load the model now (blocking) rather than on the first turn, e.g. to sync weights into it."""
        self._shared.load()

    @property
    def model(self) -> Any:
        """The loaded transformers model (loading it if needed); generation holds `lock` while using it."""
        self._shared.load()
        return self._shared.model

    @property
    def tokenizer(self) -> Any:
        self._shared.load()
        return self._shared.tokenizer

    @property
    def generate_calls(self) -> int:
        """How many `generate` calls have run: fewer than turns when turns were batched."""
        return self._shared.generate_calls

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the weights between generations (never during one): how a trainer syncs its updates."""
        on_tensor_thread(self._load_state_dict, state)

    def _load_state_dict(self, state: dict[str, Any]) -> None:
        import torch

        shared = self._shared
        with shared.lock, torch.no_grad():
            shared._load()
            shared.model.load_state_dict(state)

    def state_dict(self) -> dict[str, Any]:
        """A copy of the current weights, taken between generations."""
        return on_tensor_thread(self._state_dict)

    def _state_dict(self) -> dict[str, Any]:
        shared = self._shared
        with shared.lock:
            shared._load()
            return {name: tensor.detach().clone() for name, tensor in shared.model.state_dict().items()}

    def rng_state(self) -> Any:
        """The sampling seed stream, for checkpoints: a resumed run then samples as an unbroken one."""
        return self._shared.rng.getstate()

    def set_rng_state(self, state: Any) -> None:
        """Restore `rng_state()`, also after a JSON round trip (which turns its tuples into lists)."""
        version, internal, gauss = state
        self._shared.rng.setstate((version, tuple(internal), gauss))

    # ------------------------------------------------------------ the policy

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Generation:
        shared = self._shared
        prompt, decode, stops = await asyncio.to_thread(self._prepare, messages, tools)
        completion, logprobs = await shared.generate(prompt, self.max_new_tokens, self.temperature)
        text = decode(completion, skip_special_tokens=True)
        stopped = bool(completion) and completion[-1] in stops
        tokens = self._tokens.trace(prompt, completion, logprobs, stopped=stopped, decode=decode)
        message = parse_assistant_text(text)
        if self.tool_format == "text" and message.tool_calls:
            self._written[message.model_dump_json()] = text
        return Generation(message=message, tokens=tokens, model=self.model_dir.name)

    def _prepare(self, messages: list[Message], tools: list[ToolSpec]) -> tuple[list[int], Any, set[int]]:
        """Load if needed and render the prompt (in a worker thread: both can take a while)."""
        shared = self._shared
        shared.load()
        with shared.template_lock:
            return (
                self._prompt(messages, tools),
                shared.tokenizer.decode,
                _stop_ids(shared.model, shared.tokenizer),
            )

    def _prompt(self, messages: list[Message], tools: list[ToolSpec]) -> list[int]:
        """The chat template applied once to the whole conversation, with the assistant's cue."""
        tokenizer = self._shared.tokenizer
        if self.chat_template is None and not tokenizer.chat_template:
            raise ValueError(
                f"the tokenizer in {self.model_dir} has no chat template; "
                "pass TransformersPolicy(chat_template=...)"
            )
        if self.tool_format == "text":
            messages, tools = tool_prompt(messages, tools, raw=self._written), []
        elif tools and "tools" not in (self.chat_template or tokenizer.chat_template):
            warnings.warn(
                f"the chat template of {self.model_dir} never mentions tools, so the model will not see "
                "them; pass TransformersPolicy(tool_format='text') to write them into the prompt",
                UserWarning,
                stacklevel=2,
            )
        return prompt_ids(tokenizer, messages, tools, self.chat_template)

    async def close(self) -> None:
        """Drop the model so its memory can be freed (every episode's copy shares it)."""
        await asyncio.to_thread(self._shared.unload)
