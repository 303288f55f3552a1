"""This package's entry in the hub's index (registry.yaml, written from it by
`python -m envhub.registry_yaml --write`): what each of its ids is, and which sandbox it runs its code in."""

from envhub.index import Catalog, CollectionCard

CATALOG = Catalog(
    collection=CollectionCard(
        ids="miniwob/<task>-v0",
        upstream="miniwob==1.1.0",
        licence="MIT",
        description=(
            "The real MiniWoB++ task pages (and FlightWoB) in headless Chromium with the "
            "browser family's tools and views, scored by the page's own reward (-1..1)."
        ),
        default_sandbox="browser",
        tags=["browser", "computer-use", "multimodal", "tool-use", "multi-turn", "miniwob"],
    ),
)
