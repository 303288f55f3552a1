"""The MiniWoB++ ids agree with the miniwob package's own task list; pages come only from its wheel."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from envhub_miniwob.catalog import HTML_DIR, attribute_name, tasks
from envhub_miniwob.env import MiniWoBEnv, wheel_file
from envhub_miniwob.page import Snapshot
from envhub_miniwob.solutions import SOLUTIONS, click_checkboxes, simple_algebra
from envhub_miniwob.tasks import env_class

import envhub
from envhub.ids import parse_env_id
from envhub.wrappers import unwrap

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def miniwob_own_ids() -> set[str]:
    """miniwob's gymnasium registrations, `miniwob/<task>-v1`, read without our catalog's help."""
    import miniwob  # type: ignore[import-untyped]  # noqa: F401  (registers its envs)

    return {
        env_id.removesuffix("-v1")
        for env_id, spec in gymnasium.registry.items()
        if isinstance(spec.entry_point, str) and spec.entry_point.startswith("miniwob.envs.")
    }


def test_entry_points_match_miniwob_task_list() -> None:
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"]["envhub.envs"]
    installed = {
        ep.name: ep.value
        for ep in metadata.entry_points(group="envhub.envs")
        if ep.dist is not None and ep.dist.name == "envhub-miniwob"
    }
    assert installed == declared, "reinstall the plugin: pip install -e envs/miniwob"
    assert {name.removesuffix("-v0") for name in declared} == miniwob_own_ids()
    assert len(declared) == len(tasks()) == 128
    for name, value in declared.items():
        task = parse_env_id(name).name
        assert value == f"envhub_miniwob.tasks:{attribute_name(task)}"


def test_each_id_makes_its_own_task_with_miniwob_description() -> None:
    env = envhub.make("miniwob/click-test")
    assert isinstance(env, MiniWoBEnv)
    assert env.spec is not None and env.spec.id == "miniwob/click-test-v0"
    assert env.spec.provenance.package == "envhub-miniwob"
    task_class: Any = type(unwrap(env))  # make() wraps the env; the task is the env's own class
    assert task_class.task == "click-test" and task_class is env_class("click-test")
    assert "Click on a single button" in (task_class.__doc__ or "")
    assert {t.name for t in env.tools} >= {"click", "click_at", "type", "press", "drag", "done"}
    flight = envhub.make("miniwob/flight.AA")
    assert isinstance(flight, MiniWoBEnv)
    assert (flight.width, flight.height) == (600, 800)


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="time_limit"):
        envhub.make("miniwob/click-test", time_limit=0)
    with pytest.raises(ValueError, match="at least one"):
        envhub.make("miniwob/click-test", screenshot=False, text_view=False)


def test_pages_come_only_from_the_wheel() -> None:
    page = wheel_file("/miniwob/click-test.html")
    assert page is not None and page[1].startswith("text/html") and b"genProblem" in page[0]
    assert wheel_file("/core/core.js") is not None
    assert wheel_file("/../../../../etc/passwd") is None
    assert wheel_file("/%2e%2e/%2e%2e/reward.py") is None  # the package's Python, beside html/
    assert wheel_file("/miniwob/no-such-task.html") is None
    assert (HTML_DIR / "miniwob" / "click-test.html").is_file()


def test_scripted_solutions_cover_at_least_25_real_tasks() -> None:
    assert len(SOLUTIONS) >= 25
    assert set(SOLUTIONS) <= set(tasks())


def snapshot(utterance: str, nodes: list[dict[str, object]]) -> Snapshot:
    base = {
        "tag": "div", "id": "", "classes": "", "text": "", "own": "", "value": "", "checked": False,
        "type": "", "name": "", "eid": 0, "x": 0, "y": 0, "w": 10, "h": 10, "background": "", "fill": "",
        "data": {},
    }  # fmt: skip
    return Snapshot.read(
        "click-checkboxes", {"utterance": utterance, "nodes": [{**base, **n} for n in nodes]}
    )


def test_checkbox_solution_reads_the_page_state() -> None:
    boxes = [
        {"tag": "label", "text": "ab", "x": 0, "y": 0, "w": 50, "h": 20},
        {"tag": "input", "type": "checkbox", "eid": 1, "x": 2, "y": 2, "w": 10, "h": 10},
        {"tag": "label", "text": "cd", "x": 0, "y": 30, "w": 50, "h": 20},
        {"tag": "input", "type": "checkbox", "eid": 2, "x": 2, "y": 32, "w": 10, "h": 10, "checked": True},
        {"tag": "button", "id": "subbtn", "text": "Submit", "eid": 3},
    ]
    page = snapshot("Select ab and click Submit.", boxes)
    assert click_checkboxes(page) == ("click", {"element": 1})  # tick ab
    boxes[1]["checked"] = True
    assert click_checkboxes(snapshot("Select ab and click Submit.", boxes)) == ("click", {"element": 2})
    assert click_checkboxes(snapshot("Select ab, cd and click Submit.", boxes)) == ("click", {"element": 3})


@pytest.mark.parametrize(
    ("problem", "answer"),
    [("x + 3 = 10", "7"), ("x - 3 = 10", "13"), ("3 + x = 10", "7"), ("3 - x = 10", "-7")],
)
def test_algebra_solution(problem: str, answer: str) -> None:
    page = snapshot(
        "Solve for x and type your answer into the textbox. Press Submit when done.",
        [
            {"id": "math-problem", "text": problem},
            {"tag": "input", "id": "math-answer", "eid": 1},
            {"tag": "button", "id": "subbtn", "eid": 2},
        ],
    )
    assert simple_algebra(page) == ("type", {"text": answer, "element": 1})


async def test_a_miniwob_fork_is_refused_before_any_child_is_made() -> None:
    """MiniWoB inherits the web tasks' fork, which replays the agent's actions; its tasks are started by
    reset scripts that a replay cannot repeat, so it declares why, and no browser is started for it."""
    env = envhub.make("miniwob/click-test")
    with pytest.raises(envhub.NotForkable, match="started by scripts the env runs at reset"):
        await env.fork(1)
