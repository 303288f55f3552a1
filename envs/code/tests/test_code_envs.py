"""envhub-code: every built-in task is solvable by its reference, grading is exact, the REPL env works."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import envhub_code.envs
import pytest
from envhub_code import CodeRepl, CodeSingle, builtin_tasks, extract_code, load_tasks

import envhub
from envhub.grading import GradeReport, HiddenTest, grade_python
from envhub.grading._grader import same
from envhub.messages import Message, ToolCall
from envhub.policies import OraclePolicy, ScriptedPolicy
from envhub.rollout import run_episode


def test_entry_points_are_discovered() -> None:
    for env_id, cls in (("code-single-v0", CodeSingle), ("code-repl-v0", CodeRepl)):
        env = envhub.make(env_id)
        assert isinstance(env, cls)
        assert env.spec is not None and env.spec.provenance.package == "envhub-code"


def test_builtin_set_is_fixed_distinct_and_split() -> None:
    tasks = builtin_tasks()
    assert len(tasks) >= 100
    assert len({t.id for t in tasks}) == len(tasks)
    assert len({t.statement for t in tasks}) == len(tasks)
    assert all(len(t.public_tests) == 3 and len(t.hidden_tests) == 8 for t in tasks)
    train, test = load_tasks(split="train"), load_tasks(split="test")
    assert len(train) + len(test) == len(tasks)
    assert not {t.id for t in train} & {t.id for t in test}
    assert {t.id.rsplit("-", 1)[0] for t in test} == {t.id.rsplit("-", 1)[0] for t in tasks}


async def test_oracle_scores_one_on_every_builtin_task() -> None:
    """The reference solution passes every hidden and public test of all built-in tasks."""
    gate = asyncio.Semaphore(6)

    async def play(task_id: str) -> tuple[str, float, dict[str, float]]:
        async with gate:
            env = CodeSingle(task=task_id)
            await env.reset(seed=0)
            result = await env.step(env.reference_action(env.messages))
            assert result.terminated
            return task_id, result.reward, result.info["reward_components"]

    played = await asyncio.gather(*(play(t.id) for t in builtin_tasks()))
    assert len(played) == len(builtin_tasks())
    for task_id, reward, components in played:
        assert reward == 1.0, (task_id, components)
        assert components == {
            "all_passed": 1.0,
            "passed_fraction": 1.0,
            "public_passed": 1.0,
            "grade_valid": 1.0,
        }


async def test_seeded_draws_and_task_options() -> None:
    env = CodeSingle(split="test")
    prompts = []
    for seed in (3, 3, 4, 5, 6):
        observation, _ = await env.reset(seed=seed)
        prompts.append(observation[-1].text)
    assert prompts[0] == prompts[1]
    assert len(set(prompts[1:])) > 1
    await env.reset(seed=0, options={"task": "rotate-04"})
    assert env.task.id == "rotate-04"
    assert "Examples:" in env.messages[-1].text and "rotate(" in env.messages[-1].text
    assert CodeSingle(task="chunks-01").fixed_task == "chunks-01"
    with pytest.raises(ValueError, match="no task 'nope-01'"):
        CodeSingle(task="nope-01")
    with pytest.raises(ValueError, match="source must be one of"):
        CodeSingle(source="apps")
    with pytest.raises(ValueError, match="needs path"):
        CodeSingle(source="mbpp")


async def test_a_partly_wrong_solution_gets_the_exact_fraction() -> None:
    task = next(t for t in builtin_tasks() if t.id == "sum-multiples-01")  # multiples of 3
    # wrong on lists longer than 8 only
    wrong = "def sum_multiples(numbers):\n    return sum(n for n in numbers[:8] if n % 3 == 0)\n"
    namespace: dict[str, Any] = {}
    exec(wrong, namespace)
    expected = [
        same(eval(t.probe, dict(namespace)), eval(t.check.removeprefix("same(result, ")[:-1]))
        for t in task.hidden_tests
        if t.check
    ]
    assert 0 < sum(expected) < len(expected), "the fixture must fail some hidden tests, not all"

    env = CodeSingle(task=task.id, partial_credit=True)
    await env.reset(seed=0)
    result = await env.step(f"Here it is:\n```python\n{wrong}```\nDone.")
    assert result.reward == sum(expected) / len(expected)
    assert result.info["reward_components"]["all_passed"] == 0.0
    assert isinstance(env, CodeSingle)
    grade = await env.graded("")
    assert grade is not None and grade.valid
    hidden = {t.name for t in task.hidden_tests}
    assert [r.passed for r in grade.results if r.name in hidden] == expected


async def test_grader_is_type_strict_and_counts_statement_tests_as_untrusted() -> None:
    tests = [
        HiddenTest.returns("int", "f(1)", 1),
        HiddenTest.returns("tuple", "g()", (1, 2)),
        HiddenTest(name="loop", probe="for i in range(3):\n    assert f(i) == i", check=None),
    ]
    right = "def f(x):\n    return x\n\ndef g():\n    return (1, 2)\n"
    loose = "def f(x):\n    return float(x) if x == 1 else x\n\ndef g():\n    return [1, 2]\n"
    good, bad = await asyncio.gather(grade_python(right, tests), grade_python(loose, tests))
    assert [r.passed for r in good.results] == [True, True, True]
    assert [r.trusted for r in good.results] == [True, True, False]
    assert not good.all_passed and good.passed_fraction == pytest.approx(2 / 3)  # a claim is no pass
    assert good.untrusted_passed == 1
    assert [r.passed for r in bad.results] == [False, False, True]
    assert bad.passed_fraction == 0.0
    assert bad.results[0].error == "got 1.0"
    assert good.evidence.tests_expected == good.evidence.tests_reported == 3
    assert good.evidence.signature_ok and good.evidence.grader_private


def test_extract_code_takes_the_last_python_block() -> None:
    text = "First:\n```python\nx = 1\n```\nbetter:\n```py\nx = 2\n```\n"
    assert extract_code(text) == "x = 2\n"
    assert extract_code("def f(): pass") == "def f(): pass"


def _call(name: str, call_id: str, **arguments: Any) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create(name, arguments, id=call_id)])


async def test_repl_env_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """State persists in the REPL, public tests are shown, and the REPL is closed before grading."""
    task = next(t for t in builtin_tasks() if t.id == "digit-sum-00")
    open_at_grading: list[bool] = []
    real_grade = grade_python
    env = CodeRepl(task=task.id)

    async def spy(code: str, tests: list[HiddenTest], **kwargs: Any) -> GradeReport:
        open_at_grading.append(env._sandbox is not None)
        return await real_grade(code, tests, **kwargs)

    monkeypatch.setattr(envhub_code.envs, "grade_python", spy)
    wrong = "def digit_sum(n):\n    return 0\n"
    policy = ScriptedPolicy(
        [
            _call("python", "c1", code="x = 41\nopen('notes.txt', 'w').write('hi')"),
            _call("python", "c2", code="x + 1"),
            _call("run_public_tests", "c3", code=wrong),
            _call("run_public_tests", "c4", code=task.reference),
            _call("submit", "c5", code=task.reference),
        ]
    )
    episode = await run_episode(env, policy, seed=0)
    assert episode.error is None, episode.error
    tool_texts = [m.text for turn in episode.turns for m in turn.observation]
    assert tool_texts[1] == "42"
    assert tool_texts[2].startswith("0/3 public tests passed") and "FAILED: got 0" in tool_texts[2]
    assert tool_texts[3].startswith("3/3 public tests passed")
    assert episode.terminated and len(episode.turns) == 5
    assert episode.reward == 1.0
    assert episode.reward_components["public_passed"] == 1.0
    # run_public_tests graded twice while the REPL was open; the hidden tests once, after it was closed.
    assert open_at_grading == [True, True, False]
    assert env._sandbox is None


async def test_repl_oracle_and_a_final_answer_without_submit() -> None:
    env = envhub.make("code-repl")
    episodes = [await run_episode(env, OraclePolicy(), seed=seed) for seed in range(3)]
    assert [(e.reward, e.terminated, len(e.turns)) for e in episodes] == [(1.0, True, 1)] * 3
    env = CodeRepl(task="chunks-00")
    await env.reset(seed=0)
    result = await env.step(f"My solution:\n```python\n{env.task.reference}```")
    assert result.terminated and result.reward == 1.0


async def test_repl_without_any_code_scores_zero_and_truncates() -> None:
    env = CodeRepl(task="chunks-00", max_turns=1)
    episode = await run_episode(env, ScriptedPolicy([_call("python", "c1", code="1 + 1")]), seed=0)
    assert episode.truncated and episode.reward == 0.0
    assert episode.reward_components["grade_valid"] == 0.0


def test_prompts_never_contain_hidden_expectations() -> None:
    rng = random.Random(0)
    for task in rng.sample(builtin_tasks(), 20):
        env = CodeSingle(task=task.id)
        prompt = asyncio.run(env.reset(seed=0))[0][-1].text
        for test in task.hidden_tests:
            if test.source not in {p.source for p in task.public_tests}:
                assert test.source not in prompt
        assert task.reference not in prompt
