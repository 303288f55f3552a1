"""Data parallel training over several processes with FSDP2 (`torch.distributed.fsdp.fully_shard`).

Each rank trains on its own share of the step's samples. Two things keep the update exactly the
single-process one: the loss denominator is computed from the trained-token lengths of EVERY rank
(all-reduced before the first micro-batch), and gradients are summed across ranks, not averaged
(FSDP2's reduce-scatter averages, so the loss is multiplied by the world size). FSDP2 also needs every
rank to run the same number of forward passes, so ranks with fewer micro-batches run empty ones.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def active() -> bool:
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def shard(model: Any) -> Any:
    """Shard every decoder layer, then the rest (embeddings, norm, head), across the ranks (FSDP2)."""
    from torch.distributed.fsdp import fully_shard

    layers = getattr(getattr(model, "model", None), "layers", None)
    for layer in layers or []:
        fully_shard(layer)
    fully_shard(model)
    return model


def global_lengths(lengths: list[int]) -> tuple[int, int]:
    """(sum of trained tokens, number of trained sequences) over every rank's samples."""
    totals = torch.tensor([sum(lengths), sum(1 for n in lengths if n > 0)], dtype=torch.float64)
    if active():
        dist.all_reduce(totals)
    return int(totals[0]), int(totals[1])


def global_max(value: int) -> int:
    """The largest `value` of any rank (e.g. the micro-batch count every rank must run)."""
    if not active():
        return value
    tensor = torch.tensor([value], dtype=torch.long)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor[0])


def global_sum(values: list[float]) -> list[float]:
    if not active():
        return values
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor)
    return [float(v) for v in tensor]


def full_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """Every parameter and buffer as a whole tensor (a collective: every rank must call it), e.g. to sync
    the rollout engine or save a checkpoint."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
        out[name] = full.detach()
    return out
