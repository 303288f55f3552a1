"""Reference play for text gyms: optimal actions from the env's own transition table, where it has one.

FrozenLake, Taxi and CliffWalking publish their dynamics as `env.P[state][action] = [(probability,
next_state, reward, terminated), ...]`; value iteration over it gives the optimal policy (for the
discounted return). Blackjack has no table; it gets the basic strategy for a dealer who sticks on 17.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from envhub_gym_text.as_text import BLACKJACK

GAMMA = 0.999
MAX_STATES_ACTIONS = 1_000_000
"""Larger tables are not solved (no reference then)."""

Policy = Callable[[Any], int | None]


def reference_policy(entry_point: str, gym_id: str, env: Any, kwargs: dict[str, Any]) -> Policy | None:
    """The reference policy for this env, or None when there is none."""
    if entry_point == BLACKJACK:
        return blackjack_basic_strategy
    table = getattr(env, "P", None)
    if not isinstance(table, dict) or not table:
        return None
    key = json.dumps([gym_id, kwargs], sort_keys=True, default=repr)
    if key not in _SOLVED:
        _SOLVED[key] = solve(table)
    greedy = _SOLVED[key]
    return None if greedy is None else lambda state: int(greedy[int(state)])


_SOLVED: dict[str, np.ndarray[Any, Any] | None] = {}
"""Greedy actions per state, by gymnasium id and options: solved once per process."""


def solve(table: dict[int, dict[int, list[tuple[float, int, float, bool]]]]) -> np.ndarray[Any, Any] | None:
    """The greedy action per state after value iteration over a transition table; None if too large."""
    states, actions = len(table), max(len(a) for a in table.values())
    if states * actions > MAX_STATES_ACTIONS:
        return None
    rows = [
        (s * actions + a, p, n, r, done)
        for s, by_action in table.items()
        for a, outcomes in by_action.items()
        for p, n, r, done in outcomes
    ]
    pair, prob, nxt, reward, done = (np.array(column) for column in zip(*rows, strict=True))
    expected = np.bincount(pair, weights=prob * reward, minlength=states * actions)
    carry = prob * GAMMA * (1.0 - done.astype(float))
    values = np.zeros(states)
    q = np.full(states * actions, -np.inf)
    for _ in range(100_000):
        q = expected + np.bincount(pair, weights=carry * values[nxt], minlength=states * actions)
        new = q.reshape(states, actions).max(axis=1)
        if np.max(np.abs(new - values)) < 1e-9:
            break
        values = new
    greedy: np.ndarray[Any, Any] = q.reshape(states, actions).argmax(axis=1)
    return greedy


def blackjack_basic_strategy(state: Any) -> int:
    """Hit (1) or stick (0): the textbook basic strategy without doubling or splitting."""
    player, dealer, usable_ace = (int(v) for v in state)
    if usable_ace:
        return int(player <= 17 or (player == 18 and dealer in (1, 9, 10)))
    if player <= 11:
        return 1
    if player == 12:
        return int(dealer not in (4, 5, 6))
    if player <= 16:
        return int(not 2 <= dealer <= 6)
    return 0
