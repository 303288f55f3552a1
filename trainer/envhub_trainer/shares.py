"""How rank 0 hands every rank its share of a step's samples under data parallel, and says stop.

Rank 0 plays the episodes and builds the samples; each rank (rank 0 included) then trains on its share
(`grpo.train_share`). The other ranks wait in `received()` for the next share, which ends when rank 0
sends `None`. One process (no data parallel) hands itself the whole step.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from envhub_trainer import distributed
from envhub_trainer.samples import TrainSample
from envhub_trainer.shared_prompt import row_width, shared_rows

log = logging.getLogger(__name__)


@dataclass
class Share:
    """One rank's part of a step, as rank 0 hands it out (the whole step in a single-process run)."""

    samples: list[TrainSample]
    pad_id: int
    checkpoint: bool
    """A checkpoint follows this step: every rank helps gather the optimiser state for it."""


def hand_out(samples: list[TrainSample], pad_id: int, checkpoint: bool, *, share_prompts: bool) -> Share:
    """Rank 0: every rank's share of the samples (`split`); returns rank 0's own."""
    parts = split(samples, distributed.world_size(), share_prompts=share_prompts)
    handed: Share = distributed.scatter(
        [Share([samples[i] for i in part], pad_id, checkpoint) for part in parts]
    )
    return handed


def split(samples: list[TrainSample], ranks: int, *, share_prompts: bool) -> list[list[int]]:
    """Sample indices for each rank, balanced by the tokens each rank runs through the model.

    With `share_prompts`, the samples of one prompt go to one rank (split only where a row would pass
    `ROW_TOKENS`), so the prompt runs once in the step, not once on every rank holding some of them."""
    everything = list(range(len(samples)))
    if share_prompts:
        units = shared_rows(samples, everything, per_row=max(len(samples), 1))
    else:
        units = [[i] for i in everything]
    tokens = [row_width(samples, unit) for unit in units]  # a sample alone: its length
    return [sorted(i for u in part for i in units[u]) for part in distributed.balance(tokens, ranks)]


def received() -> Iterator[Share]:
    """Every rank but 0: the shares rank 0 hands out, one per step, until it sends a stop."""
    while (share := distributed.scatter(None)) is not None:
        yield share


def stop_followers() -> None:
    """Rank 0 is done (or failed between steps, while the others wait for a share): `received` ends.

    Best effort: if a rank is gone, its launcher (`launch.py` or torchrun) reports it and ends the rest."""
    try:
        distributed.scatter([None] * distributed.world_size())
    except Exception as error:
        log.warning("could not tell the other ranks to stop: %s", error)
