"""Any envhub id in TRL's `GRPOTrainer` environment mode (`environment_factory`, TRL >= 1.0).

    from trl import GRPOConfig, GRPOTrainer
    from envhub.integrations import trl as envhub_trl

    trainer = GRPOTrainer(
        model=MODEL,
        processing_class=envhub_trl.tokenizer(MODEL),  # a chat template that renders tool calls
        train_dataset=envhub_trl.dataset("arithmetic-v0", seeds=range(64)),
        environment_factory=envhub_trl.environment_factory("arithmetic-v0"),
        reward_funcs=envhub_trl.envhub_reward,
        args=GRPOConfig(...),
    )

TRL's contract: a class whose public methods are the tools (described to the model from their signatures
and Google-style docstrings), a `reset(**row)` whose returned text joins the row's last user message, and
rewards from reward functions that receive the instances as `environments`. Each instance here owns one
envhub env, driven on a background event loop because TRL calls everything synchronously.

The reward is envhub's for exactly the conversation TRL trains on: `envhub_reward` replays the completion's
assistant messages in a fresh episode of the same seed. The live episode cannot be scored instead: TRL
calls each tool of a message separately, never shows the env the final answer, and drops tool results
that would overflow the completion budget, so its history and the completion can differ.
"""

from __future__ import annotations

import inspect
import os
import re
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Union

from envhub.core import Env, Observation
from envhub.messages import Message, ToolCall, refuse_images
from envhub.registration import make
from envhub.sync_loop import build, run
from envhub.tools import ToolSpec

if TYPE_CHECKING:
    from datasets import Dataset
    from transformers import PreTrainedTokenizerBase

_JSON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "null": type(None),
    "array": list,
    "object": dict,
}
_KEYWORD = inspect.Parameter.KEYWORD_ONLY
_RESERVED = {"reset", "get_reward"}
"""Method names TRL reads as the env's own, never as tools."""
_CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
"""The tokens TRL's Qwen2.5 template writes: a model whose vocabulary has them can be given it."""
_ADAPTER_NAMES = {"env_id", "make_kwargs", "seed"}
"""Attributes of the adapter's class, which a tool of the same name would hide."""


class TRLEnvironment:
    """One envhub env behind TRL's environment contract; `environment_factory` adds the tool methods.

    Only `reset` and the tools are public: TRL takes every other public method for a tool.
    """

    env_id: ClassVar[str]
    make_kwargs: ClassVar[dict[str, Any]]

    def __init__(self) -> None:
        self.seed: int | None = None
        """The seed of the episode in progress (or last played): `envhub_reward` replays it."""
        self._env = build(make, self.env_id, **self.make_kwargs)
        self._running = False
        self._calls = 0
        self._closer = weakref.finalize(self, _close_env, self._env)  # at GC, `close()` or exit

    def reset(self, seed: int | None = None, prompt: Any = None, **row: Any) -> str:
        """Start an episode (`seed` from the dataset row); the text returned joins the row's prompt.

        The observation's system messages go into the text too unless the row's prompt already has
        them (as `dataset()` writes it), so no instruction of the env is lost with a bare prompt.
        """
        observation, info = run(self._env.reset(seed=seed))
        refuse_images(
            observation, sender=f"{self.env_id}'s prompt", reader="the TRL adapter passes text only"
        )
        self.seed = info.get("seed", seed)
        self._running, self._calls = True, 0
        lead = _leading_system(observation)
        given = {m.get("content") for m in prompt or [] if isinstance(m, dict) and m.get("role") == "system"}
        parts = [m.text for m in lead if m.text not in given] + [m.text for m in observation[len(lead) :]]
        return "\n\n".join(parts)

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """One tool call as one envhub step; the env's answer (an error for bad arguments) is the result."""
        if not self._running:
            raise RuntimeError(
                f"the {self.env_id} episode is over (it ended on an earlier call, or reset() was never "
                "called), so the tool cannot run"
            )
        self._calls += 1
        call = ToolCall.create(name, arguments, id=f"call_{self._calls}")
        result = run(self._env.step(Message(role="assistant", tool_calls=[call])))
        self._running = not (result.terminated or result.truncated)
        return "\n".join(m.text for m in result.observation)

    def _score(self, completion: list[dict[str, Any]]) -> float:
        """envhub's return for the completion: its assistant messages replayed from this episode's seed."""
        self._running = False  # the live episode is given up for the replay
        return run(_replay(self._env, self.seed, completion))


