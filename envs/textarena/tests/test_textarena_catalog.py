"""The id list: every textarena game is an id, and the unavailable ones say why when made."""

from __future__ import annotations

from importlib import metadata

import pytest
from envhub_textarena.catalog import GAMES, TEXTARENA_VERSION
from envhub_textarena.env import GameUnavailable
from envhub_textarena.games import available, unavailable

import envhub


def test_entry_points_and_textarenas_own_registry_agree() -> None:
    from textarena.envs.registration import ENV_REGISTRY  # type: ignore[import-untyped]

    def wrapper_variant(game_id: str) -> bool:
        return any(game_id.endswith(s) and game_id[: -len(s)] in ENV_REGISTRY for s in ("-raw", "-train"))

    assert metadata.version("textarena") == TEXTARENA_VERSION
    assert {g.textarena_id for g in GAMES} == {i for i in ENV_REGISTRY if not wrapper_variant(i)}
    envs = metadata.distribution("envhub-textarena").entry_points.select(group="envhub.envs")
    declared = {ep.name for ep in envs}
    assert declared == {g.env_id for g in GAMES}


def test_unavailable_games_are_listed_with_their_reason() -> None:
    missing = unavailable()
    assert "OpenRouter" in missing["textarena/debate-v0"]
    assert "OpenRouter" in missing["textarena/twenty-questions-v0"]
    assert "NLTK" in missing["textarena/wordle-v0"]
    assert "data files" in missing["textarena/scorable-games-v0"]
    assert len(available()) + len(missing) == len(GAMES)
    assert len(available()) >= 150


@pytest.mark.parametrize("env_id", ["textarena/debate-v0", "textarena/hangman-v0"])
def test_making_an_unavailable_game_names_the_reason(env_id: str) -> None:
    with pytest.raises(GameUnavailable) as caught:
        envhub.make(env_id)
    assert unavailable()[env_id] in str(caught.value)
    assert env_id in str(caught.value)


def test_an_unknown_opponent_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="greedy"):
        envhub.make("textarena/tic-tac-toe", opponent="minimax")
