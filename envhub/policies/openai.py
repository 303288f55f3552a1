"""A policy served over HTTP by any OpenAI-compatible chat server: vLLM, SGLang, or a hosted API.

Servers under rollout load fail in ordinary ways (rate limits, 5xx while a replica restarts, slow
answers), so transient failures are retried with jittered exponential backoff by the client every model
caller shares (`envhub.inference.client`), and everything else fails at once with a message naming the
server and what to check. With vLLM the exact sampled token ids,
their logprobs and the prompt's token ids come back too, for training on what was really sampled.

Tools travel in the request (`tool_format="native"`, which vLLM serves only when started with its
tool-calling flags) or as text in the system prompt (`tool_format="text"`, which any server serves).
"""

from __future__ import annotations

import copy
import json
import re
import warnings
from typing import Any, get_args

import httpx
from pydantic import ValidationError

from envhub.core import Env
from envhub.inference.client import RequestNotSent, RetryingClient, ServerGaveUp, bearer, snippet
from envhub.messages import Message
from envhub.policies.base import Generation, Policy, ToolFormat
from envhub.text_format import parse_assistant_text, tool_prompt
from envhub.tools import ToolSpec
from envhub.trace import TokenTrace, token_drift

TOKEN_FIELDS = ("return_tokens_as_token_ids", "return_token_ids")
"""vLLM's extensions that return the sampled token ids; other servers reject or ignore them."""

TOOL_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser")
"""The vLLM server flags without which it refuses every request that carries tools."""


class PolicyServerError(RuntimeError):
    """The policy server failed in a way retrying did not fix, or must not; the message says what to check."""


class ToolCallingUnavailable(PolicyServerError):
    """The server refuses tool definitions (vLLM without its tool-calling flags); `missing` names them."""

    def __init__(self, message: str, missing: list[str]) -> None:
        super().__init__(message)
        self.missing = missing


class _TokenFieldsRejected(Exception):
    """The server refused vLLM's token fields; the policy retries without them (logprobs=None only)."""


def _token_id(token: str) -> int | None:
    prefix, _, number = token.partition(":")
    return int(number) if prefix == "token_id" and number.lstrip("-").isdigit() else None


def token_trace(data: dict[str, Any], choice: dict[str, Any]) -> TokenTrace | None:
    """The tokens of a completion, when the server reported them (vLLM's extensions), else None.

    Completion ids come from the choice's `token_ids` (`return_token_ids: true`) or from logprob entries
    named `token_id:N` (`return_tokens_as_token_ids: true`); prompt ids from `prompt_token_ids` at the top
    level (chat completions) or in the choice (completions).
    """
    reported = choice.get("logprobs")
    entries = reported.get("content") if isinstance(reported, dict) else None
    logprobs = [float(e["logprob"]) for e in entries] if isinstance(entries, list) else None
    ids = choice.get("token_ids")
    if ids is None and isinstance(entries, list):
        parsed = [_token_id(str(e.get("token", ""))) for e in entries]
        ids = None if any(i is None for i in parsed) else parsed
    if not isinstance(ids, list):
        return None
    if logprobs is not None and len(logprobs) != len(ids):
        logprobs = None  # misaligned logprobs would silently corrupt importance ratios; drop them
    prompt = data.get("prompt_token_ids") or choice.get("prompt_token_ids")
    return TokenTrace(
        prompt_token_ids=[int(i) for i in prompt] if isinstance(prompt, list) else None,
        completion_token_ids=[int(i) for i in ids],
        completion_logprobs=logprobs,
        finish_reason=choice.get("finish_reason"),
    )


class _TokenFields:
    """Whether to ask for vLLM's token fields, shared by every episode's copy of a policy.

    With `logprobs=None` the first server that rejects or ignores them turns them off for all episodes,
    with one warning, so a batch against a server without vLLM's extensions still stores the text.
    """

    def __init__(self, logprobs: bool | None) -> None:
        self.requested = logprobs
        self.asking = logprobs is not False
        self.unavailable: str | None = None

    def give_up(self, url: str, why: str) -> None:
        if not self.asking:
            return
        self.asking = False
        self.unavailable = why
        warnings.warn(
            f"the policy server at {url} {why}, so episodes store text only (no token ids or logprobs); "
            "pass logprobs=False to stop asking, or serve the model with vLLM to train on exact tokens",
            UserWarning,
            stacklevel=4,
        )


def missing_tool_flags(body: str) -> list[str] | None:
    """The vLLM flags a 400 body says are missing for tool calls, or None if it is another error.

    vLLM answers `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be
    set`, or `tool_choice=... requires --tool-call-parser to be set` for a required or named tool choice.
    """
    if "tool choice" not in body and "tool_choice" not in body:
        return None
    named = [flag for flag in re.findall(r"--[a-z][a-z-]*[a-z]", body) if flag in TOOL_FLAGS]
    return sorted(set(named), key=TOOL_FLAGS.index) or None


