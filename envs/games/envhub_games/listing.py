"""This package's entry in the hub's index (registry.yaml, written from it by
`python -m envhub.registry_yaml --write`): what each of its ids is, and which sandbox it runs its code in."""

from envhub.index import Catalog, EnvCard

CATALOG = Catalog(
    envs={
        "arithmetic": EnvCard(
            description="Multi-step integer arithmetic solved by chaining calculator tool calls.",
            default_sandbox="none",
            data_source="procedural (seeded)",
            tags=["tool-use", "math", "multi-turn"],
        ),
        "guess-number": EnvCard(
            description="Find a secret integer from higher/lower feedback.",
            default_sandbox="none",
            data_source="procedural (seeded)",
            tags=["multi-turn", "reasoning", "game"],
        ),
        "countdown": EnvCard(
            description="Reach a target number with + - * / over given numbers, in one answer.",
            default_sandbox="none",
            data_source="procedural (seeded)",
            tags=["single-turn", "math", "verifiable"],
        ),
    },
)
