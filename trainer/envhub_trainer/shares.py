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

log = logging.getLogger(__name__)


@dataclass
class Share:
    """One rank's part of a step, as rank 0 hands it out (the whole step in a single-process run)."""

    samples: list[TrainSample]
    pad_id: int
    checkpoint: bool
    """A checkpoint follows this step: every rank helps gather the optimiser state for it."""


def hand_out(samples: list[TrainSample], pad_id: int, checkpoint: bool) -> Share:
    """Rank 0: every rank's share of the samples, balanced by token count; returns rank 0's own."""
    split = distributed.balance([len(s.token_ids) for s in samples], distributed.world_size())
    handed: Share = distributed.scatter(
        [Share([samples[i] for i in part], pad_id, checkpoint) for part in split]
    )
    return handed


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
