"""Wrappers `make()` puts around every env it builds, so the rules of an episode hold for any `Env`.

As in Gymnasium (`TimeLimit`, `OrderEnforcing` around what `gymnasium.make` returns), the turn limit,
the turn order and the recording's turns are kept here, once, rather than trusted to each class: an
`Env` subclass that never reads `max_turns` is still truncated at it, a driver that steps outside an
episode is told so, and every env's tape knows its turns and tool answers (`Recorder`).

A wrapper stands in for the env it wraps: attributes are read from and written to the wrapped env,
`isinstance` answers for the wrapped env's class (the way `unittest.mock`'s spec objects do), `fork`
forks the wrapped env and wraps each child in a copy of the wrapper. `unwrap(env)` gives the env itself,
for code that looks at its class (`type(unwrap(env))`).

Hand-written rather than a proxy library's object (`wrapt.ObjectProxy`): a wrapper must itself be an
`Env`, typed as one, and fork along with what it wraps.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

from envhub.core import Action, Env, EnvSpec, EpisodeStateError, Observation, StepResult
from envhub.messages import Message
from envhub.record import tape
from envhub.tools import ToolSpec

__all__ = ["OrderEnforcing", "Recorder", "TurnLimit", "Wrapper", "apply_wrappers", "recorded", "unwrap"]


class Wrapper(Env):
    """An `Env` around another: everything not overridden here is the wrapped env's."""

    _own: ClassVar[frozenset[str]] = frozenset({"env"})
    """Attributes kept on the wrapper itself; every other one is set on the wrapped env."""

    def __init__(self, env: Env) -> None:
        object.__setattr__(self, "env", env)

    env: Env

    @property
    def unwrapped(self) -> Env:
        """The env under every wrapper."""
        return unwrap(self.env)

    @property  # type: ignore[misc]  # isinstance answers for the wrapped env's class
    def __class__(self) -> type[Any]:
        return self.env.__class__

    def __getattr__(self, name: str) -> Any:
        if name == "env" or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)  # not set yet (a copy being built), or a protocol Python probes
        return getattr(self.env, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in type(self)._own:
            object.__setattr__(self, name, value)
        else:
            setattr(self.env, name, value)

    # The contract's attributes are defined on `Env` itself, so `__getattr__` never sees them.
    @property
    def spec(self) -> EnvSpec | None:
        return self.env.spec

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        self.env.spec = value

    @property
    def max_turns(self) -> int:
        return self.env.max_turns

    @max_turns.setter
    def max_turns(self, value: int) -> None:
        self.env.max_turns = value

    @property
    def reference_reward(self) -> float | None:  # type: ignore[override]
        return self.env.reference_reward

    @property
    def reset_options(self) -> dict[str, str] | None:  # type: ignore[override]
        return self.env.reset_options

    @property
    def forkable(self) -> bool | str:  # type: ignore[override]
        return self.env.forkable

    @property
    def tools(self) -> list[ToolSpec]:
        return self.env.tools

    def unavailable_reason(self) -> str | None:  # type: ignore[override]
        return self.env.unavailable_reason()

    def check_reset_options(self, options: dict[str, Any] | None) -> None:
        self.env.check_reset_options(options)

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        return await self.env.reset(seed=seed, options=options)

    async def step(self, action: Action) -> StepResult:
        return await self.env.step(action)

    async def close(self) -> None:
        await self.env.close()

    def reference_action(self, messages: list[Message]) -> Action | None:
        return self.env.reference_action(messages)

    async def fork(self, n: int = 1) -> list[Self]:
        """The wrapped env's children, each in a copy of this wrapper (its episode state included)."""
        return [self._around(child) for child in await self.env.fork(n)]

    async def __fork__(self, memo: dict[int, Any]) -> Self:
        """One child, for an env that holds this one as an attribute and is itself forked."""
        child = self._around(await self.env.__fork__(memo))
        memo[id(self)] = child
        return child

    def _around(self, env: Env) -> Self:
        """A copy of this wrapper around `env`."""
        copy = object.__new__(type(self))
        vars(copy).update(vars(self))
        object.__setattr__(copy, "env", env)
        return copy

    def __repr__(self) -> str:
        return repr(self.env)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its class and state: pickle's default refuses an object whose `__class__` is not
        its type."""
        return _rebuilt, (type(self), dict(vars(self)))


def _rebuilt(cls: type[Wrapper], state: dict[str, Any]) -> Wrapper:
    wrapper = object.__new__(cls)
    vars(wrapper).update(state)
    return wrapper


class TurnLimit(Wrapper):
    """Truncates the episode at the wrapped env's `max_turns` steps (Gymnasium's `TimeLimit`), whether or
    not the env counts turns itself; read on every step, so a later `env.max_turns = N` still holds."""

    _own = Wrapper._own | {"turns"}

    def __init__(self, env: Env) -> None:
        super().__init__(env)
        self.turns = 0
        """Steps since the last reset."""

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        observation, info = await self.env.reset(seed=seed, options=options)
        self.turns = 0
        return observation, info

    async def step(self, action: Action) -> StepResult:
        result = await self.env.step(action)
        self.turns += 1
        if self.turns >= self.env.max_turns and not result.terminated and not result.truncated:
            return result._replace(truncated=True)
        return result


class OrderEnforcing(Wrapper):
    """Refuses a step before the first reset or after the episode ended (`EpisodeStateError`): a bug in
    the driver, which an env that does not check would answer with nonsense (Gymnasium's
    `OrderEnforcing`, and also after the end)."""

    _own = Wrapper._own | {"running"}

    def __init__(self, env: Env) -> None:
        super().__init__(env)
        self.running = False
        """Reset, and neither terminated nor truncated since."""

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        self.running = False  # a reset that fails leaves no episode to step
        answer = await self.env.reset(seed=seed, options=options)
        self.running = True
        return answer

    async def step(self, action: Action) -> StepResult:
        if not self.running:
            raise EpisodeStateError(
                f"{self.env!r}: step() called with no episode running: call reset() first (episodes "
                "end when terminated or truncated is True)"
            )
        result = await self.env.step(action)
        if result.terminated or result.truncated:
            self.running = False
        return result


class Recorder(Wrapper):
    """Keeps the tape of a recorded or replayed episode (`envhub.record.tape`) in step with it: the calls
    reset makes belong to turn 0 and those of the k-th step to turn k, and what each tool call of an
    action answered is kept in that call's scope. With no tape running it passes every call through.

    The tape's one hook in an env's life, whatever the env is: the runner and a replay only start a
    tape, and the sandboxes record their own calls (`envhub.record.sandbox_calls`)."""

    _own = Wrapper._own | {"turns"}

    def __init__(self, env: Env) -> None:
        super().__init__(env)
        self.turns = 0
        """Steps since the last reset: the turn the next step's calls belong to, less one."""

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        self.turns = 0
        tape.mark_turn(0)
        return await self.env.reset(seed=seed, options=options)

    async def step(self, action: Action) -> StepResult:
        self.turns += 1
        tape.mark_turn(self.turns)
        result = await self.env.step(action)
        if isinstance(action, Message):
            tape.record_tool_answers(action, result.observation)
        return result


def apply_wrappers(env: Env) -> Env:
    """`env` as `make()` returns it: turn order enforced outside the turn limit, so a step after the
    limit's truncation is refused as well; the recorder innermost, so only steps the env takes are
    turns of its tape."""
    return OrderEnforcing(TurnLimit(Recorder(env)))


def recorded(env: Env) -> bool:
    """Whether a `Recorder` keeps the tape's turns for `env` (every env `make()` made)."""
    while isinstance(env, Wrapper):
        if isinstance(env, Recorder):
            return True
        env = env.env
    return False


def unwrap(env: Env) -> Env:
    """The env under every wrapper (the env itself when it has none)."""
    while isinstance(env, Wrapper):
        env = env.env
    return env
