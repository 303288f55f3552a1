"""`envhub check`: first-party families pass their arrival check, and each kind of broken env fails it
with the failing check named, on the command line and in the library's report."""

from __future__ import annotations

import io
import os
import random
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

import envhub
from envhub.checks import ORACLE, RANDOM, RESET, ROUND_TRIP, SEEDED, check, load_report
from envhub.cli import app
from envhub.messages import ImagePart, Message, TextPart

runner = CliRunner()


class NoReference(envhub.SingleTurnEnv):
    """Say the seeded word back; no reference solution, so the oracle check does not apply."""

    word = ""

    def setup(self, rng: random.Random) -> str:
        self.word = f"w{rng.randint(0, 10**6)}"
        return f"Reply with {self.word} only."

    @envhub.reward
    def exact(self, answer: str) -> float:
        return float(answer.strip() == self.word)


class Echo(NoReference):
    """The same with its reference solution: a correct env, the base of the broken ones below."""

    def reference_action(self, messages: list[Message]) -> envhub.Action | None:
        return self.word


class UnseededReset(Echo):
    """Draws its task from the operating system, not from the seed."""

    def setup(self, rng: random.Random) -> str:
        return super().setup(random.Random(random.SystemRandom().getrandbits(64)))


class LeftoverState(Echo):
    """Each reset's prompt depends on how many episodes this env has played before."""

    played = 0

    def setup(self, rng: random.Random) -> str:
        self.played += 1
        return f"{super().setup(rng)} (episode {self.played})"


class WrongOracle(Echo):
    """The reference solution answers something the reward does not accept."""

    def reference_action(self, messages: list[Message]) -> envhub.Action:
        return self.word.upper()


class RaisesOnWrongAnswers(Echo):
    """Raises out of its reward instead of scoring a wrong answer 0: the contract says answer, never raise."""

    @envhub.reward
    def exact(self, answer: str) -> float:
        if answer.strip() != self.word:
            raise RuntimeError(f"cannot score {answer!r}")
        return 1.0


@pytest.fixture(autouse=True)
def checks_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Saved reports go to a fresh folder, never the user's cache."""
    folder = tmp_path / "checks"
    monkeypatch.setenv("ENVHUB_CHECKS_DIR", str(folder))
    return folder


def registered(env_id: str, cls: type[envhub.Env]) -> str:
    envhub.register(env_id, cls, override=True)
    return env_id


@pytest.mark.parametrize("env_id", ["arithmetic", "countdown", "code-single"])
def test_first_party_envs_pass_with_the_oracle_at_full_reward(env_id: str) -> None:
    report = check(env_id, seeds=3, episodes=3)
    assert report.passed, report.failures
    assert report.env_id == f"{env_id}-v0"
    for name in (RESET, SEEDED, ORACLE, RANDOM, ROUND_TRIP):
        assert report.result(name).status == "pass", report.result(name)
    assert report.result(ORACLE).value == 1.0
    random_reward = report.result(RANDOM).value
    assert random_reward is not None and random_reward < 1.0


