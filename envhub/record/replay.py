"""Replay one stored episode: its actions against its recorded calls, with today's env and reward code.

Only a recording sealed with the user's recording key over this very episode is replayed
(`envhub.record.seal`). Nothing runs in a sandbox: every sandbox is a `ReplaySandbox`, and every command,
file, REPL snippet and random draw is answered from the recording (a grader's secret is derived again),
in order, scope by scope (see `envhub.record.tape`). The env must reach the recorded observations
turn by turn; the first turn where it does not (a call the recording does not hold, a different answer, an
ending in another place) is the divergence. The reward is whatever the current reward code makes of the
replayed episode, so a grader fix is applied to an old episode without rebuilding its sandboxes.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from envhub.core import Env, StepInfo
from envhub.messages import Message
from envhub.record import seal
from envhub.record import tape as tapes
from envhub.record.calls import RecordedCall
from envhub.record.stand_in import ReplaySandbox
from envhub.record.tape import Divergence
from envhub.records import Episode
from envhub.registration import make

DIFF_LINES = 12


class DivergenceReport(BaseModel):
    """Where the replay first departed from the recording, and how."""

    model_config = ConfigDict(frozen=True)

    turn: int
    """0: the reset; k: the k-th step."""
    what: str
    expected: str
    got: str

    @property
    def diff(self) -> str:
        """A short unified diff of expected against got."""
        lines = difflib.unified_diff(
            self.expected.splitlines(), self.got.splitlines(), "recorded", "replayed", lineterm="", n=1
        )
        shown = list(lines)
        cut = len(shown) - DIFF_LINES
        return "\n".join(shown[:DIFF_LINES] + ([f"... ({cut} more lines)"] if cut > 0 else []))


class ReplayReport(BaseModel):
    """One episode replayed: its divergence, if any, and its reward then and now."""

    model_config = ConfigDict(frozen=True)

    episode_id: str
    env_id: str
    turns: int
    """Turns replayed up to the end, or up to the divergence."""
    divergence: DivergenceReport | None = None
    recorded_reward: float
    recorded_components: dict[str, float]
    reward: float | None = None
    """The reward today's code gives the episode; None when it diverged before its end."""
    reward_components: dict[str, float] = {}
    turn_rewards: list[float] = []

    @property
    def changed_components(self) -> list[str]:
        names = dict.fromkeys([*self.recorded_components, *self.reward_components])
        return [n for n in names if self.recorded_components.get(n) != self.reward_components.get(n)]

    @property
    def reward_changed(self) -> bool:
        return self.reward is not None and (
            self.reward != self.recorded_reward or bool(self.changed_components)
        )


class NotRecorded(ValueError):
    """The episode was stored without its recording, so it cannot be replayed."""


async def replay_episode(
    episode: Episode,
    *,
    env_kwargs: dict[str, Any] | None = None,
    key: bytes | None = None,
    where: str = "",
) -> ReplayReport:
    """Replay `episode` on a fresh env of its id (made with `env_kwargs`, the batch's options).

    The recording must carry a MAC that matches the episode under the recording `key` (the user's by
    default); otherwise `seal.UnsealedRecording` names the episode (and `where`, its batch).
    """
    if episode.recording is None:
        raise NotRecorded(
            f"episode {episode.episode_id} has no recording; roll out with --record to replay episodes"
        )
    key = seal.load_key(create=False) if key is None else key
    recording = seal.verify(episode, env_kwargs or {}, key, where=where)
    secrets = seal.Secrets(key, recording.salt, episode.episode_id)
    tape = tapes.Tape(
        "replay",
        recording.calls,
        stand_in=lambda policy, backend: ReplaySandbox(policy, backend=backend),
        secrets=secrets.derive,
    )
    with tapes.using(tape):
        env = make(episode.env_id, **(env_kwargs or {}))
        try:
            return await _replay(env, episode, tape)
        finally:
            await env.close()


async def _replay(env: Env, episode: Episode, tape: tapes.Tape) -> ReplayReport:
    base: dict[str, Any] = {
        "episode_id": episode.episode_id,
        "env_id": episode.env_id,
        "recorded_reward": episode.reward,
        "recorded_components": episode.reward_components,
    }
    rewards: list[float] = []
    components: dict[str, float] = {}
    turn = 0
    try:
        observation, _ = await _guarded(env.reset(seed=episode.seed), 0)
        _same_messages(0, "the prompt", episode.prompt, observation)
        _all_made(tape, 0)
        for recorded in episode.turns:
            turn = recorded.index + 1
            result = await _guarded(env.step(recorded.action), turn)
            _same_messages(turn, "the observation", recorded.observation, result.observation)
            _all_made(tape, turn)
            rewards.append(result.reward)
            if (found := StepInfo.read(result.info).reward_components) is not None:
                components = found
            ended = result.terminated or result.truncated
            last = turn == len(episode.turns)
            if ended and not last:
                raise Divergence(
                    turn, "the episode ended here", f"{len(episode.turns)} turns", f"ended at turn {turn}"
                )
            if last and episode.error is None:
                _same_ending(turn, episode, result.terminated, result.truncated)
    except Divergence as stop:
        first = tape.divergence or stop
        return ReplayReport(**base, turns=max(first.turn, 0), divergence=_report(first))
    return ReplayReport(
        **base, turns=turn, reward=sum(rewards), reward_components=components, turn_rewards=rewards
    )


async def _guarded(awaitable: Any, turn: int) -> Any:
    """The env's answer; an exception it raises in the replay is a divergence at this turn."""
    try:
        return await awaitable
    except Exception as exc:
        raise Divergence(
            turn,
            "the env raised an error in the replay",
            "the recorded answer",
            f"{type(exc).__name__}: {exc}",
        ) from exc


def _same_messages(turn: int, what: str, recorded: list[Message], replayed: list[Message]) -> None:
    expected, got = _text(recorded), _text(replayed)
    if expected != got:
        raise Divergence(turn, f"{what} differs from the recorded one", expected, got)


def _same_ending(turn: int, episode: Episode, terminated: bool, truncated: bool) -> None:
    before = f"terminated={episode.terminated} truncated={episode.truncated}"
    now = f"terminated={terminated} truncated={truncated}"
    if before != now:
        raise Divergence(turn, "the episode ends differently", before, now)


def _all_made(tape: tapes.Tape, turn: int) -> None:
    left = tape.unanswered(turn)
    if left:
        raise Divergence(
            turn,
            f"the env no longer makes {len(left)} recorded call{'s' if len(left) > 1 else ''}",
            "\n".join(_call_text(c) for c in left[:3]),
            "no call",
        )


def _call_text(call: RecordedCall) -> str:
    where = "" if call.scope == "env" else f" ({call.scope})"
    return f"{call.kind} {call.method}{where} {json.dumps(call.input, sort_keys=True, default=str)[:300]}"


def _text(messages: list[Message]) -> str:
    """Messages as lines a diff can show: role, text, and tool calls."""
    lines = []
    for m in messages:
        lines.append(f"[{m.role}{' ' + m.name if m.name else ''}]")
        lines.extend(m.text.splitlines() or [""])
        lines.extend(f"-> {c.name}({c.arguments})" for c in m.tool_calls)
    return "\n".join(lines)


def _report(divergence: Divergence) -> DivergenceReport:
    return DivergenceReport(
        turn=divergence.turn, what=divergence.what, expected=divergence.expected, got=divergence.got
    )
