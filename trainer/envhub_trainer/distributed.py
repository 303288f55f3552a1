"""Data parallel training over several processes with FSDP2 (`torch.distributed.fsdp.fully_shard`).

Each rank trains on its own share of the step's samples. Two things keep the update exactly the
single-process one: the loss denominator is computed from the trained-token lengths of EVERY rank
(all-reduced before the first micro-batch), and gradients are summed across ranks, not averaged
(FSDP2's reduce-scatter averages, so the loss is multiplied by the world size). FSDP2 also needs every
rank to run the same number of forward passes, so ranks with fewer micro-batches run empty ones.

A data-parallel run (`data_parallel: N`, started by `launch.py`) shares one step like this: rank 0 rolls
out and builds the samples, `scatter` hands each rank its `balance`d share, every rank runs `train_step`
and then `full_state_dict` (rank 0 syncs its engine from it) and, for a checkpoint, `optimiser_state`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist


def active() -> bool:
    """Whether this process trains as one rank of several. A process group of one is not: vLLM in this
    process makes one for itself (gloo, world size 1), and taking it for data parallel turned off the
    one-process paths (in-place gradient accumulation) and sent every figure through an all-reduce."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def shard(model: Any) -> Any:
    """Shard every decoder layer, then the rest (embeddings, norm, head), across the ranks (FSDP2)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    # The trainer computes on CPU (forward.py builds CPU tensors): without a CPU mesh, fully_shard
    # would move the shards to a GPU whenever the machine has one.
    mesh = init_device_mesh("cpu", (world_size(),))
    layers = getattr(getattr(model, "model", None), "layers", None)
    for layer in layers or []:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
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


def global_token_means(means: dict[str, float], tokens: int) -> dict[str, float]:
    """Per-token means of this rank's `tokens` combined with every other rank's into the step's: weighted
    by token count, except `*_min` / `*_max`, which take the extremes of the ranks that had tokens."""
    if not active():
        return means
    keys = sorted(means)
    sums = torch.tensor([means[k] * tokens for k in keys] + [tokens], dtype=torch.float64)
    low = torch.tensor([means[k] if tokens else math.inf for k in keys], dtype=torch.float64)
    high = torch.tensor([means[k] if tokens else -math.inf for k in keys], dtype=torch.float64)
    dist.all_reduce(sums)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    out: dict[str, float] = {}
    for i, key in enumerate(keys):
        extreme = low[i] if key.endswith("_min") else high[i] if key.endswith("_max") else None
        if extreme is None:
            out[key] = float(sums[i] / max(float(sums[-1]), 1.0))
        else:
            out[key] = float(extreme) if math.isfinite(extreme) else means[key]  # no rank had tokens
    return out


def full_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """Every parameter and buffer as a whole tensor (a collective: every rank must call it), e.g. to sync
    the rollout engine or save a checkpoint. Tied weights (one tensor under two names) stay one tensor,
    gathered once, so `save_pretrained` still writes them once."""
    first_name: dict[int, str] = {}
    alias = {
        name: first_name.setdefault(id(parameter), name)
        for name, parameter in model.named_parameters(remove_duplicate=False)
    }
    out: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        if alias.get(name, name) in out:  # the same on every rank: each runs the same gathers
            out[name] = out[alias[name]]
            continue
        full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
        out[name] = full.detach()
    return out


def balance(lengths: Sequence[int], ranks: int) -> list[list[int]]:
    """Indices of `lengths` split into `ranks` shares of near-equal total length, each in index order.

    Longest first, each to the share with the fewest tokens so far (ties: the lower rank), so the split
    is the same every time for the same lengths, and no rank waits long for the slowest in the step's
    collectives."""
    shares: list[list[int]] = [[] for _ in range(ranks)]
    totals = [0] * ranks
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        smallest = min(range(ranks), key=lambda r: (totals[r], r))
        shares[smallest].append(index)
        totals[smallest] += lengths[index]
    return [sorted(share) for share in shares]


def scatter(objects: list[Any] | None) -> Any:
    """Rank 0's `objects[r]` to each rank r (any picklable object). Every rank calls it; only rank 0
    passes the list."""
    if not active():
        assert objects is not None
        return objects[0]
    received: list[Any] = [None]
    dist.scatter_object_list(received, objects if rank() == 0 else None, src=0)
    return received[0]


def optimiser_state(model: Any, optimiser: torch.optim.Optimizer) -> dict[str, Any]:
    """The whole optimiser state in torch's own format (parameters by index), as one process would save
    it, so a checkpoint resumes with any number of ranks. A collective under data parallel: shards are
    gathered to rank 0's CPU; the other ranks get {}."""
    if not active():
        return optimiser.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    by_name: dict[str, Any] = get_optimizer_state_dict(model, optimiser, options=options)
    if not by_name:
        return {}
    index = {name: i for i, (name, _) in enumerate(model.named_parameters())}  # tied weights: first name
    return {
        "state": {index[name]: value for name, value in by_name["state"].items() if name in index},
        "param_groups": [
            {**group, "params": [index[name] for name in group["params"] if name in index]}
            for group in by_name["param_groups"]
        ],
    }


def load_optimiser_state(model: Any, optimiser: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load what `optimiser_state` saved (every rank passes the whole state; each keeps its shards)."""
    if not active():
        optimiser.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    names = [name for name, _ in model.named_parameters()]
    by_name: dict[str, Any] = {
        "state": {names[i]: value for i, value in state["state"].items()},
        "param_groups": [
            {**group, "params": [names[i] for i in group["params"]]} for group in state["param_groups"]
        ],
    }
    set_optimizer_state_dict(model, optimiser, by_name, options=StateDictOptions(full_state_dict=True))
