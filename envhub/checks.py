"""The arrival check: what every environment must show before the hub lists it as working.

`check(env_id)` makes the environment and plays it a little, the same way for every source: the same
seed must give the same first observation (on two environments, resetting their seeds in opposite
orders, so leftover state shows too); different seeds are counted, to say whether the seed picks the
task; the reference solution, where the env has one, must reach the full reward on every seed; a seeded
random baseline must be answered, never raised on, and its mean reward is the figure to beat; and one
episode written to the Parquet store must read back equal. `envhub check` prints the report and keeps
the last one per id on this machine (`save_report`), where `envhub info` finds it.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envhub.core import Env, EnvSpec, Observation
from envhub.policies import OraclePolicy, OraclePolicyError, Policy, RandomPolicy
from envhub.records import Episode
from envhub.registration import PluginImportError, registry
from envhub.rollout import RolloutLimits, rollout
from envhub.rollout.kwargs import check_env_kwargs
from envhub.settings import settings
from envhub.store import read_episodes
from envhub.wrappers import unwrap

__all__ = [
    "CHECKS",
    "ORACLE",
    "RANDOM",
    "RESET",
    "ROUND_TRIP",
    "SEEDED",
    "CheckReport",
    "CheckResult",
    "Status",
    "acheck",
    "check",
    "load_report",
    "reports_dir",
    "save_report",
]

Status = Literal["pass", "fail", "warn", "skip"]
"""`fail` fails the check; `warn` is worth a look but may be right (a one-task env); `skip`: not relevant."""

RESET, SEEDED, ORACLE, RANDOM, ROUND_TRIP = (
    "reset determinism",
    "seeds pick the task",
    "oracle reward",
    "random baseline",
    "store round trip",
)
CHECKS = (RESET, SEEDED, ORACLE, RANDOM, ROUND_TRIP)
"""The checks, in the order they run and are printed."""

_TOLERANCE = 1e-9


class CheckResult(BaseModel):
    """One check's outcome: its status, the figure it measured and, for anything but a pass, why."""

    model_config = ConfigDict(frozen=True)

    name: str
    status: Status
    figure: str = ""
    """What was measured, in words a table cell holds: `mean 1.00 (min 1.00) over 3 episodes`."""
    detail: str = ""
    """Why it failed or was skipped, and what to do."""
    value: float | None = None
    """The measured number, where there is one (a mean reward)."""


class CheckReport(BaseModel):
    """The arrival check of one environment id."""

    model_config = ConfigDict(frozen=True)

    env_id: str
    """The resolved id that was checked (`arithmetic` → `arithmetic-v0`)."""
    available: bool = True
    """False when the env cannot be played here (`Env.unavailable_reason`): nothing was checked."""
    unavailable_reason: str | None = None
    package: str | None = None
    package_version: str | None = None
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    seeds: int
    episodes: int
    checked_at: datetime
    results: list[CheckResult]

    @property
    def passed(self) -> bool:
        return self.available and not self.failures

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "fail"]

    def result(self, name: str) -> CheckResult:
        """The result of the check called `name` (one of `CHECKS`)."""
        for found in self.results:
            if found.name == name:
                return found
        raise KeyError(f"no check named {name!r}; the checks are: {', '.join(CHECKS)}")

    def summary(self) -> str:
        """One line for `envhub info` and the catalogue: the verdict and the two reward figures."""
        if not self.available:
            return f"unavailable: {self.unavailable_reason}"
        verdict = "passed" if self.passed else "FAILED " + ", ".join(r.name for r in self.failures)
        figures = [
            f"{label} {r.value:.2f}"
            for label, r in (("oracle", self.result(ORACLE)), ("random", self.result(RANDOM)))
            if r.value is not None
        ]
        return ", ".join([verdict, *figures])


def check(
    env_id: str,
    *,
    seeds: int = 3,
    episodes: int = 3,
    oracle_reward: float | None = None,
    env_kwargs: dict[str, Any] | None = None,
    time_limit: float = 600.0,
    on_check: Callable[[str], None] | None = None,
) -> CheckReport:
    """Run the arrival check of `env_id` (see the module's docstring); for callers without an event loop."""
    return asyncio.run(
        acheck(
            env_id,
            seeds=seeds,
            episodes=episodes,
            oracle_reward=oracle_reward,
            env_kwargs=env_kwargs,
            time_limit=time_limit,
            on_check=on_check,
        )
    )