def environment_factory(env_id: str, **make_kwargs: Any) -> type[TRLEnvironment]:
    """The class to pass as `GRPOTrainer(environment_factory=...)`: each instance makes `env_id`.

    The env's tools become methods whose signatures and docstrings say what its tool schemas say, so
    TRL's (transformers') schema extraction describes them to the model as envhub would. They are read
    from one env after a reset, since some envs (remote ones) know their tools only then.
    """
    tools = run(_probe_tools(env_id, make_kwargs))
    namespace: dict[str, Any] = {"env_id": env_id, "make_kwargs": dict(make_kwargs)}
    for spec in tools:
        if spec.name in _RESERVED | _ADAPTER_NAMES or spec.name.startswith("_"):
            raise ValueError(
                f"{env_id}'s tool {spec.name!r} cannot be a method of TRL's environment class: TRL reserves "
                f"{' and '.join(sorted(_RESERVED))}, hides names starting with '_', and the adapter uses "
                f"{', '.join(sorted(_ADAPTER_NAMES))}; rename the tool in the env"
            )
        namespace[spec.name] = _tool_method(spec)
    name = "Envhub_" + re.sub(r"\W", "_", env_id)
    return type(name, (TRLEnvironment,), namespace)


def envhub_reward(
    completions: list[list[dict[str, Any]]],
    environments: list[Any],
    log_extra: Callable[[str, list[Any]], None] | None = None,
    **_: Any,
) -> list[float | None]:
    """TRL reward function: envhub's reward for each completion (None for rollouts of other envs).

    Each completion's seed goes to TRL's completions table as `envhub_seed`, so a logged completion can
    be replayed through envhub.
    """
    rewards = [
        env._score(completion) if isinstance(env, TRLEnvironment) else None
        for env, completion in zip(environments, completions, strict=True)
    ]
    if log_extra is not None:
        log_extra("envhub_seed", [getattr(env, "seed", None) for env in environments])
    return rewards


def dataset(env_id: str, seeds: Iterable[int], **make_kwargs: Any) -> Dataset:
    """A `train_dataset`: one row per seed, its prompt the env's system messages and an empty user turn.

    Every rollout of a row resets to the row's seed, so a GRPO group compares completions of one task;
    `reset` fills the user turn with the task.
    """
    from datasets import Dataset

    seeds = list(seeds)
    systems = run(_system_prompts(env_id, seeds, make_kwargs))
    prompts = [
        [*({"role": "system", "content": t} for t in texts), {"role": "user", "content": ""}]
        for texts in systems
    ]
    return Dataset.from_dict({"prompt": prompts, "seed": seeds})


def tokenizer(model: str | os.PathLike[str]) -> PreTrainedTokenizerBase:
    """The model's tokenizer for `GRPOTrainer(processing_class=...)`, its chat template able to render tools.

    TRL refuses a template that cannot render a tool-calling conversation, and small chat models' own
    templates (SmolLM2's) drop tools and tool calls. Such a model that speaks ChatML (`<|im_start|>` and
    `<|im_end|>` are single tokens of its vocabulary) gets TRL's own Qwen2.5 template, the ChatML template
    with Hermes-style `<tool_call>` blocks, which TRL also knows how to parse the model's replies with (a
    template of envhub's own would be one TRL cannot parse). It names the model Qwen in a conversation
    without a system message; `dataset()`'s rows start with the env's. A template that can already render
    tools is kept as it is.
    """
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template, supports_tool_calling

    loaded = AutoTokenizer.from_pretrained(model)
    if supports_tool_calling(loaded):
        return loaded
    vocabulary = loaded.get_vocab()
    if not all(token in vocabulary for token in _CHATML_TOKENS):
        raise ValueError(
            f"{model}'s chat template cannot render tool calls, which TRL's environment mode needs, and "
            f"its vocabulary lacks ChatML's {' and '.join(_CHATML_TOKENS)}, so no tool-calling template "
            "can be chosen for it: set `tokenizer.chat_template` to one that renders `tool_calls` and tool "
            "messages (trl.chat_template_utils has several) and pass the tokenizer as `processing_class`"
        )
    loaded.chat_template = qwen2_5_chat_template
    return loaded