class OpenAIPolicy(Policy):
    """Chat completions from `base_url` (e.g. `http://localhost:8000/v1`) with `model`.

    `logprobs=None` (auto) asks for logprobs and vLLM's token-id extensions (`return_tokens_as_token_ids`,
    `return_token_ids`) and, when the server rejects or ignores them, warns once and stores text only;
    `True` makes their absence an error, `False` never asks. `tool_format="text"` writes the tool schemas
    into the system prompt and reads `<tool_call>` blocks from the reply, for servers or chat templates
    without tool support. `extra_body` is merged into every request last, for server-specific options
    (`top_k`, `chat_template`). Each episode's copy checks that a turn's prompt token ids extend the
    previous turn's, and records a `sample_break` when they do not.
    """

    name = "openai"
    engine = "openai-compatible HTTP"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_tokens: int | None = 1024,
        timeout: float = 120.0,
        max_connections: int = 64,
        max_retries: int = 3,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        extra_body: dict[str, Any] | None = None,
        logprobs: bool | None = None,
        tool_format: ToolFormat = "native",
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"the policy server URL must start with http:// or https://, got {base_url!r}")
        if timeout <= 0 or max_connections < 1 or max_retries < 0:
            raise ValueError(
                f"need timeout > 0, max_connections >= 1 and max_retries >= 0; "
                f"got {timeout}, {max_connections} and {max_retries}"
            )
        if tool_format not in get_args(ToolFormat):
            raise ValueError(f"tool_format must be 'native' or 'text', got {tool_format!r}")
        if not 0 < top_p <= 1 or temperature < 0:
            raise ValueError(f"need 0 < top_p <= 1 and temperature >= 0; got {top_p} and {temperature}")
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.model = model
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.extra_body = dict(extra_body or {})
        self.tool_format: ToolFormat = tool_format
        self._token_fields = _TokenFields(logprobs)
        self._http = RetryingClient(
            timeout=timeout,
            max_retries=max_retries,
            backoff=backoff,
            max_backoff=max_backoff,
            headers=bearer(api_key),
            max_connections=max_connections,
        )
        self._previous_tokens: list[int] | None = None
        self._turn = 0
        self._written: dict[str, str] = {}
        """This episode's assistant messages (as JSON) to the text the model wrote (text tool format)."""

    @property
    def logprobs(self) -> bool | None:
        """As given: True (required), False (never asked for) or None (kept when the server has them)."""
        return self._token_fields.requested

    def info(self) -> dict[str, Any]:
        """The server, model and sampling settings, recorded with every episode."""
        return {
            **super().info(),
            "base_url": self.base_url,
            "model": self.model,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "tool_format": self.tool_format,
            "logprobs": self.logprobs,
            "token_fields": self._token_fields.asking,
        }

    def for_episode(self, env: Env) -> Policy:
        """A copy that shares the connection pool but tracks this episode's tokens."""
        episode = copy.copy(self)
        episode._previous_tokens = None
        episode._turn = 0
        episode._written = {}
        return episode

    def request_body(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        """The JSON sent for one turn."""
        if self.tool_format == "text":
            messages, tools = tool_prompt(messages, tools, raw=self._written), []
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [m.to_openai() for m in messages],
            "temperature": self.temperature,
            "top_p": self.top_p,
        }
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if tools:
            body["tools"] = [t.to_openai() for t in tools]
        if self._token_fields.asking:
            body.update(logprobs=True, return_tokens_as_token_ids=True, return_token_ids=True)
        body.update(self.extra_body)
        return body

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Generation:
        data = await self._complete(messages, tools)
        choice = data["choices"][0]
        message = self._message(choice)
        try:
            tokens = token_trace(data, choice)
        except (KeyError, TypeError, ValueError) as exc:
            raise PolicyServerError(
                f"the policy server at {self.url} answered token ids or logprobs this client cannot read "
                f"({type(exc).__name__}: {exc}); pass logprobs=False to do without them"
            ) from exc
        if tokens is None and self._token_fields.asking:
            if self.logprobs:
                fields = ", ".join(TOKEN_FIELDS)
                raise PolicyServerError(
                    f"the policy server at {self.url} ignored the token-id fields ({fields}) "
                    "that logprobs=True requires; serve the model with vLLM, or pass logprobs=None to "
                    "store text only when a server lacks them"
                )
            self._token_fields.give_up(self.url, "ignored the token-id fields " + ", ".join(TOKEN_FIELDS))
        self._turn += 1
        prompt = tokens.prompt_token_ids if tokens is not None else None
        if tokens is not None and prompt is not None:
            reason = token_drift(self._previous_tokens, prompt, self._turn)
            if reason is not None:
                tokens = tokens.model_copy(update={"sample_break": reason})
            self._previous_tokens = prompt + tokens.completion_token_ids
        else:
            self._previous_tokens = None  # unknown tokens: the next turn cannot be checked, so start afresh
        return Generation(message=message, tokens=tokens, model=str(data.get("model") or self.model))

    async def _complete(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        """One completion; in auto mode, a server that refuses the token fields is asked again without."""
        try:
            return await self._post(self.request_body(messages, tools))
        except _TokenFieldsRejected as exc:
            self._token_fields.give_up(self.url, f"rejected the token-id fields ({exc})")
            return await self._post(self.request_body(messages, tools))

    def _message(self, choice: dict[str, Any]) -> Message:
        """The assistant message of a choice; in the text tool format, read from its `<tool_call>` blocks."""
        try:
            message = Message.from_openai({**choice["message"], "role": "assistant"})
        except (ValidationError, ValueError, TypeError, AttributeError) as exc:
            raise PolicyServerError(
                f"the policy server at {self.url} answered a message this client cannot read ({exc}); "
                f"message: {snippet(json.dumps(choice['message']))}"
            ) from exc
        if self.tool_format != "text" or message.tool_calls:
            return message
        written = message.text
        parsed = parse_assistant_text(written)
        if parsed.tool_calls:
            self._written[parsed.model_dump_json()] = written
        return parsed

    async def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await self._http.post(self.url, body)
        except ServerGaveUp as exc:
            what = f"the policy server at {self.url} {exc.summary()}"
            raise PolicyServerError(f"{what}; {self._hint(exc)}") from None
        except RequestNotSent as exc:
            raise PolicyServerError(str(exc)) from exc
        return self._answer(body, response)

    def _hint(self, gave_up: ServerGaveUp) -> str:
        """What to check after the retries ran out, for the last kind of failure."""
        retries = f"OpenAIPolicy(max_retries=...) allows more attempts (now {self.max_retries})"
        kind = gave_up.last.kind
        if kind == "timeout":
            return (
                "if the model is just slow (long generations, a cold start), raise the timeout "
                "(OpenAIPolicy(timeout=...)); otherwise check that the server is not stuck"
            )
        if kind == "unreachable":
            return "is the server running, and is the URL right?"
        if kind == "429":
            return "it is rate-limiting: lower the rollout concurrency, or " + retries
        return "is it overloaded or crashing? Check its log; " + retries

    def _answer(self, body: dict[str, Any], response: httpx.Response) -> dict[str, Any]:
        """The completion in an answer that was not retried, or the error its status means."""
        code = response.status_code
        if code in (400, 422):
            self._check_refusal(body, response.text)
        if code >= 400:
            hints = {
                401: "check the API key (OpenAIPolicy(api_key=...))",
                404: f"check the base URL (it usually ends in /v1) and the model name {self.model!r}",
            }
            fields = (
                "; servers other than vLLM or SGLang may reject the token-id fields: pass logprobs=False"
                if "return_token_ids" in body
                else ""
            )
            hint = hints.get(code, f"check the model name {self.model!r} and the request options{fields}")
            raise PolicyServerError(
                f"the policy server at {self.url} rejected the request with {code} "
                f"(body: {snippet(response.text)}); this is not retried: {hint}"
            )
        return self._completion(response)

    def _check_refusal(self, body: dict[str, Any], answer: str) -> None:
        """Raise the specific error for a 400 that names what the server lacks: tool flags, token fields."""
        missing = missing_tool_flags(answer) if "tools" in body else None
        if missing is not None:
            raise ToolCallingUnavailable(
                f"the policy server at {self.url} refused the tool definitions: it was started without "
                f"{' and '.join(missing)} (body: {snippet(answer)}). Restart vLLM with "
                "--enable-auto-tool-choice --tool-call-parser PARSER, the parser that matches the model's "
                "chat template (hermes for Qwen2.5/Qwen3 and Hermes models, llama3_json for Llama 3.1+, "
                "mistral for Mistral; docs/serving.md), or write the tools into the prompt instead with "
                "OpenAIPolicy(tool_format='text')",
                missing,
            )
        named = [field for field in TOKEN_FIELDS if field in body and field in answer]
        if named and self._token_fields.requested is None:
            raise _TokenFieldsRejected(f"{', '.join(named)}; it answered {snippet(answer)}")

    def _completion(self, response: httpx.Response) -> dict[str, Any]:
        """The body as a chat completion, or an error that shows what came back instead."""
        try:
            data = response.json()
        except ValueError:
            data = None
        choices = data.get("choices") if isinstance(data, dict) else None
        if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
            problem = "is not JSON" if data is None else "has no choices[0]"
            raise PolicyServerError(
                f"the policy server at {self.url} answered {response.status_code} but the body {problem}, "
                f"so it is not a chat completion (content-type {response.headers.get('content-type')!r}, "
                f"body starts: {snippet(response.text)}); is the URL pointing at an OpenAI-compatible "
                "server and not at a proxy or web page?"
            )
        if not isinstance(choices[0].get("message"), dict):
            raise PolicyServerError(
                f"the policy server at {self.url} answered a completion without a message "
                f"(body starts: {snippet(response.text)}); is it a chat endpoint?"
            )
        assert isinstance(data, dict)
        return data

    async def close(self) -> None:
        """Close the shared connection pool (every episode's copy uses it)."""
        await self._http.close()