async def acheck(
    env_id: str,
    *,
    seeds: int = 3,
    episodes: int = 3,
    oracle_reward: float | None = None,
    env_kwargs: dict[str, Any] | None = None,
    time_limit: float = 600.0,
    on_check: Callable[[str], None] | None = None,
) -> CheckReport:
    """The arrival check of `env_id`: `seeds` resets for determinism, `episodes` episodes (seeds 0, 1,
    ...) for the oracle and the random baseline, and one for the store. The oracle must score at least
    `oracle_reward` on each: by default what the env's class declares as `reference_reward` (1.0 when
    it declares nothing; None when its reference has no fixed reward, as in a slippery FrozenLake, so
    the mean is only recorded). `time_limit` bounds each reset and each episode, in seconds.

    An unknown id raises `UnknownEnvError`, as `make` does, and an option the env does not take raises
    `TypeError`, as `rollout` does; anything the environment itself gets wrong
    (its constructor, reset or step raising included) is a failed check in the report. An env that
    declares it cannot be played here (`Env.unavailable_reason`) is not played: the report says
    `unavailable` and why, and every check is skipped. `on_check(name)` is called as each check starts
    (`RESET` covers `SEEDED` too), for a progress display.
    """
    if seeds < 1 or episodes < 1:
        raise ValueError(f"need at least one seed and one episode, got seeds={seeds}, episodes={episodes}")
    spec = registry.spec(env_id)
    kwargs = dict(env_kwargs or {})
    check_env_kwargs(spec.id, kwargs)  # a mistyped option is the caller's mistake, not a failed check
    try:
        reason = registry.unavailable_reason(spec.id)
    except PluginImportError:  # the reset check makes it, and reports the import error as its failure
        reason = None
    if reason is not None:
        skipped = [CheckResult(name=name, status="skip", detail=f"unavailable: {reason}") for name in CHECKS]
        return _report(spec, kwargs, seeds, episodes, skipped, unavailable_reason=reason)
    started = on_check or (lambda name: None)
    limits = RolloutLimits(episode_timeout=time_limit, step_timeout=time_limit, retries=0)
    started(RESET)
    reset, seeded, declared = await _reset_checks(spec.id, kwargs, seeds, time_limit)
    if reset.status == "fail" and seeded.status == "skip":  # it could not be made or reset at all
        skipped = [
            CheckResult(name=name, status="skip", detail="the env could not be made or reset (see above)")
            for name in (ORACLE, RANDOM, ROUND_TRIP)
        ]
        return _report(spec, kwargs, seeds, episodes, [reset, seeded, *skipped])
    threshold = oracle_reward if oracle_reward is not None else declared.reference_reward
    started(ORACLE)
    oracle = (
        await _oracle_check(spec.id, kwargs, episodes, threshold, limits)
        if declared.has_reference
        else CheckResult(
            name=ORACLE,
            status="skip",
            detail="the env has no reference solution (it does not implement reference_action)",
        )
    )
    played = oracle.status != "skip"
    started(RANDOM)
    random = await _random_check(spec.id, kwargs, episodes, limits, threshold if played else None)
    player: Callable[[], Policy] = OraclePolicy if played else lambda: RandomPolicy(seed=0)
    started(ROUND_TRIP)
    round_trip = await _round_trip_check(spec.id, kwargs, player, limits)
    return _report(spec, kwargs, seeds, episodes, [reset, seeded, oracle, random, round_trip])


def _report(
    spec: EnvSpec,
    kwargs: dict[str, Any],
    seeds: int,
    episodes: int,
    results: list[CheckResult],
    *,
    unavailable_reason: str | None = None,
) -> CheckReport:
    return CheckReport(
        env_id=spec.id,
        available=unavailable_reason is None,
        unavailable_reason=unavailable_reason,
        package=spec.provenance.package,
        package_version=spec.provenance.package_version,
        env_kwargs=kwargs,
        seeds=seeds,
        episodes=episodes,
        checked_at=datetime.now(UTC),
        results=results,
    )


