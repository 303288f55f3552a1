"""This package's entry in the hub's index (registry.yaml, written from it by
`python -m envhub.registry_yaml --write`): what each of its ids is, and which sandbox it runs its code in."""

from envhub.index import Catalog, EnvCard

CATALOG = Catalog(
    envs={
        "swe-bench-lite": EnvCard(
            description=(
                "Resolve real GitHub issues (SWE-bench Lite) with shell and edit tools; graded by"
                " the repository's own tests with the official semantics in a fresh sandbox."
            ),
            default_sandbox="local",
            data_source=(
                "SWE-bench Lite parquet (300 test / 23 dev) at a user path, "
                "$ENVHUB_SWE_BENCH_LITE or the HF datasets cache"
            ),
            tags=["code", "swe", "multi-turn", "tool-use", "sandbox", "verifiable"],
        ),
        "swe-mini": EnvCard(
            description=(
                "Twelve small offline SWE-style instances over four tiny bundled repositories "
                "(pytest and unittest); the same pipeline as swe-bench-lite."
            ),
            default_sandbox="local",
            data_source="bundled (12 instances, git bundles in the package)",
            tags=["code", "swe", "multi-turn", "tool-use", "sandbox", "verifiable"],
        ),
    },
)
