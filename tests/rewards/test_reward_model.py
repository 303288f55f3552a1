"""Reward models on a tiny local classifier: deterministic, batched, micro-batched, served over HTTP."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import envhub
from envhub.inference.tensor_thread import on_tensor_thread
from envhub.messages import Message
from envhub.rewards import HTTPRewardModel, LocalRewardModel, RewardModel, RewardModelError
from envhub.testing.reward_server import RewardServer

ITEMS: list[tuple[str | list[Message], str]] = [
    ("What is 512 + 37?", "549"),
    ("What is 512 + 37?", "The result is 549."),
    ("Start with 512; add 37 to it, then multiply it by 4.", "2196"),
    ([Message(role="system", content="Be brief."), Message(role="user", content="Hi?")], "Hello."),
    ("The quick brown fox", "jumps over the lazy dog"),
    ("What is the result?", "I do not know, sorry; the calculator tools did not answer."),
    ("0123456789", "42"),
]


async def one_by_one(model: RewardModel) -> list[float]:
    return [await model.score(prompt, answer) for prompt, answer in ITEMS]


def test_scores_are_deterministic_and_tell_answers_apart(reward_model_dir: Path) -> None:
    first = asyncio.run(one_by_one(LocalRewardModel(reward_model_dir)))
    second = asyncio.run(one_by_one(LocalRewardModel(reward_model_dir)))
    assert first == second
    assert len(set(first)) == len(first)


def test_a_batch_scores_as_one_by_one(reward_model_dir: Path) -> None:
    model = LocalRewardModel(reward_model_dir, batch_size=3)
    singles = asyncio.run(one_by_one(model))
    model.forward_passes = 0
    batched = asyncio.run(model.score_batch(ITEMS))
    assert batched == pytest.approx(singles, rel=1e-4, abs=1e-4)
    assert model.forward_passes == 3  # 7 conversations in batches of at most 3


@pytest.mark.parametrize(("batch_size", "passes"), [(8, 1), (4, 2), (1, 7)])
def test_concurrent_requests_are_micro_batched(reward_model_dir: Path, batch_size: int, passes: int) -> None:
    model = LocalRewardModel(reward_model_dir, batch_size=batch_size, max_wait=0.02)
    model.load()

    async def concurrently() -> list[float]:
        return list(await asyncio.gather(*(model.score(p, a) for p, a in ITEMS)))

    scores = asyncio.run(concurrently())
    assert model.forward_passes == passes
    assert scores == pytest.approx(asyncio.run(one_by_one(model)), rel=1e-4, abs=1e-4)


def test_loading_and_every_forward_pass_run_on_the_tensor_thread(reward_model_dir: Path) -> None:
    """One OpenMP team per process: a reward model beside a policy or a trainer starts no team of its own."""
    model = LocalRewardModel(reward_model_dir, batch_size=4, max_wait=0.02)
    model.load()
    threads: set[int] = set()
    model._model.register_forward_pre_hook(lambda *_: threads.add(threading.get_ident()))
    model.forward([[Message(role="user", content="Hi?"), Message(role="assistant", content="Hello.")]])
    asyncio.run(model.score_batch(ITEMS))
    assert threads == {on_tensor_thread(threading.get_ident)}


def test_the_chat_template_is_used_unless_turned_off(reward_model_dir: Path) -> None:
    messages = [Message(role="user", content="Hi?"), Message(role="assistant", content="Hello.")]
    templated = LocalRewardModel(reward_model_dir).render(messages)
    assert templated == "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
    plain = LocalRewardModel(reward_model_dir, chat_template=False).render(messages)
    assert plain == "user: Hi?\n\nassistant: Hello."


def test_a_classifier_with_several_labels_is_refused(reward_model_dir: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(reward_model_dir, tmp_path / "two-labels"))
    config = json.loads((copy / "config.json").read_text())
    config["id2label"] = {"0": "bad", "1": "good"}
    config["label2id"] = {"bad": 0, "good": 1}
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="a reward model has one"):
        LocalRewardModel(copy).load()
    with pytest.raises(ValueError, match="not a model directory"):
        LocalRewardModel(tmp_path / "missing")


class Preference(envhub.SingleTurnEnv):
    model: RewardModel

    def setup(self, rng: random.Random) -> str:
        return "What is 512 + 37?"

    @envhub.reward
    def exact(self, answer: str) -> float:
        return float(answer.strip() == "549")


def test_reward_model_scores_are_recorded_as_components(reward_model_dir: Path) -> None:
    model = LocalRewardModel(reward_model_dir)

    class Scored(Preference):
        preference = model.as_reward(weight=0.0)

    async def play() -> envhub.StepResult:
        env = Scored()
        await env.reset(seed=0)
        return await env.step("549")

    result = asyncio.run(play())
    expected = asyncio.run(model.score("What is 512 + 37?", "549"))
    assert result.info["reward_components"] == {"exact": 1.0, "preference": pytest.approx(expected)}
    assert result.reward == 1.0


@pytest.fixture(scope="module")
def reward_server(reward_model_dir: Path) -> Iterator[RewardServer]:
    with RewardServer.start(reward_model_dir, batch_size=8, max_wait=0.05) as running:
        yield running


@pytest.mark.slow
def test_http_scores_match_in_process_and_are_micro_batched(
    reward_model_dir: Path, reward_server: RewardServer
) -> None:
    local = asyncio.run(one_by_one(LocalRewardModel(reward_model_dir)))
    remote = HTTPRewardModel(reward_server.base_url, timeout=30)
    assert isinstance(remote, RewardModel)

    async def both() -> tuple[list[float], list[float]]:
        batch = await remote.score_batch(ITEMS)
        concurrent = await asyncio.gather(*(remote.score(p, a) for p, a in ITEMS))
        await remote.close()
        return batch, list(concurrent)

    before = reward_server.stats()["forward_passes"]
    batch, concurrent = asyncio.run(both())
    assert batch == pytest.approx(local, rel=1e-4, abs=1e-4)
    assert concurrent == pytest.approx(local, rel=1e-4, abs=1e-4)
    passes = reward_server.stats()["forward_passes"] - before
    assert passes < 1 + len(ITEMS)  # the 7 concurrent requests shared forward passes on the server


@pytest.mark.slow
def test_http_rejects_are_reward_model_errors(reward_server: RewardServer) -> None:
    async def score_then_close(remote: HTTPRewardModel) -> float:
        try:
            return await remote.score("q", "a")
        finally:
            await remote.close()

    remote = HTTPRewardModel(reward_server.base_url + "/nowhere", max_retries=0)
    with pytest.raises(RewardModelError, match="rejected the request with 404"):
        asyncio.run(score_then_close(remote))


def test_an_unreachable_server_is_retried_then_an_infrastructure_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    remote = HTTPRewardModel(f"http://127.0.0.1:{port}", max_retries=2, backoff=0.01)
    with pytest.raises(RewardModelError, match=r"could not be reached .* on all 3 attempts") as caught:
        asyncio.run(remote.score("q", "a"))
    assert isinstance(caught.value, envhub.InfrastructureError)


def test_the_server_validates_its_inputs() -> None:
    from envhub.testing.reward_server import read_inputs

    good = {"inputs": [[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]]}
    [(prompt, answer)] = read_inputs(json.dumps(good).encode())
    assert ([m.text for m in prompt], answer) == (["q"], "a")
    for body, problem in [
        (b"nope", "not JSON"),
        (b'{"texts": []}', "inputs"),
        (b'{"inputs": [[]]}', "non-empty list"),
        (b'{"inputs": [[{"role": "user", "content": "q"}]]}', "end with the assistant"),
    ]:
        with pytest.raises(ValueError, match=problem):
            read_inputs(body)


def test_importing_the_graders_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, envhub.rewards; print(any(m in sys.modules for m in ('torch', 'transformers')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# ---------------------------------------------------------------- the agent's text cannot fail scoring

BROKEN = "549\ud800"
"""What a tool call's JSON arguments `"549\\ud800"` decode to: a lone surrogate, which UTF-8 cannot carry."""


