"""This package's entry in the hub's index (registry.yaml, written from it by
`python -m envhub.registry_yaml --write`): what each of its ids is, and which sandbox it runs its code in."""

from envhub.index import Catalog, EnvCard

CATALOG = Catalog(
    envs={
        "vision": EnvCard(
            description=(
                "Questions about procedurally drawn images (count shapes, bar charts, "
                "differences, text, locate, clocks) with verifiable answers."
            ),
            default_sandbox="none",
            data_source="procedural (seeded) images (Pillow, matplotlib)",
            tags=["vision", "multimodal", "single-turn", "verifiable"],
        ),
    },
)
