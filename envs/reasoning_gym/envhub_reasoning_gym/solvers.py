"""Reference solutions for the two datasets whose items keep none (`answer` is None and no example).

rush_hour and boxnet accept many answers and score them by simulation, so reasoning-gym stores no
solution. These solvers are envhub's, not Reasoning Gym's: the oracle plays them, and the dataset's own
`score_answer` still decides (the tests require 1.0 from it on every item they play).
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from reasoning_gym.games.rush_hour import BOARD_SIZE, TARGET, Board  # type: ignore[import-untyped]

Positions = tuple[int, ...]
CELLS: int = BOARD_SIZE * BOARD_SIZE
ROW: int = BOARD_SIZE


def rush_hour(board_config: str) -> str | None:
    """Shortest single-step solution (breadth-first over piece positions) in the dataset's own move
    syntax, `A+1 B-2 ...`, the letters being the pieces' indices on reasoning-gym's `Board`; None when the
    red car cannot reach the exit."""
    pieces = Board(board_config)._pieces
    sizes = [p.size for p in pieces]
    strides = [p.stride for p in pieces]
    start: Positions = tuple(p.position for p in pieces)
    parents: dict[Positions, tuple[Positions, int, int] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if state[0] == TARGET:
            return _moves(state, parents)
        occupied = {pos + k * strides[i] for i, pos in enumerate(state) for k in range(sizes[i])}
        for i, pos in enumerate(state):
            if sizes[i] == 1:  # a wall
                continue
            for step in (-1, 1):
                head = pos + (sizes[i] * strides[i] if step > 0 else -strides[i])
                if not _inside(pos, head, strides[i]) or head in occupied:
                    continue
                moved = (*state[:i], pos + step * strides[i], *state[i + 1 :])
                if moved not in parents:
                    parents[moved] = (state, i, step)
                    queue.append(moved)
    return None


def _inside(pos: int, cell: int, stride: int) -> bool:
    """Whether `cell`, one step beyond a piece at `pos`, is on the board (a row move stays in its row)."""
    if stride == 1:
        return 0 <= cell < CELLS and cell // ROW == pos // ROW
    return 0 <= cell < CELLS


def _moves(state: Positions, parents: dict[Positions, tuple[Positions, int, int] | None]) -> str:
    """The path to `state` as moves, consecutive steps of one piece in one direction joined (`C+3`)."""
    steps: list[tuple[int, int]] = []
    while (link := parents[state]) is not None:
        state, piece, step = link
        steps.append((piece, step))
    joined: list[list[int]] = []
    for piece, step in reversed(steps):
        if joined and joined[-1][0] == piece and (joined[-1][1] > 0) == (step > 0):
            joined[-1][1] += step
        else:
            joined.append([piece, step])
    return " ".join(f"{chr(ord('A') + piece)}{steps_:+d}" for piece, steps_ in joined)


def boxnet(initial_state: dict[str, list[str]]) -> str:
    """A plan that walks each box, one action per step, row first then column, to a target of its colour
    and matches it there: the JSON list of action dicts the dataset asks for."""
    targets: dict[str, list[tuple[float, float]]] = {}
    boxes: list[tuple[str, tuple[float, float]]] = []
    for square, items in initial_state.items():
        where = tuple(float(v) for v in square.split("_"))
        for item in items:
            if item.startswith("target_"):
                targets.setdefault(item[len("target_") :], []).append((where[0], where[1]))
            elif item.startswith("box_"):
                boxes.append((item[len("box_") :], (where[0], where[1])))
    plan: list[dict[str, str]] = []
    for colour, (row, col) in boxes:
        goal_row, goal_col = targets[colour].pop()
        while (row, col) != (goal_row, goal_col):
            next_row = row + (goal_row > row) - (goal_row < row)
            next_col = col if next_row != row else col + (goal_col > col) - (goal_col < col)
            plan.append({_agent(row, col): f"move(box_{colour}, square[{next_row}, {next_col}])"})
            row, col = next_row, next_col
        plan.append({_agent(row, col): f"move(box_{colour}, target_{colour})"})
    return json.dumps(plan)


def _agent(row: float, col: float) -> str:
    return f"Agent[{row}, {col}]"


def solve(name: str, metadata: dict[str, Any]) -> str | None:
    """The solver's answer for an item of dataset `name`, or None for a dataset without a solver."""
    if name == "rush_hour":
        return rush_hour(metadata["board_config"])
    if name == "boxnet":
        return boxnet(metadata["initial_state"])
    return None
