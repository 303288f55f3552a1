"""This package's entry in the hub's index (registry.yaml, written from it by
`python -m envhub.registry_yaml --write`): what each of its ids is, and which sandbox it runs its code in."""

from envhub.index import Catalog, EnvCard

CATALOG = Catalog(
    envs={
        "tool-use": EnvCard(
            description=(
                "Multi-step tasks that need several tool calls (calculator, sandboxed files, "
                "Python, document search)."
            ),
            default_sandbox="local",
            data_source="procedural (seeded) over a packaged fictional corpus (61 documents)",
            tags=["tool-use", "multi-turn", "sandbox", "search", "python", "math"],
        ),
    },
)
