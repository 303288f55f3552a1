"""Invalid moves played through the env's real `step`: they must lose as textarena's rules say, never hang
the step (an env error the runner retries or drops, instead of the loss)."""

from __future__ import annotations

import envhub


async def test_a_game_whose_every_seat_is_eliminated_ends_as_an_invalid_move_loss() -> None:
    """market-entry-game's one seat is eliminated after two invalid decisions and the game goes on to
    round 2; the next step looped for ever in textarena, looking for a seat left to move."""
    async with envhub.make("textarena/market-entry-game-v0") as env:
        await env.reset(seed=0)
        for _ in range(20):
            result = await env.step("xyzzy")
            if result.terminated or result.truncated:
                break
        assert result.terminated and result.reward == -1.0
        assert result.info["turn"] == 6  # the two invalid decisions of round 1, after 3 silent messages
        assert "cannot go on" in result.observation[-1].text


async def test_a_game_cut_off_by_the_turn_limit_scores_a_loss() -> None:
    """A game envhub's max_turns cut short scored 0, above the -1 of a loss: an agent about to lose could
    stall (poker, santorini and settlers let garbage go on for 200 turns) and earn more than losing."""
    async with envhub.make("textarena/tic-tac-toe-v0", max_turns=1) as env:
        await env.reset(seed=0)
        result = await env.step("[4]")
        assert result.truncated and not result.terminated
        assert result.reward == -1.0
        assert result.info["reward_components"]["finished"] == 0.0
        assert "turn limit" in result.info["reward_notes"]["outcome"]
