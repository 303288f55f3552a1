"""This package's entry in the hub's index (registry.yaml, written from it by
`python -m envhub.registry_yaml --write`): what each of its ids is, and which sandbox it runs its code in."""

from envhub.index import Catalog, CollectionCard

CATALOG = Catalog(
    collection=CollectionCard(
        ids="reasoning-gym/<dataset>-v0",
        upstream="reasoning-gym==0.1.25",
        licence="Apache-2.0",
        description=(
            "Every procedural Reasoning Gym dataset, its config knobs as options, scored by "
            "the dataset's own score_answer."
        ),
        default_sandbox="none",
        tags=["reasoning", "math", "single-turn", "verifiable", "procedural"],
    ),
)
