"""A Harbor task folder read from disk: its instruction, its `task.toml` and where its parts live.

The layout and the fields follow Harbor's own models (the `harbor` package, 0.25:
`harbor/models/task/paths.py` for the folder, `harbor/models/task/config.py` for `task.toml`):

    task-name/
    ├── instruction.md      the prompt
    ├── task.toml           [metadata], [verifier], [agent], [environment], [solution]
    ├── environment/        the image recipe: Dockerfile (+ its build context)
    ├── solution/solve.sh   the oracle, copied to /solution only when the oracle plays
    └── tests/test.sh       the verifier, copied to /tests only after the agent is done; it writes
                            /logs/verifier/reward.txt (a number) or reward.json (name -> number)

A field envhub cannot honour is refused by name when the task is read, never silently dropped.
"""

from __future__ import annotations

import os
import re
import tomllib
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

DEFAULT_VERIFIER_TIMEOUT_S = 600.0
"""Harbor's default for [verifier].timeout_sec."""
DEFAULT_BUILD_TIMEOUT_S = 600.0
"""Harbor's default for [environment].build_timeout_sec."""


class HarborTaskError(ValueError):
    """The task folder is malformed, or asks for something envhub cannot honour; the message says which."""


class NetworkMode(StrEnum):
    """Harbor's [environment].network_mode values."""

    NO_NETWORK = "no-network"
    PUBLIC = "public"
    ALLOWLIST = "allowlist"


class _Section(BaseModel):
    # Harbor's own models ignore keys they do not know, so tasks written for a newer Harbor still load.
    model_config = ConfigDict(extra="ignore", frozen=True)


class PhaseConfig(_Section):
    """What [agent] and [verifier] share: a timeout, a user, a per-phase network override."""

    timeout_sec: float | None = None
    user: str | int | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None


class VerifierConfig(PhaseConfig):
    timeout_sec: float | None = DEFAULT_VERIFIER_TIMEOUT_S
    env: dict[str, str] = Field(default_factory=dict)
    environment_mode: str | None = None
    environment: dict[str, Any] | None = None


class EnvironmentConfig(_Section):
    build_timeout_sec: float = DEFAULT_BUILD_TIMEOUT_S
    docker_image: str | None = None
    os: str = "linux"
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    gpus: int | None = None
    network_mode: NetworkMode = NetworkMode.PUBLIC
    allowed_hosts: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    healthcheck: dict[str, Any] | None = None
    mcp_servers: list[dict[str, Any]] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _legacy_fields(cls, data: Any) -> Any:
        """Terminal-Bench 2.0's older spellings, mapped as Harbor maps them: `allow_internet` (bool) to
        network_mode, `memory` / `storage` ("2G", "512M") to memory_mb / storage_mb."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        allow = data.pop("allow_internet", None)
        if allow is not None and "network_mode" not in data and data.get("allowed_hosts") is None:
            data["network_mode"] = NetworkMode.PUBLIC if allow else NetworkMode.NO_NETWORK
        for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
            if isinstance(data.get(old), str):
                data.setdefault(new, _size_mb(data.pop(old)))
        return data


class SolutionConfig(_Section):
    env: dict[str, str] = Field(default_factory=dict)


class TaskConfig(_Section):
    """`task.toml`, the fields Harbor 0.25 defines (schema 1.4) that bear on running one episode."""

    schema_version: str = "1.4"
    task: dict[str, Any] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    agent: PhaseConfig = Field(default_factory=PhaseConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    steps: list[dict[str, Any]] | None = None

    @model_validator(mode="before")
    @classmethod
    def _version_rename(cls, data: Any) -> Any:
        if isinstance(data, dict) and "version" in data:
            data = dict(data)
            data.setdefault("schema_version", data.pop("version"))
        return data


def _size_mb(text: str) -> int:
    """Harbor's legacy size strings: "2G" -> 2048, "512M" -> 512, "1024K" -> 1."""
    size = text.strip().upper()
    scale = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}.get(size[-1:])
    if scale is None:
        raise ValueError(f"size {text!r} should look like '2G' or '512M'")
    return int(float(size[:-1]) * scale)


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def resolve_env(values: dict[str, str]) -> dict[str, str]:
    """Harbor's `${VAR}` / `${VAR:-default}` templates, read from the host's environment as Harbor does."""

    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in os.environ:
            return os.environ[name]
        if default is not None:
            return default
        raise HarborTaskError(
            f"the task needs the host variable {name} (from a ${{{name}}} in task.toml); set it"
        )

    return {key: _VAR.sub(one, value) for key, value in values.items()}


