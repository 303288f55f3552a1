"""`verifiers:MODULE` ids: an installed verifiers environment played under envhub's contract.

The `verifiers` package is imported only when such an id is made, so `import envhub` never needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envhub.core import Env


def make_env(target: str, *, max_turns: int | None = None, **kwargs: Any) -> Env:
    """The verifiers environment `target` names (the module verifiers imports); `kwargs` are its
    taskset options, as `--env.taskset.*` would give them to `vf-eval`."""
    try:
        import verifiers.v1  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"verifiers:{target} needs the verifiers package: pip install 'verifiers==0.4.0'"
        ) from exc
    from envhub.integrations.verifiers.env import VerifiersEnv

    return VerifiersEnv(target, max_turns=max_turns, **kwargs)
