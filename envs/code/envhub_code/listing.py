"""This package's entry in the hub's index (registry.yaml, written from it by
`python -m envhub.registry_yaml --write`): what each of its ids is, and which sandbox it runs its code in."""

from envhub.index import Catalog, EnvCard

CATALOG = Catalog(
    envs={
        "code-single": EnvCard(
            description=(
                "Write a Python function in one reply; reward 1 when every hidden unit test "
                "passes in a fresh sandbox (partial_credit=True scores the fraction)."
            ),
            default_sandbox="local",
            data_source=(
                "procedural (120 seeded built-in tasks); HumanEval- or MBPP-style JSONL/Parquet "
                "at a user path"
            ),
            tags=["code", "single-turn", "verifiable", "sandbox"],
        ),
        "code-repl": EnvCard(
            description=(
                "Solve a Python task with a stateful sandboxed REPL and the public tests, then "
                "submit; hidden tests grade it in a fresh sandbox."
            ),
            default_sandbox="local",
            data_source=(
                "procedural (120 seeded built-in tasks); HumanEval- or MBPP-style JSONL/Parquet "
                "at a user path"
            ),
            tags=["code", "multi-turn", "tool-use", "sandbox"],
        ),
    },
)
