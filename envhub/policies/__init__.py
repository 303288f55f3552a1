"""Policies play environments; `load_policy` turns a command-line spec into one."""

from __future__ import annotations

from pathlib import Path

from envhub.policies.base import Generation, Policy, TokenTrace
from envhub.policies.human import HumanPolicy
from envhub.policies.oracle import OraclePolicy, OraclePolicyError
from envhub.policies.random import RandomPolicy
from envhub.policies.scripted import ScriptedPolicy

SPECS = "oracle, random[:SEED], human, scripted:FILE.json"


def load_policy(spec: str) -> Policy:
    """Read a policy spec such as `oracle`, `random:7` or `scripted:actions.json`."""
    kind, _, arg = spec.partition(":")
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
    "OraclePolicy",
    "OraclePolicyError",
    "Policy",
    "RandomPolicy",
    "ScriptedPolicy",
    "TokenTrace",
    "load_policy",
]
