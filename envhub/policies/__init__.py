"""Policies play environments; `load_policy` turns a command-line spec into one."""

from __future__ import annotations

import os
from pathlib import Path

from envhub.policies.base import Generation, Policy, TokenTrace
from envhub.policies.hf import TransformersPolicy
from envhub.policies.human import HumanPolicy
from envhub.policies.openai import OpenAIPolicy, PolicyServerError
from envhub.policies.oracle import OraclePolicy, OraclePolicyError
from envhub.policies.random import RandomPolicy
from envhub.policies.scripted import ScriptedPolicy

SPECS = (
    "oracle, random[:SEED], human, scripted:FILE.json, "
    "openai:BASE_URL#MODEL (e.g. openai:http://localhost:8000/v1#Qwen/Qwen2.5-0.5B-Instruct), hf:MODEL_DIR"
)


def load_policy(spec: str) -> Policy:
    """Read a policy spec such as `oracle`, `random:7`, `scripted:actions.json` or `hf:./my-model`.

    A server's URL and the model it serves are split at `#`, which URLs of API servers never contain
    and model names hardly ever do, while both may contain `:` and `/`. Like OpenAI's own clients, the
    openai policy sends `OPENAI_API_KEY` from the environment, if set, as its key.
    """
    kind, _, arg = spec.partition(":")
    if kind == "openai":
        url, _, model = arg.partition("#")
        if not url.startswith(("http://", "https://")) or not model:
            raise ValueError(
                f"cannot read the openai policy {spec!r}: write openai:BASE_URL#MODEL, "
                "e.g. openai:http://localhost:8000/v1#Qwen/Qwen2.5-0.5B-Instruct"
            )
        return OpenAIPolicy(url, model, api_key=os.environ.get("OPENAI_API_KEY"))
    if kind == "hf":
        if not arg:
            raise ValueError(
                "the hf policy needs a local model directory: hf:MODEL_DIR, e.g. hf:./checkpoints/step-100"
            )
        return TransformersPolicy(Path(arg))
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


__all__ = [
    "Generation",
    "HumanPolicy",
    "OpenAIPolicy",
    "OraclePolicy",
    "OraclePolicyError",
    "Policy",
    "PolicyServerError",
    "RandomPolicy",
    "ScriptedPolicy",
    "TokenTrace",
    "TransformersPolicy",
    "load_policy",
]
