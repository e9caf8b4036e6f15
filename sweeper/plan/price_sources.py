"""Where each figure that prices a plan comes from: a measurement (its file and date) or an
assumption, for the plan's device. Plan mode prints them under the wall (sweeper/report/
plan_text.py), so a user can see which minutes rest on a measurement and which on a guess.

The figures are the ones the forecast reads (sweeper/forecast/costs.py and trial.py, sweeper/space/
limits.py, sweeper/plan/wall.py and unit_choice.py); a device with measured costs (costs.MEASURED)
gets its own, any other the generic ones. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sweeper.forecast.costs import (
    AUTOTUNE_FACTOR,
    BLOCK_UNIT_LAYERS,
    COMPILE_PER_LAYER_S,
    FLOAT8_WARM_SHARE,
    SETUP_BASE_S,
    SETUP_PER_LAYER_S,
    WARM_COMPILE_SHARE,
    costs_for,
)
from sweeper.forecast.trial import ASSUMED_STEP_CV, CHECKPOINT_BYTES_PER_PARAM, WRITE_BYTES_PER_S
from sweeper.plan.unit_choice import REGION_HOST_S
from sweeper.plan.wall import SWEEP_OVERHEAD_S
from sweeper.space.limits import ASSUMED_MFU, COMPILED_GPU_MFU
from train.core.chips import chip_for

Basis = Literal["measured", "measured elsewhere", "assumed"]
BASES: tuple[Basis, ...] = ("measured", "measured elsewhere", "assumed")

H200, H100 = "h200", "h100-sxm"  # train/core/chips.py keys of the GPUs our leases measured
H200_RUN = "docs/gpu/2026-11-26-h200, 2026-11-26"
H100_README = "an H100 SXM, 2026-11-23, recorded in docs/gpu-evidence.md only (no raw file)"
CPU_BENCH = "on this project's 2-core CPU"


@dataclass(frozen=True, kw_only=True)
class PriceSource:
    """One figure the plan is priced with."""

    what: str  # the figure, in a few words
    value: float
    unit: Literal["s", "x", "share", "layers", "GB/s", "us"]
    basis: Basis  # measured on this device class, measured elsewhere (a CPU, another GPU), assumed
    source: str  # the file and date, or why it is assumed


def price_sources(*, device_name: str, device_type: str, n_layer: int) -> list[PriceSource]:
    """The figures a plan of an `n_layer` model on `device_name` is priced with, in the order a
    trial spends them."""
    if device_type != "cuda":  # no GPU figure to trace: a CPU plan learns from its own sweeps
        return []
    costs = costs_for(device_name)
    where = costs.source.removeprefix("measured ")  # "on an H200, docs/gpu/..."
    chip = chip_for(device_name)

    def on(key: str) -> Basis:
        """Measured on this kind of GPU, or on another."""
        return "measured" if chip is not None and chip.key == key else "measured elsewhere"

    measured = costs.setup_s is not None
    out = [
        PriceSource(
            what="set-up of a trial process",
            value=costs.setup_s if measured else SETUP_BASE_S["cuda"] + SETUP_PER_LAYER_S * n_layer,
            unit="s",
            basis="measured" if measured else on(H100),
            source=f"{where} (before the model was built on the meta device)"
            if measured
            else f"10 s + 0.6 s a layer, fitted to gpt2-xl on {H100_README}",
        ),
        PriceSource(
            what="cold compile, whole model, bf16",
            value=(costs.compile_cold_s or COMPILE_PER_LAYER_S * 48) * n_layer / costs.n_layer,
            unit="s",
            basis="measured" if costs.compile_cold_s is not None else on(H100),
            source=where
            if costs.compile_cold_s is not None
            else f"87 s at 48 layers on {H100_README}, scaled by depth",
        ),
        PriceSource(
            what="a block's compile, in layers of the whole model's",
            value=BLOCK_UNIT_LAYERS,
            unit="layers",
            basis="measured elsewhere",
            source=f"{CPU_BENCH}, docs/bench/compile_unit-2026-11-28-cpu.txt (projected on a GPU)",
        ),
        _warm(costs.compile_warm_s, where),
        PriceSource(
            what="float8 cold compile over bf16's",
            value=costs.float8_factor,
            unit="x",
            basis="measured" if costs.float8_factor != 1.0 else "assumed",
            source=f"{where} (163.2 s against 62.9 s)"
            if costs.float8_factor != 1.0
            else "no GPU of this kind has compiled float8 here: priced as bf16",
        ),
        PriceSource(
            what="float8 from the compile cache, share of its cold compile",
            value=FLOAT8_WARM_SHARE,
            unit="share",
            basis="measured elsewhere",
            source=f"{CPU_BENCH}, docs/bench/float8_cache-2026-11-28-cpu.txt",
        ),
        PriceSource(
            what="autotuning compile modes over mode=default",
            value=AUTOTUNE_FACTOR,
            unit="x",
            basis="assumed",
            source="not measured",
        ),
        PriceSource(
            what="compiled step, share of the dense peak (MFU)",
            value=COMPILED_GPU_MFU,
            unit="share",
            basis=on(H200),
            source=f"gpt2-xl on an H200, 50.9% and 52.4% in real full steps, {H200_RUN}",
        ),
        PriceSource(
            what="eager step, share of the dense peak (MFU)",
            value=ASSUMED_MFU,
            unit="share",
            basis=on(H100),
            source=f"gpt2-xl eager on {H100_README}: 32.2%",
        ),
        PriceSource(
            what="step-time CV (when a window's +-2% interval is reached)",
            value=ASSUMED_STEP_CV["cuda"],
            unit="share",
            basis="assumed",
            source="not measured per step on a GPU yet",
        ),
        PriceSource(
            what="checkpoint write rate",
            value=WRITE_BYTES_PER_S / 1e9,
            unit="GB/s",
            basis="assumed",
            source=f"a conservative local disk; {CHECKPOINT_BYTES_PER_PARAM} bytes a parameter",
        ),
        PriceSource(
            what="host work of a block region's call (compile unit choice)",
            value=REGION_HOST_S * 1e6,
            unit="us",
            basis="measured elsewhere",
            source=f"torch.profiler {CPU_BENCH}, docs/benchmarks.md 'Compile unit', 2026-11-28",
        ),
        PriceSource(
            what="the sweep's start and end",
            value=SWEEP_OVERHEAD_S,
            unit="s",
            basis="assumed",
            source=f"seen {CPU_BENCH} (imports, probe, zygote, report), no file kept",
        ),
    ]
    return out


def _warm(warm_s: float | None, source: str) -> PriceSource:
    if warm_s is not None:
        return PriceSource(
            what="compile from the cache, bf16, whole model",
            value=warm_s,
            unit="s",
            basis="measured",
            source=f"{source} (5.2 s and 5.2 s)",
        )
    return PriceSource(
        what="compile from the cache, share of its cold compile",
        value=WARM_COMPILE_SHARE,
        unit="share",
        basis="measured elsewhere",
        source=f"{CPU_BENCH}: a 2-layer GPT's 25-40 s cold, ~3 s from the cache (DESIGN.md)",
    )
