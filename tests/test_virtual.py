"""The second device refuses what a GPU refuses and accepts what a GPU accepts: modules moved
with ``.to(x.device)`` and parameters made on a tensor's device."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course.framework.virtual import DeviceMixed, VirtualDevice, run_on_virtual


class MovesItself(nn.Module):
    """As lucidrains' rotary embedding does: a module holding a parameter, moved to the input's
    device inside forward."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner.to(x.device)(x)


class StaysBehind(MovesItself):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def test_a_module_moved_to_the_inputs_device_computes_there() -> None:
    result, where = run_on_virtual(MovesItself(), (torch.randn(4, 3),))
    assert where == ["virtual"] and result.shape == (4, 2)


def test_a_module_left_on_the_cpu_is_refused() -> None:
    with pytest.raises(DeviceMixed):
        run_on_virtual(StaysBehind(), (torch.randn(4, 3),))


def test_a_parameter_made_on_a_tensors_device_lives_there() -> None:
    mode = VirtualDevice()
    with mode:
        x = mode.tag(torch.randn(2, 3))
        made = nn.Parameter(torch.zeros(2, 3, device=x.device))
        left = nn.Parameter(torch.zeros(2, 3))
        assert mode.on_device(made) and not mode.on_device(left)
        with pytest.raises(DeviceMixed):
            left + x
    assert nn.Parameter(torch.zeros(1)).requires_grad  # nn.Parameter as it was, after the mode
