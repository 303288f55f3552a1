"""`verifiers:MODULE`: an installed verifiers (v1) environment under envhub's contract.

verifiers finds an environment by importing the module its id names; the module exports a `vf.Taskset`
(the tasks: prompts, tools, `@vf.reward`/`@vf.stop` hooks) and optionally a `vf.Env` whose `run()` drives
a multi-turn exchange. envhub builds them with verifiers' own loaders and runs the env's own `run()`;
the agent seat is the envhub driver (see `seat`). reset(seed) plays task `seed % len(tasks)`; a step
answers one model call; the episode ends when `run()` returns, and its reward is the trace's, the
weighted sum of the task's rewards as verifiers scores it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
from typing import TYPE_CHECKING, Any, ClassVar

from envhub.core import (
    Action,
    EpisodeStateError,
    InfrastructureError,
    MalformedAction,
    Observation,
    ResetInfo,
    StepInfo,
    StepResult,
    parse_action,
)
from envhub.core import Env as BaseEnv
from envhub.integrations.verifiers.seat import Channel, PolicySeat
from envhub.integrations.verifiers.toolsets import ServedToolsets
from envhub.messages import user
from envhub.tools import ToolSpec

if TYPE_CHECKING:
    from verifiers.v1 import Env, Episode, Task, Toolset, Trace

_OWN_USERS = ("user_sim", "agentic_judge", "shared_agentic_judge", "best_of_n")
"""verifiers' built-in envs whose `run()` calls a model of their own (a simulated user, a judge agent)."""


class VerifiersError(RuntimeError):
    """The verifiers environment itself failed (its `run()`, a task hook, a reward): a bug in that env."""


