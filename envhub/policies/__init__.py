"""Policies play environments; `load_policy` turns a command-line spec into one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envhub.policies.base import Generation, Policy, TokenTrace, ToolFormat
from envhub.policies.hf import TransformersPolicy
from envhub.policies.human import HumanPolicy
from envhub.policies.openai import OpenAIPolicy, PolicyServerError
from envhub.policies.oracle import OraclePolicy, OraclePolicyError
from envhub.policies.random import RandomPolicy
from envhub.policies.scripted import ScriptedPolicy

SPECS = (
    "oracle, random[:SEED], human, scripted:FILE.json, "
    "openai:BASE_URL#MODEL (e.g. openai:http://localhost:8000/v1#Qwen/Qwen2.5-0.5B-Instruct; "
    "with OPENAI_BASE_URL set: openai#MODEL, or openai and --model MODEL), hf:MODEL_DIR"
)


class Sampling(BaseModel):
    """How a model policy samples; a field left None keeps the policy's own default."""

    model_config = ConfigDict(frozen=True)

    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    """Ask for token ids and logprobs (vLLM's extensions); None: ask, and store text only if refused."""
    tool_format: ToolFormat | None = None
    """native: tools in the request (the server parses calls); text: in the prompt, calls parsed here."""

    def given(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)

    def describe(self) -> str:
        """`temperature=0.7 top_p=0.9`: the settings as a batch's manifest names them."""
        return " ".join(f"{key}={value}" for key, value in self.given().items())


def load_policy(spec: str, *, model: str | None = None, sampling: Sampling | None = None) -> Policy:
    """Read a policy spec such as `oracle`, `random:7`, `scripted:actions.json` or `hf:./my-model`.

    A server's URL and the model it serves are split at `#`, which URLs of API servers never contain
    and model names hardly ever do, while both may contain `:` and `/`. Like OpenAI's own clients, the
    openai policy reads its URL from `OPENAI_BASE_URL` and its key from `OPENAI_API_KEY` when they are
    set and not given. `sampling` applies to the model policies (openai, hf) only.
    """
    sampling = sampling or Sampling()
    if spec == "openai" or spec.startswith(("openai:", "openai#")):
        return _openai(spec, spec.removeprefix("openai").removeprefix(":"), model, sampling)
    kind, _, arg = spec.partition(":")
    if model is not None:
        raise ValueError(f"--model names the model an openai server serves; the {kind} policy takes none")
    if kind == "hf":
        return _hf(arg, sampling)
    if sampling.given():
        raise ValueError(
            f"{', '.join(sampling.given())} set how a model samples; the {kind!r} policy has no model "
            "(use them with openai:... or hf:...)"
        )
    if kind == "oracle" and not arg:
        return OraclePolicy()
    if kind == "random":
        try:
            return RandomPolicy(seed=int(arg) if arg else None)
        except ValueError:
            raise ValueError(f"random policy seed must be an integer, got {arg!r} (e.g. random:7)") from None
    if kind == "human" and not arg:
        return HumanPolicy()
    if kind == "scripted" and arg:
        return ScriptedPolicy.from_file(Path(arg))
    raise ValueError(f"unknown policy {spec!r}; expected one of: {SPECS}")


def _openai(spec: str, arg: str, model: str | None, sampling: Sampling) -> OpenAIPolicy:
    url, _, named = arg.partition("#")
    url = url or os.environ.get("OPENAI_BASE_URL", "")
    if named and model is not None and named != model:
        raise ValueError(
            f"the policy {spec!r} names the model {named!r} and --model names {model!r}: give one"
        )
    model = named or model
    problem = (
        "no server URL (and OPENAI_BASE_URL is not set)"
        if not url
        else f"the server URL {url!r} does not start with http:// or https://"
        if not url.startswith(("http://", "https://"))
        else "no model (add #MODEL, or --model MODEL)"
        if not model
        else None
    )
    if problem is not None or model is None:
        raise ValueError(
            f"cannot read the openai policy {spec!r}: {problem}; write openai:BASE_URL#MODEL "
            "(e.g. openai:http://localhost:8000/v1#Qwen/Qwen2.5-0.5B-Instruct), or set OPENAI_BASE_URL "
            "and write openai#MODEL (or --policy openai --model MODEL)"
        )
    return OpenAIPolicy(url, model, api_key=os.environ.get("OPENAI_API_KEY"), **sampling.given())


def _hf(arg: str, sampling: Sampling) -> TransformersPolicy:
    if not arg:
        raise ValueError(
            "the hf policy needs a local model directory: hf:MODEL_DIR, e.g. hf:./checkpoints/step-100"
        )
    given = sampling.given()
    if unsupported := sorted(set(given) - {"temperature", "max_tokens", "tool_format"}):
        raise ValueError(
            f"the hf policy takes temperature, max_tokens and tool_format; not {', '.join(unsupported)}"
        )
    renamed = {"max_tokens": "max_new_tokens"}  # transformers' name for it
    return TransformersPolicy(Path(arg), **{renamed.get(k, k): v for k, v in given.items()})


__all__ = [
    "Generation",
    "HumanPolicy",
    "OpenAIPolicy",
    "OraclePolicy",
    "OraclePolicyError",
    "Policy",
    "PolicyServerError",
    "RandomPolicy",
    "Sampling",
    "ScriptedPolicy",
    "TokenTrace",
    "TransformersPolicy",
    "load_policy",
]
