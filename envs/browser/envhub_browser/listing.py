"""This package's entry in the hub's index (registry.yaml, written from it by
`python -m envhub.registry_yaml --write`): what each of its ids is, and which sandbox it runs its code in."""

from envhub.index import Catalog, EnvCard

CATALOG = Catalog(
    envs={
        "web-tasks": EnvCard(
            description=(
                "26 MiniWoB-style web tasks (buttons, forms, dropdowns, slider, login, search, "
                "multi-page) in headless Chromium, graded from page state."
            ),
            default_sandbox="browser",
            data_source="procedural (seeded) sites served from loopback",
            tags=["browser", "computer-use", "multimodal", "tool-use", "multi-turn"],
        ),
    },
)
