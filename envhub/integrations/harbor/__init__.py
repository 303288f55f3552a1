"""Harbor task folders as envhub envs: `envhub.make("harbor:PATH")`, PATH a folder in Harbor's format
(laude-institute/harbor, Terminal-Bench 2.0's: instruction.md, task.toml, environment/, tests/,
solution/). Options: `runtime="docker"` (default: the task's Dockerfile built by the local engine) or
`runtime="local"` (a bubblewrap sandbox, for plain Python Dockerfiles); `max_turns`.

Nothing of the format is imported until an id of it is made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envhub.integrations.harbor.env import HarborEnv
    from envhub.integrations.harbor.runtime import Runtime


def make_env(target: str, *, max_turns: int | None = None, runtime: Runtime = "docker") -> HarborEnv:
    """The env of the task folder `target` (a path, relative to the working directory or absolute).

    Its options are named here, not passed on as `**kwargs`, so that `make` refuses any other by name."""
    from envhub.integrations.harbor.env import HarborEnv

    return HarborEnv(target, max_turns=max_turns, runtime=runtime)
