"""What a player needs to read gymnasium's toy-text games as text: action names, the rules in a
sentence, and the state spelled out; and the list of those games' ids.

Its own module because `env` and `oracle` read it while `toy_text`, whose attributes build `env`'s
classes, lists the ids from it: with all of it in `toy_text`, `toy_text` and `env` imported each other.
"""

from __future__ import annotations

from typing import Any

import gymnasium

FROZEN_LAKE = "gymnasium.envs.toy_text.frozen_lake:FrozenLakeEnv"
TAXI = "gymnasium.envs.toy_text.taxi:TaxiEnv"
CLIFF_WALKING = "gymnasium.envs.toy_text.cliffwalking:CliffWalkingEnv"
BLACKJACK = "gymnasium.envs.toy_text.blackjack:BlackjackEnv"

_ACTIONS = {
    FROZEN_LAKE: ["left", "down", "right", "up"],
    TAXI: ["south", "north", "east", "west", "pickup", "dropoff"],
    CLIFF_WALKING: ["up", "right", "down", "left"],
    BLACKJACK: ["stick", "hit"],
}
"""In the order of each env's action numbers (its documentation's table)."""

_RULES = {
    FROZEN_LAKE: (
        "Walk across the frozen lake from the start S to the goal G without falling into a hole H; "
        "the ice may be slippery, so a move can slide you sideways. Reaching G gives reward 1, anything "
        "else 0. Your position is shown as [x]."
    ),
    TAXI: (
        "Drive the taxi to the passenger, pick them up, and drop them off at their destination. Each "
        "step costs -1, a delivery gives +20, a pickup or dropoff in the wrong place -10. Walls (|) "
        "block east-west moves."
    ),
    CLIFF_WALKING: (
        "Walk from the start (bottom left) to the goal T (bottom right); you are x. Each step costs -1; "
        "stepping onto the cliff C costs -100 and sends you back to the start."
    ),
    BLACKJACK: (
        "Beat the dealer: finish closer to 21 than the dealer without going over. Hit draws a card, "
        "stick ends your turn. Winning gives +1, losing -1, a draw 0."
    ),
}
_TAXI_STOPS = ["R (top left)", "G (top right)", "Y (bottom left)", "B (bottom right)"]


def toy_text_ids() -> list[str]:
    """Gymnasium's toy-text ids, as its registry lists them."""
    return sorted(k for k, spec in gymnasium.registry.items() if ".toy_text." in str(spec.entry_point))


def action_names(entry_point: str) -> list[str] | None:
    return _ACTIONS.get(entry_point)


def rules_of(entry_point: str) -> str:
    return _RULES.get(entry_point, "Maximise the total reward.")


def describe_state(entry_point: str, env: Any, state: Any) -> str:
    """The state in words where the game is known, else the raw observation."""
    if entry_point in (FROZEN_LAKE, CLIFF_WALKING):
        row, col = divmod(int(state), int(env.ncol if entry_point == FROZEN_LAKE else env.shape[1]))
        return f"You are at row {row}, column {col} (counting from 0 at the top left)."
    if entry_point == TAXI:
        taxi_row, taxi_col, passenger, destination = env.decode(int(state))
        where = "in the taxi" if passenger == 4 else f"waiting at {_TAXI_STOPS[passenger]}"
        return (
            f"Taxi at row {taxi_row}, column {taxi_col}; the passenger is {where}; "
            f"the destination is {_TAXI_STOPS[destination]}."
        )
    if entry_point == BLACKJACK:
        player, dealer, usable_ace = (int(v) for v in state)
        card = "an ace" if dealer == 1 else str(dealer)
        ace = " (with an ace counted as 11)" if usable_ace else ""
        return f"Your hand totals {player}{ace}; the dealer shows {card}."
    return f"Observation: {state!r}"
