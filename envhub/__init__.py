"""envhub: hermetic multi-turn environments for RL post-training of LLM agents, behind one async API."""

import importlib.util
from importlib.metadata import PackageNotFoundError, version

from envhub.authoring import ChatEnv, MultiTurnEnv, Reaction, Reply, SingleTurnEnv, ToolEnv, reward
from envhub.core import (
    Action,
    Env,
    EnvSpec,
    EpisodeStateError,
    InfrastructureError,
    MalformedAction,
    NotForkable,
    Observation,
    Provenance,
    StepResult,
    UnknownOptionError,
)
from envhub.ids import InvalidEnvId, parse_env_id
from envhub.index import RegistryIndexError
from envhub.messages import ImagePart, Message, TextPart, ToolCall
from envhub.registration import (
    DuplicateEnvError,
    PluginImportError,
    UnknownEnvError,
    make,
    register,
    registry,
    spec,
)
from envhub.tools import ToolSpec, tool

if importlib.util.find_spec("gymnasium") is not None:
    # gymnasium 1.x has no plugin hook: `gymnasium.make("envhub/<id>")` works once envhub is imported
    try:
        import envhub.integrations.gymnasium  # noqa: F401  (registers every id with gymnasium on import)
    except Exception as exc:  # a broken gymnasium install must not stop envhub itself
        import warnings

        warnings.warn(f"envhub ids are not registered with gymnasium: {exc}", stacklevel=1)

try:
    __version__ = version("envhub-core")  # the distribution; `envhub` on PyPI is another project
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = [
    "Action",
    "ChatEnv",
    "DuplicateEnvError",
    "Env",
    "EnvSpec",
    "EpisodeStateError",
    "ImagePart",
    "InfrastructureError",
    "InvalidEnvId",
    "MalformedAction",
    "Message",
    "MultiTurnEnv",
    "NotForkable",
    "Observation",
    "PluginImportError",
    "Provenance",
    "Reaction",
    "RegistryIndexError",
    "Reply",
    "SingleTurnEnv",
    "StepResult",
    "TextPart",
    "ToolCall",
    "ToolEnv",
    "ToolSpec",
    "UnknownEnvError",
    "UnknownOptionError",
    "__version__",
    "make",
    "parse_env_id",
    "register",
    "registry",
    "reward",
    "spec",
    "tool",
]
