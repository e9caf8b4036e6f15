"""The planted precision loss of `hooks.fault=coarse_weights` (test only): after every optimizer
step, every parameter is rounded to COARSE_MANTISSA_BITS bits of mantissa.

A step's update is then mostly rounded away (an update of 6e-4 on a weight of 0.02 is 3%, below
the 1/16 relative spacing of 3 bits; a LayerNorm gain of 1.0 never moves), so the model trains
far slower while each step costs about the same: the kind of math change that wins on speed and
loses the science. The numerics guard (sweeper/verify/guard.py) must catch it; the key counts as
math-changing there (sweeper/space/math_keys.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from train.run.loop import Session

log = logging.getLogger(__name__)

COARSE_MANTISSA_BITS = 3


@torch.no_grad()
def round_mantissa_(t: torch.Tensor, bits: int) -> torch.Tensor:
    """Round `t` in place to `bits` bits of mantissa (frexp's mantissa lies in [0.5, 1))."""
    mantissa, exponent = torch.frexp(t)
    scale = 2.0 ** (bits + 1)
    t.copy_(torch.ldexp(torch.round(mantissa * scale) / scale, exponent))
    return t


def plant_coarse_weights(s: Session, bits: int = COARSE_MANTISSA_BITS) -> None:
    """Round every parameter now and after every later optimizer step."""

    def round_all(*_: object) -> None:
        for p in s.raw_model.parameters():
            round_mantissa_(p.data, bits)

    round_all()
    s.optimizer.register_step_post_hook(round_all)
    log.warning(
        "hooks.fault=coarse_weights: every weight is rounded to %d mantissa bits after "
        "each optimizer step (a planted precision loss, test only)",
        bits,
    )