def test_the_command_prints_the_table_and_keeps_the_report(checks_dir: Path) -> None:
    result = runner.invoke(app, ["check", "countdown", "--episodes", "2"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for expected in ("countdown-v0", RESET, ORACLE, "mean 1.00 (min 1.00) over 2 episodes", ROUND_TRIP):
        assert expected in result.output
    saved = load_report("countdown-v0")
    assert saved is not None and saved.passed and saved.episodes == 2
    assert list(checks_dir.iterdir()) == [checks_dir / "countdown-v0.json"]


def test_a_correct_test_env_passes() -> None:
    """The control for the broken envs below: they differ from this one in one method each."""
    result = runner.invoke(app, ["check", registered("check-echo-v0", Echo)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output


def test_an_unseeded_reset_fails_naming_the_check() -> None:
    env_id = registered("check-unseeded-v0", UnseededReset)
    result = runner.invoke(app, ["check", env_id], env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    assert f"failed: {env_id}: {RESET}" in result.output
    assert "reset(seed=0) gave two different first observations" in result.output


def test_state_left_by_the_previous_episode_fails_reset_determinism() -> None:
    report = check(registered("check-leftover-v0", LeftoverState), seeds=3, episodes=1)
    assert [r.name for r in report.failures] == [RESET]
    assert report.result(RESET).figure == "2 of 3 seeds differ"  # seed 1 is reset second both ways


def test_an_oracle_scoring_zero_fails_naming_the_check() -> None:
    env_id = registered("check-wrong-oracle-v0", WrongOracle)
    result = runner.invoke(app, ["check", env_id, "--no-save"], env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    assert f"failed: {env_id}: {ORACLE}" in result.output
    detail = check(env_id, episodes=2).result(ORACLE).detail
    assert detail.startswith("the reference solution scored 0 on seed 0, below 1"), detail
    assert "{'exact': 0.0}" in detail


def test_an_env_raising_on_random_actions_fails_the_random_baseline() -> None:
    report = check(registered("check-raises-v0", RaisesOnWrongAnswers), episodes=2)
    assert [r.name for r in report.failures] == [RANDOM]
    assert "ended in env_error: RuntimeError: cannot score" in report.result(RANDOM).detail


def test_an_env_without_reference_skips_the_oracle_and_stores_a_random_episode() -> None:
    report = check(registered("check-no-reference-v0", NoReference), episodes=2)
    assert report.passed, report.failures
    assert report.result(ORACLE).status == "skip"
    assert report.result(ROUND_TRIP).status == "pass"
    assert report.summary() == "passed, random 0.00"


def test_one_task_for_every_seed_is_a_warning_not_a_failure() -> None:
    report = check("guess-number", episodes=1)  # the secret differs per seed, the prompt does not
    assert report.passed, report.failures
    assert report.result(SEEDED).status == "warn"


def test_an_unknown_id_fails_before_any_env_is_checked(checks_dir: Path) -> None:
    result = runner.invoke(app, ["check", "countdown", "arithmatic"])
    assert result.exit_code == 2, result.output
    assert "no environment 'arithmatic' is registered" in result.output
    assert "countdown-v0" not in result.output.split("error:")[0]
    assert not checks_dir.exists()


class FailsToStart(Echo):
    """Its constructor raises, as an env whose data is missing does."""

    def __init__(self) -> None:
        raise FileNotFoundError("the task data is not here: pass path=FOLDER")


def test_an_env_that_cannot_be_made_fails_once_and_skips_the_rest() -> None:
    report = check(registered("check-fails-to-start-v0", FailsToStart), episodes=1)
    assert [r.name for r in report.failures] == [RESET]
    assert report.result(RESET).detail == (
        "making the env raised FileNotFoundError: the task data is not here: pass path=FOLDER"
    )
    assert [r.status for r in report.results[1:]] == ["skip"] * 4


class FlickeringImage(envhub.Env):
    """Its first observation's text is seeded, but the image beside it is noise on every reset."""

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[envhub.Observation, dict[str, Any]]:
        noise = ImagePart(data=os.urandom(16))
        return [Message(role="user", content=[TextPart(text=f"Task {seed}: describe it."), noise])], {}

    async def step(self, action: envhub.Action) -> envhub.StepResult:
        return envhub.StepResult([], 0.0, True, False, {})


def test_images_that_differ_on_the_same_seed_fail_reset_determinism() -> None:
    report = check(registered("check-flicker-v0", FlickeringImage), episodes=1)
    assert [r.name for r in report.failures] == [RESET]
    assert report.result(RESET).figure == "3 of 3 seeds differ"


def png(shade: int) -> bytes:
    """A 20x10 grey picture whose one corner pixel has the given shade."""
    from PIL import Image

    picture = Image.new("RGB", (20, 10), (230, 230, 230))
    picture.putpixel((0, 0), (shade, shade, shade))
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()


class RenderNoise(envhub.Env):
    """A seeded page whose screenshot anti-aliases one pixel a level differently on every other render
    (6 seeds forwards and backwards: each seed's two renders differ)."""

    renders = 0

    def render(self, shades: tuple[int, int]) -> bytes:
        self.renders += 1
        return png(shades[self.renders % 2])

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[envhub.Observation, dict[str, Any]]:
        shot = ImagePart(data=self.render((230, 231)))
        return [Message(role="user", content=[TextPart(text=f"Task {seed}: click it."), shot])], {}

    async def step(self, action: envhub.Action) -> envhub.StepResult:
        return envhub.StepResult([], 0.0, True, False, {})


class ChangedPicture(RenderNoise):
    """The same text each reset, but a visibly different picture: a seed that does not fix the page."""

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[envhub.Observation, dict[str, Any]]:
        shot = ImagePart(data=self.render((0, 255)))
        return [Message(role="user", content=[TextPart(text=f"Task {seed}: click it."), shot])], {}


def test_render_noise_in_a_screenshot_is_not_a_different_observation() -> None:
    report = check(registered("check-render-noise-v0", RenderNoise), seeds=6, episodes=1)
    assert report.result(RESET).status == "pass", report.result(RESET).detail
    changed = check(registered("check-changed-picture-v0", ChangedPicture), seeds=6, episodes=1)
    assert changed.result(RESET).status == "fail"


class SomeIdsHaveNoReference(Echo):
    """A class serving many ids, with a reference solution for some: this one has none."""

    def reference_action(self, messages: list[Message]) -> envhub.Action | None:
        return None


def test_an_id_whose_reference_never_moves_skips_the_oracle() -> None:
    report = check(registered("check-some-reference-v0", SomeIdsHaveNoReference), episodes=2)
    assert report.passed, report.failures
    assert report.result(ORACLE).status == "skip"
    assert "no reference solution for this id" in report.result(ORACLE).detail
    assert report.result(ROUND_TRIP).figure == "1 episode (1 turn(s)), equal"  # played by the random policy


class Scored(Echo):
    """A game score, not a success rate: the reference earns 5 on every episode."""

    reference_reward: ClassVar[float | None] = 5.0

    @envhub.reward
    def exact(self, answer: str) -> float:
        return 5.0 * (answer.strip() == self.word)


class Overclaimed(Scored):
    reference_reward = 6.0


class Stochastic(Scored):
    reference_reward = None


def test_the_declared_reference_reward_is_the_bar() -> None:
    assert check(registered("check-scored-v0", Scored), episodes=2).result(ORACLE).status == "pass"
    overclaimed = check(registered("check-overclaimed-v0", Overclaimed), episodes=2)
    assert [r.name for r in overclaimed.failures] == [ORACLE]
    assert "scored 5 on seed 0, below 6" in overclaimed.result(ORACLE).detail
    stochastic = check(registered("check-stochastic-v0", Stochastic), episodes=2).result(ORACLE)
    assert stochastic.status == "pass" and "reference_reward = None" in stochastic.detail
    result = runner.invoke(app, ["check", "check-scored-v0", "--oracle-reward", "7", "--no-save"])
    assert result.exit_code == 1 and f"failed: check-scored-v0: {ORACLE}" in result.output