def close(environment: TRLEnvironment) -> None:
    """Close the env behind one instance now (TRL keeps its instances to the end of the process,
    when they are closed anyway)."""
    environment._closer()


async def _probe_tools(env_id: str, make_kwargs: dict[str, Any]) -> list[ToolSpec]:
    async with make(env_id, **make_kwargs) as env:
        await env.reset(seed=0)
        return env.tools


async def _system_prompts(env_id: str, seeds: list[int], make_kwargs: dict[str, Any]) -> list[list[str]]:
    async with make(env_id, **make_kwargs) as env:
        return [[m.text for m in _leading_system((await env.reset(seed=seed))[0])] for seed in seeds]


async def _replay(env: Env, seed: int | None, completion: list[dict[str, Any]]) -> float:
    """The episode's return when its assistant turns are the completion's; an unfinished one earns what
    it earned so far."""
    await env.reset(seed=seed)
    total = 0.0
    for message in completion:
        if message.get("role") != "assistant":
            continue
        result = await env.step(Message.from_openai(message))
        total += result.reward
        if result.terminated or result.truncated:
            break
    return total


def _close_env(env: Env) -> None:
    run(env.close())


def _leading_system(observation: Observation) -> list[Message]:
    lead = []
    for message in observation:
        if message.role != "system":
            break
        lead.append(message)
    return lead


def _tool_method(spec: ToolSpec) -> Callable[..., str]:
    """A method that calls the tool, with the signature and docstring its JSON schema describes."""

    def call(self: TRLEnvironment, **arguments: Any) -> str:
        return self._call_tool(spec.name, arguments)

    properties: dict[str, Any] = spec.parameters.get("properties", {})
    required = set(spec.parameters.get("required", []))
    defs: dict[str, Any] = spec.parameters.get("$defs", {})
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}  # no return hint: envhub's schemas say nothing of results
    for name, schema in properties.items():
        if not name.isidentifier():
            raise ValueError(
                f"tool {spec.name!r}: parameter {name!r} is not a Python name, and TRL describes tools "
                "from Python signatures; rename it in the env"
            )
        annotations[name] = hint = _hint(schema, defs)
        default = inspect.Parameter.empty if name in required else schema.get("default")
        parameters.append(inspect.Parameter(name, _KEYWORD, default=default, annotation=hint))
    args = [f"    {name}: {_one_line(s.get('description') or name)}" for name, s in properties.items()]
    doc = (spec.description or spec.name).strip()
    setattr(call, "__signature__", inspect.Signature(parameters))  # noqa: B010
    call.__annotations__ = annotations
    call.__doc__ = "\n\n".join([doc, "Args:\n" + "\n".join(args)]) if args else doc
    call.__name__ = call.__qualname__ = spec.name
    return call


def _hint(schema: dict[str, Any], defs: dict[str, Any]) -> Any:
    """The Python type hint whose JSON schema (as transformers writes it) is `schema`, as near as one can
    say it; a shape no hint expresses becomes Any (the env still checks the arguments)."""
    if "$ref" in schema:
        target = defs.get(schema["$ref"].rsplit("/", 1)[-1])
        return _hint(target, defs) if target is not None else Any
    if "enum" in schema and all(isinstance(v, str | int | float | bool) for v in schema["enum"]):
        return Literal[tuple(schema["enum"])]
    options = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(schema.get("type"), list):
        options = [{"type": t} for t in schema["type"]]
    if options:
        return Union[tuple(_hint(option, defs) for option in options)]  # noqa: UP007 (a runtime value)
    kind = schema.get("type")
    if kind == "array" and "items" in schema:
        return list[_hint(schema["items"], defs)]  # type: ignore[misc]
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return dict[str, _hint(schema["additionalProperties"], defs)]  # type: ignore[misc]
    return _JSON_TYPES.get(kind, Any) if isinstance(kind, str) else Any


def _one_line(text: str) -> str:
    return " ".join(text.split())
