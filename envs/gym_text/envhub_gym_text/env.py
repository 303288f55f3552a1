"""Any gymnasium env with a text (ANSI) render or a small discrete observation, as a multi-turn text game.

Each turn the agent reads the state as text and replies with one action, by name or number; the reply
is parsed (the last action named in it counts), the gymnasium env steps once, and the env's own reward
for that step is the turn's reward, so the episode's reward is the env's return. A reply that names no
action plays the first action (the default) and is answered with the list of actions, so saying nothing
is never better than acting.
"""

from __future__ import annotations

import random
import re
from typing import Any, ClassVar

import gymnasium
from gymnasium import spaces

import envhub
from envhub.grading.numbers import integer
from envhub_gym_text.as_text import action_names, describe_state, rules_of
from envhub_gym_text.oracle import reference_policy

DEFAULT_STEPS = 100
"""Turns allowed when the gymnasium env sets no step limit of its own."""
_ANSI_HIGHLIGHT = re.compile(r"\x1b\[[0-9;]*m([^\x1b]*)\x1b\[0m")
_ANSI_CODE = re.compile(r"\x1b\[[0-9;]*m")


class UnsupportedGymEnv(ValueError):
    """The gymnasium env cannot be played as text: no discrete actions, or nothing to show as text."""


def text_renderable(env: gymnasium.Env[Any, Any]) -> str | None:
    """Why `env` cannot be played as text, or None when it can."""
    if not isinstance(env.action_space, spaces.Discrete):
        return f"its actions are {env.action_space}, not a Discrete set that a reply can name"
    small = isinstance(env.observation_space, spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary)
    if isinstance(env.observation_space, spaces.Tuple):
        small = all(isinstance(s, spaces.Discrete) for s in env.observation_space.spaces)
    if "ansi" not in env.metadata.get("render_modes", []) and not small:
        return f"it has no 'ansi' render mode and its observations ({env.observation_space}) are not discrete"
    return None


def plain_text(ansi: str) -> str:
    """An ANSI render without colour codes; highlighted cells (the agent, a target) marked `[x]`."""
    return _ANSI_CODE.sub("", _ANSI_HIGHLIGHT.sub(r"[\1]", ansi)).rstrip()