def _fingerprint(observation: Observation) -> str:
    """What two resets of one seed must agree on: every message's role, text, tool calls and images
    (by their bytes' hash; Playwright's screenshots hide the caret, so a page renders the same)."""
    return json.dumps(
        [
            {
                "role": m.role,
                "text": m.text,
                "tool_calls": [c.model_dump() for c in m.tool_calls],
                "images": [hashlib.sha256(image.data).hexdigest()[:16] for image in m.images],
            }
            for m in observation
        ],
        sort_keys=True,
    )


RENDER_NOISE = 2
"""The most one colour channel of a pixel may differ between two renders of one page: a browser
anti-aliases an element at a fractional position a level differently from one layout to the next."""


def _same_observation(a: tuple[str, list[bytes]], b: tuple[str, list[bytes]]) -> bool:
    """Equal fingerprints; or equal but for images that are the same picture up to render noise."""
    if a[0] == b[0]:
        return True
    if _without_images(a[0]) != _without_images(b[0]) or len(a[1]) != len(b[1]):
        return False
    return all(x == y or _same_picture(x, y) for x, y in zip(a[1], b[1], strict=True))


def _without_images(fingerprint: str) -> str:
    return json.dumps([{**m, "images": len(m["images"])} for m in json.loads(fingerprint)], sort_keys=True)


def _same_picture(a: bytes, b: bytes) -> bool:
    """Two encoded images of one size whose pixels differ by at most RENDER_NOISE per channel."""
    try:
        from PIL import Image, ImageChops  # the browser and vision extras bring Pillow
    except ImportError:
        return False
    try:
        with Image.open(io.BytesIO(a)) as first, Image.open(io.BytesIO(b)) as second:
            if first.size != second.size:
                return False
            difference = ImageChops.difference(first.convert("RGB"), second.convert("RGB"))
    except OSError:  # not an image Pillow reads: only equal bytes are the same
        return False
    bands: tuple[tuple[int, int], ...] = difference.getextrema()  # type: ignore[assignment]
    return all(high <= RENDER_NOISE for _, high in bands)


def _first_difference(a: str, b: str) -> str:
    """Where two fingerprints part, with a little context, for a failure message."""
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    start = max(at - 30, 0)
    return f"{a[start : at + 40]!r} vs {b[start : at + 40]!r}"


@dataclass(frozen=True)
class _Declared:
    """What an env's class says about its reference solution."""

    has_reference: bool
    """It implements `reference_action` (which may still return None for an id that has none)."""
    reference_reward: float | None = 1.0
    """The reward the reference earns on every episode; None: no fixed reward (a stochastic env)."""

    @classmethod
    def of(cls, env: Env) -> _Declared:
        declared = type(unwrap(env)).reference_reward
        return cls(
            has_reference=type(unwrap(env)).reference_action is not Env.reference_action,
            reference_reward=None if declared is None else float(declared),
        )


async def _reset_checks(
    env_id: str, kwargs: dict[str, Any], seeds: int, time_limit: float
) -> tuple[CheckResult, CheckResult, _Declared]:
    """Reset two environments through seeds 0..n-1, one forwards and one backwards, and compare; and
    read what the env declares about its reference solution."""
    order = list(range(seeds))
    try:
        forwards, declared = await _first_observations(env_id, kwargs, order, time_limit)
        backwards, _ = await _first_observations(env_id, kwargs, order[::-1], time_limit)
    except _ResetFailed as exc:
        reset = CheckResult(name=RESET, status="fail", detail=str(exc))
        seeded = CheckResult(name=SEEDED, status="skip", detail="no first observation to compare")
        return reset, seeded, _Declared(has_reference=False)
    differing = [s for s in order if not _same_observation(forwards[s], backwards[s])]
    if differing:
        seed = differing[0]
        reset = CheckResult(
            name=RESET,
            status="fail",
            figure=f"{len(differing)} of {seeds} seeds differ",
            detail=(
                f"reset(seed={seed}) gave two different first observations: "
                f"{_first_difference(forwards[seed][0], backwards[seed][0])}. Draw everything random from "
                "the seeded generator, and clear what the previous episode left"
            ),
        )
    else:
        reset = CheckResult(name=RESET, status="pass", figure=f"{seeds} seeds, twice each")
    distinct = len({fingerprint for fingerprint, _ in forwards.values()})
    if seeds < 2:
        seeded = CheckResult(name=SEEDED, status="skip", detail="needs at least 2 seeds")
    elif distinct > 1:
        seeded = CheckResult(
            name=SEEDED, status="pass", figure=f"{distinct} distinct tasks over {seeds} seeds"
        )
    else:
        seeded = CheckResult(
            name=SEEDED,
            status="warn",
            figure=f"1 task over {seeds} seeds",
            detail=(
                "every seed gave the same first observation: right for a one-task env or one whose seed "
                "only changes what happens later (FrozenLake's ice); otherwise the env ignores the seed"
            ),
        )
    return reset, seeded, declared


