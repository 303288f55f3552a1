"""This package's entry in the hub's index (registry.yaml, written from it by
`python -m envhub.registry_yaml --write`): what each of its ids is, and which sandbox it runs its code in."""

from envhub.index import Catalog, CollectionCard

CATALOG = Catalog(
    collection=CollectionCard(
        ids="textarena/<game>-v0",
        upstream="textarena==0.7.4",
        licence="MIT",
        description=(
            "TextArena's games; puzzles as multi-turn envs, games of two or more seats "
            "against a built-in opponent, scored by the game's own win/draw/loss. Games that "
            "need a network or an external model say why when made."
        ),
        default_sandbox="none",
        tags=["games", "multi-turn", "textarena"],
    ),
)