class GymText(envhub.MultiTurnEnv):
    """A gymnasium env played in text: the state each turn, one action per reply, the env's reward."""

    gym_id: ClassVar[str] = ""
    reference_reward: ClassVar[float | None] = None
    """The oracle's return is the game's (CliffWalking's best is -13; Blackjack and slippery lakes are
    chance): `envhub check` records its mean instead of holding it to 1.0."""

    def __init__(self, *, max_turns: int | None = None, **gym_kwargs: Any) -> None:
        probe = gymnasium.make(self.gym_id, **gym_kwargs)
        problem = text_renderable(probe.unwrapped)
        ansi = "ansi" in probe.metadata.get("render_modes", [])
        probe.close()
        if problem is not None:
            raise UnsupportedGymEnv(f"gymnasium's {self.gym_id} cannot be played as text: {problem}")
        self.gym = gymnasium.make(self.gym_id, render_mode="ansi" if ansi else None, **gym_kwargs)
        limit = self.gym.spec.max_episode_steps if self.gym.spec else None
        super().__init__(max_turns=max_turns if max_turns is not None else limit or DEFAULT_STEPS)
        space = self.gym.action_space
        assert isinstance(space, spaces.Discrete)
        self.first_action = int(space.start)
        self.entry_point = str(self.gym.spec.entry_point) if self.gym.spec else ""
        self.actions = action_names(self.entry_point) or _meanings(self.gym, int(space.n))
        self.gym_kwargs = gym_kwargs
        self.state: Any = None
        self.env_return = 0.0
        self.env_steps = 0
        self.invalid_replies = 0
        self.done = False

    def setup(self, rng: random.Random) -> str:
        self.state, _ = self.gym.reset(seed=rng.getrandbits(31))
        self.env_return, self.env_steps, self.invalid_replies, self.done = 0.0, 0, 0, False
        return (
            f"You are playing gymnasium's {self.gym_id}. {rules_of(self.entry_point)}\n\n"
            f"Actions: {self._menu()}. Reply with exactly one action per message, by name or number; "
            f"you have {self.max_turns} turns.\n\n{self._view()}"
        )

    def respond(self, text: str) -> envhub.Reply:
        action = self.parse_action(text)
        note = ""
        if action is None:
            # A reply without an action still plays one (BALROG's rule): when it cost a turn and no step,
            # saying nothing until the turns ran out returned 0, above CliffWalking's best (-13) and
            # Blackjack's expected return, so stalling beat playing.
            self.invalid_replies += 1
            action = self.first_action
            note = (
                f"No action found in your reply, so the default action {self.actions[0]} was played. "
                f"Reply with one of: {self._menu()}.\n"
            )
        self.state, reward, terminated, truncated, _ = self.gym.step(action)
        self.env_return += float(reward)
        self.env_steps += 1
        self.done = bool(terminated or truncated)
        ending = " The episode is over." if self.done else ""
        return envhub.Reply(
            text=f"{note}Reward: {float(reward):g}.{ending}\n\n{self._view()}",
            done=self.done,
            reward=float(reward),
        )

    def parse_action(self, text: str) -> int | None:
        """The last action the reply names (`right`, `2`, `Action: 2 (right)`), or None."""
        names = {name.lower(): i for i, name in enumerate(self.actions)}
        words = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
        for token in reversed(re.findall(rf"(?<![\w-])(-?\d+|{words})(?![\w-])", text.lower())):
            if token in names:
                return self.first_action + names[token]
            if re.fullmatch(r"-?\d+", token) and 0 <= integer(token) - self.first_action < len(self.actions):
                return int(token)  # in range, so a few digits
        return None

    @envhub.reward(weight=0.0)
    def episode_return(self) -> float:
        """Recorded: the env's return (already the reward, turn by turn)."""
        return self.env_return

    @envhub.reward(weight=0.0)
    def invalid_reply_count(self) -> float:
        """Recorded: replies that named no action."""
        return float(self.invalid_replies)

    def reference_action(self, messages: list[envhub.Message]) -> envhub.Action | None:
        """The optimal action by value iteration over the env's transition table (`P`), or the
        basic strategy for Blackjack; None for an env with neither."""
        policy = reference_policy(self.entry_point, self.gym_id, self.gym.unwrapped, self.gym_kwargs)
        action = None if policy is None else policy(self.state)
        return None if action is None else self.actions[action - self.first_action]

    def _menu(self) -> str:
        return ", ".join(f"{i + self.first_action} = {name}" for i, name in enumerate(self.actions))

    def _view(self) -> str:
        lines = []
        if self.gym.render_mode == "ansi":
            lines.append(plain_text(str(self.gym.render())))
        lines.append(describe_state(self.entry_point, self.gym.unwrapped, self.state))
        return "\n".join(line for line in lines if line)

    async def close(self) -> None:
        self.gym.close()


def _meanings(env: gymnasium.Env[Any, Any], n: int) -> list[str]:
    """Action names the env gives itself (Atari's `get_action_meanings`), else the numbers."""
    meanings = getattr(env.unwrapped, "get_action_meanings", None)
    if callable(meanings):
        names = [str(m).lower() for m in meanings()]
        if len(names) == n and len(set(names)) == n:
            return names
    return [str(i) for i in range(n)]


def gym_text_class(gym_id: str) -> type[GymText]:
    """A `GymText` subclass bound to one gymnasium id: what an entry point names."""
    doc = f"Gymnasium's {gym_id} as a multi-turn text game; the env's own reward, summed."
    return type(_identifier(gym_id), (GymText,), {"gym_id": gym_id, "__doc__": doc, "__module__": __name__})


def _identifier(gym_id: str) -> str:
    """`FrozenLake-v1` → `FrozenLake_v1`: the module attribute an entry point names."""
    return re.sub(r"\W", "_", gym_id)
