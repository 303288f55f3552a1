"""Reward models: a sequence-classification model scores a conversation, in-process or over HTTP.

Thousands of episodes end at about the same time, and scoring them one forward pass each would waste
the accelerator, so the in-process model gathers requests that arrive together into micro-batches. The
HTTP client speaks a small JSON protocol (`POST {base_url}/score`, see docs/judges.md) that
`envhub.testing.reward_server` serves, and that a production scorer can implement in a few lines.

What the agent wrote never decides whether a model can score it: text UTF-8 cannot carry is repaired
and answers over `max_answer_chars` are cut in the middle, deterministically, before scoring. Otherwise
one odd character or one huge answer would fail its whole micro-batch as an infrastructure error, and
the runner would retry an episode that can only fail again. A reward model's scores have no floor that
could stand for "unscorable", so an over-long answer is scored on its cut form rather than given one.

torch and transformers are imported on first use, so `import envhub` stays light.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, ParamSpec, Protocol, TypeVar, runtime_checkable

from envhub.core import InfrastructureError
from envhub.inference.batching import MicroBatcher
from envhub.inference.chat_template import conversation_text
from envhub.inference.client import RequestNotSent, RetryingClient, ServerGaveUp, bearer, snippet
from envhub.inference.tensor_thread import on_tensor_thread, to_tensor_thread
from envhub.messages import Message, TextPart, assistant
from envhub.reward_marker import reward
from envhub.rewards.conversation import as_messages, encodable, middle_cut, split_answer

Prompt = str | list[Message]
"""What the answer responds to: a user message's text, or the conversation before the answer."""

INSTALL_HINT = "pip install 'envhub-core[hf]' (torch==2.13.0 and transformers)"
MAX_ANSWER_CHARS = 24_000
"""The default longest answer a reward model reads; longer ones are cut in the middle to this."""

P = ParamSpec("P")
T = TypeVar("T")


class RewardModelError(InfrastructureError):
    """The reward model could not score (server down, bad answer, a failed forward pass)."""


@runtime_checkable
class RewardModel(Protocol):
    """Anything that scores answers: higher is better; scores are finite floats, unbounded in general."""

    async def score(self, prompt: Prompt, answer: str) -> float: ...

    async def score_batch(self, items: Sequence[tuple[Prompt, str]]) -> list[float]: ...

    async def close(self) -> None: ...


def conversation(prompt: Prompt, answer: str, max_answer_chars: int = MAX_ANSWER_CHARS) -> list[Message]:
    """The conversation a reward model reads: the prompt, then the answer as the assistant's turn.

    Every text is made encodable, and the answer is cut in the middle to `max_answer_chars`.
    """
    return [*map(_encodable, as_messages(prompt)), assistant(middle_cut(encodable(answer), max_answer_chars))]


def _encodable(message: Message) -> Message:
    if isinstance(message.content, str):
        return message.model_copy(update={"content": encodable(message.content)})
    parts = [
        p.model_copy(update={"text": encodable(p.text)}) if isinstance(p, TextPart) else p
        for p in message.content
    ]
    return message.model_copy(update={"content": parts})


class _Scorer:
    """What every reward model shares: one score is a batch of one, and any of them can be a reward."""

    max_answer_chars = MAX_ANSWER_CHARS

    async def score_batch(self, items: Sequence[tuple[Prompt, str]]) -> list[float]:
        raise NotImplementedError

    async def score(self, prompt: Prompt, answer: str) -> float:
        """The score of one answer (batched with whatever else is being scored at the time)."""
        return (await self.score_batch([(prompt, answer)]))[0]

    def as_reward(self, *, weight: float = 1.0) -> Callable[[Any, list[Message]], Awaitable[float]]:
        """A reward method for an environment class: `preference = model.as_reward()`.

        It scores the agent's last message given the conversation before it.
        """
        scorer = self

        async def scored(env: Any, messages: list[Message]) -> float:
            prompt, answer = split_answer(messages)
            return await scorer.score(prompt, answer)

        return reward(weight=weight)(scored)

    async def close(self) -> None:
        return None


