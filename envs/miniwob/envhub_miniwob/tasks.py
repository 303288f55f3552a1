"""One environment class per MiniWoB++ task, made on first use: `tasks.click_test` is `miniwob/click-test`.

pyproject.toml's entry points name these attributes (`envhub_miniwob.tasks:click_test`); a module-level
`__getattr__` (PEP 562) builds each class from miniwob's own task list, so adding a task needs no code
here, only `python envs/miniwob/tools/gen_entry_points.py` to refresh the entry points.
"""

from __future__ import annotations

import functools

from envhub_miniwob.catalog import attribute_name, tasks
from envhub_miniwob.env import MiniWoBEnv


@functools.cache
def env_class(task: str) -> type[MiniWoBEnv]:
    """The `MiniWoBEnv` subclass for one task, its docstring the task's own description."""
    if task not in tasks():
        raise KeyError(f"miniwob {tasks.__module__} has no task {task!r}")
    info = tasks()[task]
    name = "MiniWoB_" + attribute_name(task)
    doc = f"MiniWoB++ {task}: {info.description}" if info.description else f"MiniWoB++ {task}."
    return type(name, (MiniWoBEnv,), {"task": task, "__doc__": doc, "__module__": __name__})


def __getattr__(name: str) -> type[MiniWoBEnv]:
    by_attribute = {attribute_name(task): task for task in tasks()}
    if name not in by_attribute:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r} (no miniwob task by that name)")
    return env_class(by_attribute[name])