class _ResetFailed(Exception):
    """Making or resetting the environment raised; the message says which seed and what."""


async def _first_observations(
    env_id: str, kwargs: dict[str, Any], order: Sequence[int], time_limit: float
) -> tuple[dict[int, tuple[str, list[bytes]]], _Declared]:
    """The first observation's fingerprint and images per seed, from one environment reset in `order`,
    and what its class declares about its reference solution."""
    try:
        env = registry.make(env_id, **kwargs)
    except Exception as exc:
        raise _ResetFailed(f"making the env raised {type(exc).__name__}: {exc}") from exc
    seen: dict[int, tuple[str, list[bytes]]] = {}
    try:
        for seed in order:
            try:
                async with asyncio.timeout(time_limit):
                    observation, _ = await env.reset(seed=seed)
            except TimeoutError as exc:
                raise _ResetFailed(f"reset(seed={seed}) took longer than {time_limit:g} s") from exc
            except Exception as exc:
                raise _ResetFailed(f"reset(seed={seed}) raised {type(exc).__name__}: {exc}") from exc
            seen[seed] = (_fingerprint(observation), [image.data for m in observation for image in m.images])
    finally:
        await env.close()
    return seen, _Declared.of(env)


def _errors(played: Sequence[Episode]) -> str | None:
    """The first episode that ended in an error, in a sentence, or None."""
    for episode in played:
        if episode.error is not None:
            message = episode.error.message.strip().splitlines()
            return (
                f"the episode of seed {episode.seed} ended in {episode.error.kind}: "
                f"{message[0] if message else ''}"
            )
    return None


def _rewards_figure(played: Sequence[Episode]) -> tuple[str, float]:
    rewards = [e.reward for e in played]
    mean = statistics.fmean(rewards)
    return f"mean {mean:.2f} (min {min(rewards):.2f}) over {len(rewards)} episodes", mean


async def _play(
    env_id: str, kwargs: dict[str, Any], policy: Policy, episodes: int, limits: RolloutLimits
) -> list[Episode]:
    try:
        return (await rollout(env_id, policy, episodes=episodes, env_kwargs=kwargs, limits=limits)).episodes
    finally:
        await policy.close()


async def _oracle_check(
    env_id: str, kwargs: dict[str, Any], episodes: int, threshold: float | None, limits: RolloutLimits
) -> CheckResult:
    """The reference solution must reach `threshold` on every seed: an honest control. A class that
    serves many ids may have a reference for some only: one that never makes a first move is skipped."""
    played = await _play(env_id, kwargs, OraclePolicy(), episodes, limits)
    if all(_no_first_move(e) for e in played):
        detail = "the env has no reference solution for this id (reference_action returned None at once)"
        return CheckResult(name=ORACLE, status="skip", detail=detail)
    figure, mean = _rewards_figure(played)
    if (error := _errors(played)) is not None:
        return CheckResult(name=ORACLE, status="fail", figure=figure, value=mean, detail=error)
    if threshold is None:
        detail = "the env declares no fixed reward for its reference (reference_reward = None)"
        return CheckResult(name=ORACLE, status="pass", figure=figure, value=mean, detail=detail)
    low = [e for e in played if e.reward < threshold - _TOLERANCE]
    if low:
        worst = low[0]
        return CheckResult(
            name=ORACLE,
            status="fail",
            figure=figure,
            value=mean,
            detail=(
                f"the reference solution scored {worst.reward:g} on seed {worst.seed}, below "
                f"{threshold:g} (components: {worst.reward_components}); fix the reward or the "
                "reference_action, or declare the reward it earns as reference_reward"
            ),
        )
    return CheckResult(name=ORACLE, status="pass", figure=figure, value=mean)


