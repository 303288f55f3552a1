"""A swapped forward lasts exactly the block, even one that raises, and touches no other instance."""

from __future__ import annotations

import pytest
import torch
from envhub_trainer.replaced_forwards import replaceable, replaced_forwards
from torch import nn


def test_forward_is_swapped_for_the_block_and_restored_after_an_error() -> None:
    swapped, other = nn.Linear(2, 2), nn.Linear(2, 2)
    x = torch.ones(1, 2)
    before = swapped(x)

    def run_and_fail() -> None:
        with replaced_forwards({swapped: lambda _x: torch.zeros(1)}):
            assert torch.equal(swapped(x), torch.zeros(1))
            assert torch.allclose(other(x), other.weight @ x[0] + other.bias)  # the class is untouched
            raise RuntimeError("the block fails")

    with pytest.raises(RuntimeError, match="the block fails"):
        run_and_fail()
    assert replaceable(swapped)
    assert torch.equal(swapped(x), before)


def test_a_module_with_a_forward_of_its_own_is_not_replaceable() -> None:
    module = nn.Linear(2, 2)
    assert replaceable(module)
    module.forward = lambda x: x  # type: ignore[method-assign,assignment]
    assert not replaceable(module)