class VerifiersEnv(BaseEnv):
    """One verifiers environment, its agent seat played by the envhub driver."""

    reference_reward: ClassVar[float | None] = None  # verifiers tasks carry no reference solution

    def __init__(self, module: str, *, max_turns: int | None = None, **taskset: Any) -> None:
        import verifiers.v1 as vf

        if max_turns is not None:
            if max_turns < 1:
                raise ValueError(f"max_turns must be at least 1, got {max_turns}")
            self.max_turns = max_turns
        self.module = module
        config = vf.resolve_env_config({"taskset": {"id": module, **taskset}})
        self.vf_env: Env[Any] = vf.environment_class(module)(config)
        _check_in_scope(self.vf_env)
        self._tasks = self.vf_env.taskset
        self._finite: list[Task[Any, Any, Any]] | None = list(self._tasks) if self._tasks.bounded else None
        if self._finite == []:
            raise ValueError(f"verifiers env {module!r} loaded no tasks; check its taskset options")
        self._shared: list[Toolset[Any, Any]] = self._tasks.toolsets(self._tasks.config)
        self._shared_ready = False
        self._tools: list[ToolSpec] = []
        self._driver: asyncio.Task[Episode] | None = None
        self._channel = Channel()
        self._turn = 0

    @property
    def tools(self) -> list[ToolSpec]:
        """The tools of the current episode, named as verifiers' harness names them (`<server>_<tool>`)."""
        return list(self._tools)

    def task(self, seed: int) -> Task[Any, Any, Any]:
        """The task `seed` plays: row `seed % len` of a finite taskset, the `seed`-th of an infinite one."""
        if self._finite is not None:
            return self._finite[seed % len(self._finite)]
        return next(itertools.islice(iter(self._tasks), seed, None))

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        self.check_reset_options(options)  # verifiers' tasks are chosen by the seed alone
        await self._stop_driver()
        seed = 0 if seed is None else seed
        task = self.task(seed)
        if not self._shared_ready:
            for toolset in self._shared:
                await toolset.setup()
            self._shared_ready = True
        self._tools = await ServedToolsets([*self._shared, *task.toolsets(task.config)]).specs()
        self._channel = Channel()
        self._turn = 0
        self._driver = asyncio.create_task(self._run_episode(task))
        observation = await self._next_call()
        if observation is None:
            episode = await self._finished()
            raise VerifiersError(
                f"verifiers env {self.module!r} ended the episode before asking the agent anything"
                f"{_errors(episode)}"
            )
        info = {"seed": seed, "task": task.data.idx, "tools": [t.name for t in self._tools]}
        return observation, ResetInfo.read(info).as_info()

    async def step(self, action: Action) -> StepResult:
        if self._driver is None:
            raise EpisodeStateError(
                "step() called with no episode running: call reset() first (episodes end when "
                "terminated or truncated is True)"
            )
        self._turn += 1
        info: dict[str, Any] = {"turn": self._turn}
        try:
            message = parse_action(action)
        except MalformedAction as exc:
            info["error"] = {"kind": "malformed_action", "message": str(exc)}
            if self._turn < self.max_turns:
                return StepResult([user(f"Error: {exc}")], 0.0, False, False, info)
            await self._channel.replies.put(None)
        else:
            await self._channel.replies.put(message)
        observation = await self._next_call()
        if observation is not None and self._turn >= self.max_turns:
            await self._channel.replies.put(None)  # out of turns: the seat stops the rollout
            observation = await self._next_call()
        if observation is not None:
            return StepResult(observation, 0.0, False, False, info)
        return self._final(await self._finished(), info)

    async def close(self) -> None:
        await self._stop_driver()
        for toolset in self._shared:
            with contextlib.suppress(Exception):
                await toolset._exit_stack.aclose()

    async def _run_episode(self, task: Task[Any, Any, Any]) -> Episode:
        """verifiers' `Env.run_episode`, with the policy seat in place of the harness agents."""
        from verifiers.v1 import Agents, EnvInfo, Episode, TraceTask

        env = self.vf_env
        episode = Episode(
            env=EnvInfo(id=env.config.env_id),
            task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        )
        agents = Agents(
            env.config,
            lambda name, config: PolicySeat(config, self._channel, self._shared, episode.traces),
        )
        await env.setup(agents)
        await env.run(task, agents)
        if not episode.traces:
            raise VerifiersError(f"{type(env).__name__}.run() ran no agent; every episode needs one")
        await env.finalize(task, episode)
        episode.ok = all(trace.ok for trace in episode.traces)
        return episode

    async def _next_call(self) -> Observation | None:
        """The next model call's observation, or None once the env's `run()` has returned."""
        assert self._driver is not None
        call = asyncio.ensure_future(self._channel.calls.get())
        done, _ = await asyncio.wait({call, self._driver}, return_when=asyncio.FIRST_COMPLETED)
        if call in done:
            return call.result()
        call.cancel()
        return None

    async def _finished(self) -> Episode:
        """The ended episode; a failure of the env's own code is raised as the env's error."""
        assert self._driver is not None
        driver, self._driver = self._driver, None
        try:
            episode = await driver
        except Exception as exc:
            raise VerifiersError(
                f"verifiers env {self.module!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
        failed = [t.last_error for t in episode.traces if not t.ok and t.last_error is not None]
        if failed:
            kinds = {error.type for error in failed}
            error = InfrastructureError if kinds & {"SandboxError", "ToolsetError"} else VerifiersError
            raise error(f"verifiers env {self.module!r} failed: {failed[0].type}: {failed[0].message}")
        return episode

    def _final(self, episode: Episode, info: dict[str, Any]) -> StepResult:
        """The last step: the traces' weighted reward, each reward's score by name, and why it stopped."""
        traces: list[Trace] = list(episode.traces)
        components = {
            name: reward.score
            for trace in traces
            for name, reward in trace.rewards.items()
            if reward is not None
        }
        info["reward_components"] = components
        info["stop_condition"] = ",".join(str(t.stop_condition) for t in traces)
        metrics = {
            name: value for trace in traces for name, value in trace.metrics.items() if value is not None
        }
        if metrics:
            info["metrics"] = metrics
        truncated = any(trace.stop_condition == "max_turns" for trace in traces)
        reward = sum(trace.reward for trace in traces)
        return StepResult([], reward, not truncated, truncated, StepInfo.read(info).as_info())

    async def _stop_driver(self) -> None:
        if self._driver is None:
            return
        driver, self._driver = self._driver, None
        driver.cancel()
        with contextlib.suppress(BaseException):
            await driver


def _check_in_scope(env: Env[Any]) -> None:
    """Refuse, naming why, what needs verifiers' sandboxes or a model on the env's side."""
    from verifiers.v1 import Task
    from verifiers.v1.configs.agent import agent_config_fields

    name = type(env).__name__
    module = type(env).__module__
    if any(module.startswith(f"verifiers.v1.envs.{own}") for own in _OWN_USERS):
        raise NotImplementedError(
            f"{name} calls a model of its own at rollout time (a simulated user or a judge agent); "
            "envhub plays only the agent's seat, so run it with verifiers' own `vf-eval`"
        )
    seats = agent_config_fields(env.config)
    if len(seats) != 1:
        raise NotImplementedError(
            f"{name} seats {len(seats)} agents ({', '.join(seats)}); envhub plays one agent, so only "
            "single-agent verifiers envs run under it"
        )
    task_cls: type[Task[Any, Any, Any]] = type(env.taskset).task_type()
    if task_cls.NEEDS_CONTAINER:
        raise NotImplementedError(
            f"{task_cls.__name__} needs a container (NEEDS_CONTAINER); envhub cannot run it"
        )
    for hook in ("setup", "finalize", "stage_verifier"):
        if getattr(task_cls, hook) is not getattr(Task, hook):
            raise NotImplementedError(
                f"{task_cls.__name__}.{hook} works on verifiers' runtime (a sandbox box), which envhub does "
                "not start; only tasks without runtime hooks run under envhub"
            )
    task = next(iter(env.taskset), None)
    if task is None:
        return
    for kind in ("reward", "metric", "stop"):
        for fn in task.hooks(kind):
            if "runtime" in inspect.signature(fn).parameters:
                raise NotImplementedError(
                    f"the {kind} {fn.__name__!r} of {task_cls.__name__} reads verifiers' runtime "
                    "(a sandbox), which envhub does not start"
                )
    _check_judges(task)


def _check_judges(task: Task[Any, Any, Any]) -> None:
    """A judge reward needs a model endpoint; without its key, verifiers would call it unauthenticated."""
    import os

    for judge in task.config.judges:
        if not os.environ.get(judge.api_key_var):
            raise ValueError(
                f"the judge {judge.name or judge.id!r} scores with a model at {judge.base_url}, and "
                f"${judge.api_key_var} is not set: export it (or point the judge at another endpoint "
                "with the taskset option task={'judges': [{'id': ..., 'base_url': ..., 'api_key_var': ...}]})"
            )


def _errors(episode: Episode) -> str:
    errors = [f"{e.type}: {e.message}" for e in episode.errors]
    errors += [f"{t.last_error.type}: {t.last_error.message}" for t in episode.traces if t.last_error]
    return f" ({'; '.join(errors)})" if errors else ""
