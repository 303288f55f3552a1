"""Any envhub id as a SkyRL-Gym text env (package `skyrl-gym`), made through SkyRL-Gym's own registry.

    import skyrl_gym
    from envhub.integrations import skyrl as envhub_skyrl

    envhub_skyrl.register("arithmetic-v0")
    env = skyrl_gym.make("arithmetic-v0", env_config={}, extras={"seed": 3})
    prompt, info = env.init([])           # the env's task, tools described in the system prompt
    out = env.step(model_text)            # {"observations", "reward", "done", "metadata"}

SkyRL-Gym envs take text and give chat messages: the model's text is the envhub action (its
`<tool_call>` blocks are tool calls, `envhub.text_format`'s rule), tool schemas join the system prompt and
tool results come back as user turns of `<tool_response>` blocks (`envhub.text_format.tool_prompt`), the
roles every chat template renders. The task comes from the seed (`extras["seed"]`), so the dataset row's
prompt that SkyRL passes to `init` is not used; `extras["max_turns"]` overrides the env's turn limit.
"""

from __future__ import annotations

from typing import Any

import skyrl_gym  # type: ignore[import-untyped]
from skyrl_gym.envs.base_text_env import (  # type: ignore[import-untyped]
    BaseTextEnv,
    BaseTextEnvStepOutput,
)

from envhub.messages import Message, refuse_images
from envhub.registration import make
from envhub.sync_loop import build, run
from envhub.text_format import tool_prompt

ENTRY_POINT = f"{__name__}:EnvhubTextEnv"
"""A string, not the class, so SkyRL can write the spec as JSON and rebuild it in another process."""


def register(env_id: str, *, name: str | None = None, **make_kwargs: Any) -> None:
    """Register `env_id` in SkyRL-Gym's registry as `name` (the envhub id by default).

    Registering the same id with the same arguments again is a no-op; SkyRL refuses any other clash.
    """
    kwargs = {"env_id": env_id, "make_kwargs": make_kwargs}
    existing = skyrl_gym.registry.get(name or env_id)
    if existing is not None and existing.entry_point == ENTRY_POINT and existing.kwargs == kwargs:
        return
    skyrl_gym.register(id=name or env_id, entry_point=ENTRY_POINT, kwargs=kwargs)


class EnvhubTextEnv(BaseTextEnv):  # type: ignore[misc]
    """One envhub env per SkyRL trajectory (SkyRL makes an env per sample), driven on a background
    loop because SkyRL-Gym's interface is synchronous."""

    def __init__(
        self,
        env_config: Any = None,
        extras: dict[str, Any] | None = None,
        *,
        env_id: str,
        make_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        extras = extras or {}
        kwargs = dict(make_kwargs or {})
        if "max_turns" in extras:
            kwargs["max_turns"] = int(extras["max_turns"])
        self.env_id = env_id
        self.seed: int | None = extras.get("seed")
        self._env = build(make, env_id, **kwargs)
        self.max_turns = self._env.max_turns
        self._components: dict[str, float] = {}

    def init(self, prompt: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Reset to the seed; the conversation the model starts from, with the reset's info."""
        observation, info = run(self._env.reset(seed=self.seed))
        self.turns, self._components = 0, {}
        return self._chat(tool_prompt(observation, self._env.tools)), info

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """One model turn; `done` when envhub's episode terminated or was truncated."""
        self.turns += 1
        observation, reward, terminated, truncated, info = run(self._env.step(action))
        done = terminated or truncated
        if done:
            self._components = dict(info.get("reward_components") or {})
        return BaseTextEnvStepOutput(
            observations=self._chat(tool_prompt(observation, [])), reward=reward, done=done, metadata=info
        )

    def get_metrics(self) -> dict[str, Any]:
        """The finished episode's reward components (SkyRL averages them over episodes)."""
        return dict(self._components)

    def close(self) -> None:
        run(self._env.close())

    def _chat(self, messages: list[Message]) -> list[dict[str, Any]]:
        """SkyRL-Gym's messages carry text: an image would be dropped, and the model asked about a
        picture it never saw, so an observation with one is refused instead."""
        refuse_images(
            messages, sender=f"{self.env_id}'s observation", reader="SkyRL-Gym text envs carry text only"
        )
        return [{"role": m.role, "content": m.text} for m in messages]
