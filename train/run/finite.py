"""Is a training state finite? Asked before every checkpoint save and after every resume.

A run whose loss blew up keeps stepping on NaN weights until something reads the loss; if a
checkpoint is saved meanwhile, `checkpoint.keep` then deletes the last good one to make room for it,
and the good weights are gone. So no state is written before this check says it is finite: the
step's loss, every parameter and every floating-point optimizer tensor (AdamW's moments).

The check is one reduction per tensor group and one sync per device: `torch._foreach_norm` (the L2
norm: NaN and inf propagate into it; ~10x faster on a CPU than the infinity norm, measured on torch
2.13), its finiteness kept on the device, then one `.tolist()` per device. Only a tensor whose
norm is not finite is then looked at element by element, since squares of huge but finite values
can overflow the norm. A save already waits for the device (it reads the state), so ordinary steps
gain no sync;
scripts/bench/finite_check.py measures what the check costs against a step.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn


class NonFiniteState(FloatingPointError):
    """The loss, the weights or the optimizer state is NaN or infinite; nothing was saved.

    A FloatingPointError, so a trial records it as `nan`, as it records a non-finite loss."""


def state_tensors(
    model: nn.Module, optimizer: torch.optim.Optimizer | None
) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of every floating-point parameter and optimizer-state tensor."""
    for name, p in model.named_parameters():
        yield name, p.detach()
    if optimizer is None:
        return
    names = {id(p): name for name, p in model.named_parameters()}
    for param, state in optimizer.state.items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                yield f"optimizer {key} of {names.get(id(param), '?')}", value.detach()


def first_non_finite(named: Iterator[tuple[str, torch.Tensor]]) -> str | None:
    """The name of the first tensor holding a NaN or an infinity, or None when all are finite."""
    groups: dict[tuple[torch.device, torch.dtype], list[tuple[str, torch.Tensor]]] = {}
    for name, t in named:
        if t.numel():
            groups.setdefault((t.device, t.dtype), []).append((name, t))
    if not groups:
        return None
    by_device: dict[torch.device, tuple[list[tuple[str, torch.Tensor]], list[torch.Tensor]]] = {}
    for (device, _), group in groups.items():
        members, flags = by_device.setdefault(device, ([], []))
        members.extend(group)
        found = torch._foreach_norm([t for _, t in group], 2)
        flags.append(torch.stack(list(found)).isfinite())  # stays on the device
    for members, flags in by_device.values():
        finite = torch.cat(flags).tolist()  # the one sync of this device
        for (name, t), ok in zip(members, finite, strict=True):
            # a flagged norm is a NaN or an inf, or squares of huge finite values that overflowed:
            # only an element-wise look tells them apart (rare: a healthy state never gets here)
            if not ok and not bool(torch.isfinite(t).all()):
                return name
    return None


def describe_last_good(path: Path | None) -> str:
    """How a stop names what survives: the newest checkpoint on disk, or that none was saved."""
    if path is None:
        return "no checkpoint was saved before it"
    return f"the last good checkpoint is {path}"


def diverged(
    *, step: int, loss: float, last_good: Path | None, bad: str = "loss"
) -> NonFiniteState:
    """The one-line stop: the step, the loss, the first bad tensor, what is kept and the fix."""
    what = "" if bad == "loss" else f", first non-finite tensor: {bad}"
    return NonFiniteState(
        f"training diverged at step {step}: loss {loss:.6g}{what}; nothing non-finite was saved "
        f"and {describe_last_good(last_good)}; lower optim.lr or set optim.grad_clip > 0, and "
        f"resume with train.resume=force"
    )


def check_state_finite(
    *,
    step: int,
    loss: torch.Tensor,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    last_good: Path | None,
) -> None:
    """Raise `diverged(...)` unless the loss and the whole state are finite."""
    named = [("loss", loss.detach().reshape(1)), *state_tensors(model, optimizer)]
    bad = first_non_finite(iter(named))
    if bad is not None:
        value = float(loss.detach().float().cpu())
        raise diverged(step=step, loss=value, last_good=last_good, bad=bad)
