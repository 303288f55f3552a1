"""This package's entry in the hub's index (registry.yaml, written from it by
`python -m envhub.registry_yaml --write`): what each of its ids is, and which sandbox it runs its code in."""

from envhub.index import Catalog, CollectionCard

CATALOG = Catalog(
    collection=CollectionCard(
        ids="gym/<gymnasium id>",
        upstream="gymnasium==1.4.0",
        licence="MIT",
        description=(
            "Gymnasium envs with a text or ANSI render (FrozenLake, Taxi, Blackjack, "
            "CliffWalking, and any installed one as gym:ID) as multi-turn text envs; the "
            "env's return is the reward."
        ),
        default_sandbox="none",
        tags=["games", "multi-turn", "gymnasium", "control"],
    ),
)
