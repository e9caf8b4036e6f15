"""Points that cannot win: more activation checkpointing than their micro-batch needs.

Recomputing activations buys memory with compute: at an equal micro-batch, every other knob the
same, a point that recomputes more runs the same matmuls plus the rerun forwards
(sweeper/space/limits.py recompute_factor), so it is slower whenever the point that recomputes
less fits. It is worth running only where it lets a micro-batch fit that would not fit otherwise.
A point is dominated when a cheaper setting of the space's own `runtime.activation_checkpointing`
choices is predicted to fit at its micro-batch (the memory model) and no trial of this sweep ran
out of memory there; such a point is refused like one predicted not to fit, with the point that
beats it named. Pure and torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sweeper.space.limits import recompute_factor
from train.core.keys import MICRO_BATCH, N_LAYER, RECOMPUTE

NO_RECOMPUTE = "none"


def recompute_cost(mode: Any, n_layer: int) -> tuple[float, bool]:
    """How much a recompute setting costs, for ordering: its compute factor, then whether it
    recomputes at all (`selective` reruns no matmul, so its factor is 1, like `none`'s, but it
    still reruns the cheap ops)."""
    name = str(mode or NO_RECOMPUTE)
    return recompute_factor(name, n_layer), name != NO_RECOMPUTE


def cheaper_that_fits(
    full: Mapping[str, Any],
    choices: Sequence[Any],
    *,
    fits: Callable[[Mapping[str, Any]], bool],
) -> Any | None:
    """The cheapest of `choices` that recomputes less than `full` does and `fits` (the memory
    model, and no out-of-memory trial), or None: `full` is not dominated."""
    mine = full.get(RECOMPUTE, NO_RECOMPUTE)
    n_layer = int(full.get(N_LAYER) or 1)
    cost = recompute_cost(mine, n_layer)
    cheaper = sorted(
        (c for c in choices if recompute_cost(c, n_layer) < cost),
        key=lambda c: recompute_cost(c, n_layer),
    )
    for choice in cheaper:
        if fits({**full, RECOMPUTE: choice}):
            return choice
    return None


def dominated_text(full: Mapping[str, Any], cheaper: Any) -> str:
    """The refusal of a dominated point, naming the point that beats it."""
    n_layer = int(full.get(N_LAYER) or 1)
    mine = full.get(RECOMPUTE, NO_RECOMPUTE)
    ours, theirs = recompute_factor(str(mine), n_layer), recompute_factor(str(cheaper), n_layer)
    cost = (
        f"runs {theirs:.2f}x the compute against {ours:.2f}x"
        if theirs < ours  # else selective against none: the same FLOPs, none reruns nothing
        else f"reruns none of the LayerNorms, GELUs and adds that {mine} reruns"
    )
    return (
        f"dominated: runtime.activation_checkpointing={mine} recomputes more than "
        f"batch.micro_batch={full.get(MICRO_BATCH)} needs: {cheaper} is predicted to fit at the "
        f"same micro-batch with the same other knobs and {cost}"
    )