class LocalRewardModel(_Scorer):
    """A transformers sequence-classification model (`num_labels=1`) in `model_dir`, run in this process.

    Conversations are rendered with the tokenizer's chat template (or, without one or with
    `chat_template=False`, as `role: text` paragraphs). Concurrent requests are gathered for up to
    `max_wait` seconds into batches of at most `batch_size`, and each batch runs in a worker thread;
    a lock lets one forward pass run at a time, so one model can serve several event loops and threads.
    `forward_passes` counts them. Answers longer than `max_answer_chars` are cut in the middle.
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        batch_size: int = 8,
        device: str = "cpu",
        max_wait: float = 0.005,
        max_length: int | None = None,
        chat_template: bool = True,
        max_answer_chars: int = MAX_ANSWER_CHARS,
    ) -> None:
        path = Path(model_dir)
        if not (path / "config.json").is_file():
            raise ValueError(
                f"{path} is not a model directory (no config.json); save one with save_pretrained"
            )
        if batch_size < 1 or max_wait < 0 or max_answer_chars < 1:
            raise ValueError(
                f"need batch_size >= 1, max_wait >= 0 and max_answer_chars >= 1; "
                f"got {batch_size}, {max_wait} and {max_answer_chars}"
            )
        self.max_answer_chars = max_answer_chars
        self.model_dir = path
        self.batch_size = batch_size
        self.device = device
        self.max_wait = max_wait
        self.max_length = max_length
        self.chat_template = chat_template
        self.forward_passes = 0
        self._lock = threading.Lock()
        self._model: Any = None
        self._tokenizer: Any = None
        self._batcher: MicroBatcher[list[Message], None, float] = MicroBatcher(
            self._forward_batch, batch_size=batch_size, max_wait=max_wait, runner=to_tensor_thread
        )

    def load(self) -> None:
        """Load the model and tokenizer now (blocking; the async methods load on first use). Loading,
        rendering and forward passes run on the process's tensor thread (`envhub.inference.tensor_thread`),
        beside a policy's or a trainer's, under the lock that `close` takes to free the model."""
        on_tensor_thread(self._locked, self._load)

    def _load(self) -> None:
        if self._model is not None:
            return
        try:
            import torch  # noqa: F401  (fail here, with the install hint, rather than inside transformers)
            from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer
        except ImportError as exc:
            raise ImportError(
                f"LocalRewardModel needs torch and transformers: {INSTALL_HINT} ({exc})"
            ) from exc
        config = AutoConfig.from_pretrained(self.model_dir, local_files_only=True)
        if config.num_labels != 1:  # checked before loading, which would re-initialise a mismatched head
            raise ValueError(
                f"{self.model_dir} has {config.num_labels} output labels; a reward model has one "
                "(num_labels=1), whose logit is the score"
            )
        tokenizer = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
        model: Any = AutoModelForSequenceClassification.from_pretrained(self.model_dir, local_files_only=True)
        if tokenizer.pad_token is None:  # common for Llama-family reward models; padding is masked anyway
            tokenizer.pad_token = tokenizer.eos_token
        if model.config.pad_token_id is None:
            model.config.pad_token_id = tokenizer.pad_token_id
        self._tokenizer = tokenizer
        self._model = model.to(self.device).eval()

    def render(self, messages: list[Message]) -> str:
        """The text the model reads for a conversation (loads the tokenizer when needed)."""
        return on_tensor_thread(self._locked, self._load_and_render, messages)

    def _load_and_render(self, messages: list[Message]) -> str:
        self._load()
        return self._render(messages)

    def _render(self, messages: list[Message]) -> str:
        return conversation_text(self._tokenizer, messages, chat_template=self.chat_template)

    def forward(self, conversations: list[list[Message]]) -> list[float]:
        """Score conversations in one forward pass, blocking; the async methods batch into this."""
        return on_tensor_thread(self._locked, self._forward, conversations)

    def _forward(self, conversations: list[list[Message]]) -> list[float]:
        import torch

        self._load()
        templated = self.chat_template and bool(getattr(self._tokenizer, "chat_template", None))
        encoded = self._tokenizer(
            [self._render(c) for c in conversations],
            padding=True,
            truncation=self.max_length is not None,
            max_length=self.max_length,
            add_special_tokens=not templated,  # the template already wrote them
            return_tensors="pt",
        ).to(self.device)
        with torch.inference_mode():
            logits = self._model(**encoded).logits
        self.forward_passes += 1
        return [float(v) for v in logits[:, 0].float().cpu()]

    async def score_batch(self, items: Sequence[tuple[Prompt, str]]) -> list[float]:
        """Scores for (prompt, answer) pairs, micro-batched with any other requests in flight."""
        conversations = [conversation(p, a, self.max_answer_chars) for p, a in items]
        return list(await asyncio.gather(*(self._batcher.submit(c, None) for c in conversations)))

    def _forward_batch(self, conversations: list[list[Message]], _: None) -> list[float]:
        """`forward`, with a failure of the model itself named as the reward model's."""
        try:
            return self.forward(conversations)
        except (ImportError, ValueError, OSError):  # misconfiguration: say so as it is
            raise
        except Exception as exc:
            raise RewardModelError(
                f"the reward model in {self.model_dir} failed a forward pass of {len(conversations)} "
                f"conversations: {type(exc).__name__}: {exc}"
            ) from exc

    async def close(self) -> None:
        """Free the model; it is loaded again if used after."""
        with self._lock:
            self._model = None
            self._tokenizer = None

    def _locked(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        with self._lock:
            return fn(*args, **kwargs)


class HTTPRewardModel(_Scorer):
    """A reward model behind `POST {base_url}/score`: `{"inputs": [conversation, ...]}` -> `{"scores": [..]}`.

    Each conversation is a list of OpenAI-format messages ending with the assistant's answer. Transient
    failures (unreachable, timeouts, 429 and 5xx) are retried `max_retries` times with jittered backoff;
    anything else, or a malformed answer, raises RewardModelError at once. Batches larger than `max_batch`
    are split into several requests. Answers are cut to `max_answer_chars` as `LocalRewardModel` does.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 10.0,
        max_batch: int = 64,
        max_answer_chars: int = MAX_ANSWER_CHARS,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"the reward model URL must start with http:// or https://, got {base_url!r}")
        if timeout <= 0 or max_retries < 0 or max_batch < 1 or max_answer_chars < 1:
            raise ValueError(
                f"need timeout > 0, max_retries >= 0, max_batch >= 1 and max_answer_chars >= 1; "
                f"got {timeout}, {max_retries}, {max_batch} and {max_answer_chars}"
            )
        self.max_answer_chars = max_answer_chars
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/score"
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_batch = max_batch
        self._http = RetryingClient(
            timeout=timeout,
            max_retries=max_retries,
            backoff=backoff,
            max_backoff=max_backoff,
            headers=bearer(api_key),
        )

    async def score_batch(self, items: Sequence[tuple[Prompt, str]]) -> list[float]:
        inputs = [[m.to_openai() for m in conversation(p, a, self.max_answer_chars)] for p, a in items]
        chunks = [inputs[i : i + self.max_batch] for i in range(0, len(inputs), self.max_batch)]
        results = await asyncio.gather(*(self._post(chunk) for chunk in chunks))
        return [score for chunk in results for score in chunk]

    async def _post(self, inputs: list[list[dict[str, Any]]]) -> list[float]:
        try:
            response = await self._http.post(self.url, {"inputs": inputs})
        except ServerGaveUp as exc:
            raise RewardModelError(
                f"the reward model at {self.url} {exc.summary()}; is the server running and healthy? "
                "HTTPRewardModel(max_retries=...) allows more attempts"
            ) from None
        except RequestNotSent as exc:
            raise RewardModelError(str(exc)) from exc
        if response.status_code != 200:
            raise RewardModelError(
                f"the reward model at {self.url} rejected the request with {response.status_code} "
                f"(body: {snippet(response.text)}); this is not retried"
            )
        try:
            scores = response.json()["scores"]
            values = [float(s) for s in scores]
        except (ValueError, KeyError, TypeError) as exc:
            raise RewardModelError(
                f'the reward model at {self.url} answered a body that is not {{"scores": [numbers]}}: '
                f"{snippet(response.text)}"
            ) from exc
        if len(values) != len(inputs) or not all(math.isfinite(v) for v in values):
            raise RewardModelError(
                f"the reward model at {self.url} answered {len(values)} scores for {len(inputs)} inputs, "
                f"or a score that is not finite: {values[:8]}"
            )
        return values

    async def close(self) -> None:
        """Close this event loop's connections."""
        await self._http.close()