def test_text_utf8_cannot_carry_is_scored_and_spoils_no_batch(reward_model_dir: Path) -> None:
    """One such answer used to fail its whole micro-batch, every other episode's score with it."""
    model = LocalRewardModel(reward_model_dir, batch_size=4, max_wait=0.05)

    async def together() -> list[float]:
        scored = [model.score("What is 512 + 37?", BROKEN), *(model.score(p, a) for p, a in ITEMS[:3])]
        return list(await asyncio.gather(*scored))

    broken, *others = asyncio.run(together())
    assert broken == pytest.approx(asyncio.run(model.score("What is 512 + 37?", "549?")), rel=1e-4)
    assert others == pytest.approx(asyncio.run(one_by_one(model))[:3], rel=1e-4, abs=1e-4)


def test_an_over_long_answer_is_scored_on_its_middle_cut(reward_model_dir: Path) -> None:
    """Over 24 000 characters, the answer's middle is cut away before scoring, the same way every time."""
    model = LocalRewardModel(reward_model_dir)

    def answer(middle: str) -> str:  # 32 000 characters, which differ only around their middle
        return "the " * 3_750 + middle * 1_250 + "the " * 3_750

    fox, dog = asyncio.run(model.score_batch([("q", answer("fox ")), ("q", answer("dog "))]))
    assert fox == pytest.approx(dog, rel=1e-5, abs=1e-5)


@pytest.mark.slow
def test_http_scores_text_utf8_cannot_carry(reward_model_dir: Path, reward_server: RewardServer) -> None:
    remote = HTTPRewardModel(reward_server.base_url, timeout=30)

    async def score_then_close() -> float:
        try:
            return await remote.score("What is 512 + 37?", BROKEN)
        finally:
            await remote.close()

    expected = asyncio.run(LocalRewardModel(reward_model_dir).score("What is 512 + 37?", "549?"))
    assert asyncio.run(score_then_close()) == pytest.approx(expected, rel=1e-4, abs=1e-4)