def _no_first_move(episode: Episode) -> bool:
    """The oracle had nothing to play on the first turn: `reference_action` returned None."""
    error = episode.error
    return (
        error is not None
        and not episode.turns
        and error.kind == "policy_error"
        and error.message.startswith(f"{OraclePolicyError.__name__}:")
    )


async def _random_check(
    env_id: str,
    kwargs: dict[str, Any],
    episodes: int,
    limits: RolloutLimits,
    threshold: float | None,
) -> CheckResult:
    """Random actions must be answered, never raised on; their mean reward is the baseline figure."""
    played = await _play(env_id, kwargs, RandomPolicy(seed=0), episodes, limits)
    figure, mean = _rewards_figure(played)
    if (error := _errors(played)) is not None:
        detail = f"{error}; an env answers a malformed or wrong action as the agent's turn, never raises"
        return CheckResult(name=RANDOM, status="fail", figure=figure, value=mean, detail=detail)
    if threshold is not None and min(e.reward for e in played) >= threshold - _TOLERANCE:
        detail = "random actions scored the full reward on every episode: does the reward tell a solution?"
        return CheckResult(name=RANDOM, status="warn", figure=figure, value=mean, detail=detail)
    return CheckResult(name=RANDOM, status="pass", figure=figure, value=mean)


async def _round_trip_check(
    env_id: str, kwargs: dict[str, Any], player: Callable[[], Policy], limits: RolloutLimits
) -> CheckResult:
    """One episode stored as a batch folder must read back as the record that was played."""
    played: list[Episode] = []
    with tempfile.TemporaryDirectory(prefix="envhub-check-") as folder:
        out = Path(folder) / "batch"
        policy = player()
        try:
            await rollout(
                env_id,
                policy,
                episodes=1,
                env_kwargs=kwargs,
                limits=limits,
                out=out,
                on_episode=played.append,
            )
            stored = read_episodes(out)
        except Exception as exc:
            return CheckResult(
                name=ROUND_TRIP,
                status="fail",
                detail=f"storing one episode raised {type(exc).__name__}: {exc}",
            )
        finally:
            await policy.close()
    if len(stored) != 1 or len(played) != 1:
        detail = f"played {len(played)} episode(s), read back {len(stored)}"
        return CheckResult(name=ROUND_TRIP, status="fail", detail=detail)
    difference = _record_difference(played[0].model_dump(mode="json"), stored[0].model_dump(mode="json"))
    if difference is not None:
        detail = f"the stored episode differs from the one played at {difference}"
        return CheckResult(name=ROUND_TRIP, status="fail", detail=detail)
    ended = f"ended in {played[0].error.kind}" if played[0].error else f"{len(played[0].turns)} turn(s)"
    return CheckResult(name=ROUND_TRIP, status="pass", figure=f"1 episode ({ended}), equal")


def _record_difference(played: Any, stored: Any, path: str = "episode") -> str | None:
    """The first path at which two JSON-shaped records differ, with both values, or None."""
    if isinstance(played, dict) and isinstance(stored, dict):
        for key in sorted(set(played) | set(stored), key=str):
            found = _record_difference(played.get(key), stored.get(key), f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(played, list) and isinstance(stored, list) and len(played) == len(stored):
        for i, (a, b) in enumerate(zip(played, stored, strict=True)):
            found = _record_difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    if played != stored:
        return f"{path}: {str(played)[:80]!r} played, {str(stored)[:80]!r} stored"
    return None


def reports_dir() -> Path:
    """Where the last check of each id is kept: `$ENVHUB_CHECKS_DIR`, else the user's cache folder."""
    if (explicit := settings().checks_dir) is not None:
        return explicit
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "envhub" / "checks"


def _report_path(env_id: str) -> Path:
    return reports_dir() / f"{quote(env_id, safe='')}.json"


def save_report(report: CheckReport) -> Path:
    """Keep `report` as the last check of its id on this machine; written whole or not at all."""
    path = _report_path(report.env_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(report.model_dump_json(indent=2))
    partial.replace(path)
    return path


def load_report(env_id: str) -> CheckReport | None:
    """The last check of the resolved id `env_id` saved on this machine, or None if there is none (or it
    cannot be read: an older format is simply checked again)."""
    path = _report_path(env_id)
    try:
        return CheckReport.model_validate_json(path.read_text())
    except (OSError, ValidationError):
        return None
