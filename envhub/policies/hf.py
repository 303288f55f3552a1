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
import json
import random
import threading
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from envhub.core import Env
from envhub.messages import Message
from envhub.policies.base import Generation, Policy, TokenTrace, token_drift
from envhub.text_format import parse_assistant_text
from envhub.tools import ToolSpec

INSTALL_HINT = "pip install 'envhub[hf]' (torch==2.13.0 and transformers)"


def template_message(message: Message) -> dict[str, Any]:
    """A message as Hugging Face chat templates expect it: tool-call arguments as objects, text only.

    Templates render arguments with `tojson`, so raw JSON text would come out quoted; images are left
    out because the models served here read text only.
    """
    out: dict[str, Any] = {"role": message.role, "content": message.text}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": _arguments(c.arguments)},
            }
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    return out


def _arguments(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw  # broken JSON the model wrote stays as it was, so the template shows the same text


class _Model:
    """The model and tokenizer every episode's copy shares; the lock allows one generation at a time."""

    def __init__(self, model_dir: Path, device: str, seed: int | None) -> None:
        self.model_dir = model_dir
        self.device = device
        self.lock = threading.Lock()
        self.rng = random.Random(seed)
        self.model: Any = None
        self.tokenizer: Any = None

    def load(self) -> None:
        """Load on first use, in a worker thread: loading reads the whole checkpoint."""
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


def _stop_ids(model: Any, tokenizer: Any) -> set[int]:
    """The ids that end a turn: the generation config's eos ids and the tokenizer's."""
    configured = model.generation_config.eos_token_id
    ids = configured if isinstance(configured, list) else [configured]
    return {int(i) for i in [*ids, tokenizer.eos_token_id] if i is not None}


class TransformersPolicy(Policy):
    """Generates with a local model directory (`save_pretrained` layout) on the CPU, or `device`.

    `temperature=0` decodes greedily. Logprobs are the model's own (log-softmax of the raw logits, before
    temperature or top-k/top-p from the model's generation config), as vLLM reports them by default.
    `chat_template` overrides the tokenizer's. Generation runs in a worker thread, one at a time per model;
    sampling is seeded from `seed` call by call, so a run with the same calls in the same order repeats.
    """

    name = "hf"

    def __init__(
        self,
        model_dir: str | Path,
        *,
        max_new_tokens: int = 512,
        temperature: float = 1.0,
        seed: int | None = None,
        device: str = "cpu",
        chat_template: str | None = None,
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
        if max_new_tokens < 1 or temperature < 0:
            raise ValueError(
                f"need max_new_tokens >= 1 and temperature >= 0, got {max_new_tokens}, {temperature}"
            )
        self.model_dir = path
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.chat_template = chat_template
        self._shared = _Model(path, device, seed)
        self._previous_tokens: list[int] | None = None
        self._turn = 0

    def for_episode(self, env: Env) -> Policy:
        """A copy that shares the loaded model but tracks this episode's tokens."""
        episode = copy.copy(self)
        episode._previous_tokens = None
        episode._turn = 0
        return episode

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Generation:
        return await asyncio.to_thread(self._act, messages, tools)

    def _prompt(self, messages: list[Message], tools: list[ToolSpec]) -> list[int]:
        """The chat template applied once to the whole conversation, with the assistant's cue."""
        tokenizer = self._shared.tokenizer
        if self.chat_template is None and not tokenizer.chat_template:
            raise ValueError(
                f"the tokenizer in {self.model_dir} has no chat template; "
                "pass TransformersPolicy(chat_template=...)"
            )
        ids = tokenizer.apply_chat_template(
            [template_message(m) for m in messages],
            tools=[t.to_openai() for t in tools] or None,
            chat_template=self.chat_template,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        if not isinstance(ids, list):  # some tokenizers answer a BatchEncoding whatever return_dict says
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    def _act(self, messages: list[Message], tools: list[ToolSpec]) -> Generation:
        shared = self._shared
        with shared.lock:
            shared.load()
            prompt = self._prompt(messages, tools)
            completion, logprobs = self._generate(prompt)
            text = shared.tokenizer.decode(completion, skip_special_tokens=True)
            stops = _stop_ids(shared.model, shared.tokenizer)
            decode = shared.tokenizer.decode
        self._turn += 1
        reason = token_drift(self._previous_tokens, prompt, self._turn, decode)
        self._previous_tokens = prompt + completion
        tokens = TokenTrace(
            prompt_token_ids=prompt,
            completion_token_ids=completion,
            completion_logprobs=logprobs,
            finish_reason="stop" if completion and completion[-1] in stops else "length",
            sample_break=reason,
        )
        return Generation(message=parse_assistant_text(text), tokens=tokens, model=self.model_dir.name)

    def _generate(self, prompt: list[int]) -> tuple[list[int], list[float]]:
        """Sample a completion; return its token ids and each token's logprob under the model."""
        import torch

        model, tokenizer = self._shared.model, self._shared.tokenizer
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        options: dict[str, Any] = {"do_sample": False}
        if self.temperature > 0:
            options = {"do_sample": True, "temperature": self.temperature}
            torch.manual_seed(self._shared.rng.randrange(2**63))
        input_ids = torch.tensor([prompt], device=model.device)
        with torch.inference_mode():
            out = model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=self.max_new_tokens,
                pad_token_id=pad,
                return_dict_in_generate=True,
                output_logits=True,
                **options,
            )
            completion = out.sequences[0, len(prompt) :]
            logits = torch.stack(out.logits, dim=1)[0, : len(completion)].float()
            logprobs = torch.log_softmax(logits, dim=-1).gather(-1, completion[:, None])[:, 0]
        return [int(i) for i in completion.tolist()], [float(x) for x in logprobs.tolist()]

    async def close(self) -> None:
        """Drop the model so its memory can be freed (every episode's copy shares it)."""
        await asyncio.to_thread(self._shared.unload)