class HarborTask:
    """One task folder: paths, the parsed config, and the instruction; `check()` ran on construction."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser().resolve()
        if not self.path.is_dir():
            raise HarborTaskError(
                f"{path}: no such task folder (a Harbor task is a directory with task.toml)"
            )
        self.name = self.path.name
        self.config = self._read_config()
        self.instruction = self._read("instruction.md").strip()
        self.check()

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    @property
    def dockerfile(self) -> Path:
        return self.environment_dir / "Dockerfile"

    def _read(self, name: str) -> str:
        file = self.path / name
        if not file.is_file():
            raise HarborTaskError(f"{self.path} has no {name}; a Harbor task needs one")
        return file.read_text()

    def _read_config(self) -> TaskConfig:
        text = self._read("task.toml")
        try:
            return TaskConfig.model_validate(tomllib.loads(text))
        except (tomllib.TOMLDecodeError, ValidationError, ValueError) as exc:
            raise HarborTaskError(
                f"{self.path / 'task.toml'} is not a valid Harbor task.toml: {exc}"
            ) from None

    def check(self) -> None:
        """Refuse, by name, every part of the task this runner would otherwise have to ignore."""
        c, env = self.config, self.config.environment
        refusals = [
            (
                bool(c.steps),
                "[[steps]] (multi-step tasks) are not run by envhub; split it into one task per step",
            ),
            (env.os.lower() != "linux", f"[environment].os = {env.os!r}: only Linux tasks run here"),
            (bool(env.gpus), "[environment].gpus: envhub's sandboxes have no GPUs"),
            (
                env.network_mode == NetworkMode.ALLOWLIST,
                "[environment].network_mode = 'allowlist': envhub's sandboxes have no host allowlist; "
                "use 'no-network' or 'public'",
            ),
            (bool(env.mcp_servers), "[environment].mcp_servers: MCP servers are not started by envhub"),
            (env.healthcheck is not None, "[environment].healthcheck is not run by envhub"),
            (
                c.verifier.environment_mode == "separate" or c.verifier.environment is not None,
                "[verifier] in a separate environment is not supported: the tests run in the agent's own "
                "environment ('shared', Harbor's default)",
            ),
            (
                c.agent.user is not None or c.verifier.user is not None,
                "[agent].user / [verifier].user: commands run as the image's USER; set it in the Dockerfile",
            ),
        ]
        for phase, config in (("agent", c.agent), ("verifier", c.verifier)):
            overrides = config.network_mode is not None and config.network_mode != env.network_mode
            refusals.append(
                (
                    overrides,
                    f"[{phase}].network_mode differs from [environment].network_mode: one sandbox serves "
                    "both phases, so they must agree",
                )
            )
        for refused, why in refusals:
            if refused:
                raise HarborTaskError(f"{self.path}: {why}")
        if not (self.tests_dir / "test.sh").is_file():
            raise HarborTaskError(f"{self.path} has no tests/test.sh: Harbor's verifier entry point")
        if env.docker_image is None and not self.dockerfile.is_file():
            raise HarborTaskError(
                f"{self.path} has neither environment/Dockerfile nor [environment].docker_image; "
                "one of them says what the agent's machine is"
            )

    @property
    def network(self) -> bool:
        return self.config.environment.network_mode == NetworkMode.PUBLIC

    @property
    def has_solution(self) -> bool:
        return (self.solution_dir / "solve.sh").is_file()
