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
    FLOAT8_WARM_SHARE,
    compile_s,
    costs_for,
    setup_s,
)
from sweeper.forecast.trial import CHECKPOINT_BYTES_PER_PARAM, WRITE_BYTES_PER_S
from sweeper.plan.unit_choice import REGION_HOST_S
from sweeper.plan.wall import SWEEP_OVERHEAD_S
from sweeper.space.limits import ASSUMED_MFU, COMPILED_GPU_MFU
from train.core.chips import chip_for

Basis = Literal["measured", "measured elsewhere", "assumed"]
BASES: tuple[Basis, ...] = ("measured", "measured elsewhere", "assumed")

Unit = Literal["s", "x", "share", "layers", "GB/s", "us"]

H200, H100 = "h200", "h100-sxm"  # train/core/chips.py keys of the GPUs our leases measured
H200_RUN = "docs/gpu/2026-11-26-h200, 2026-11-26"
H100_README = "an H100 SXM, 2026-11-23, recorded in docs/gpu-evidence.md only (no raw file)"
CPU = "on this project's 2-core CPU"
# the sources of the figures measured elsewhere or assumed, whatever the plan's device
BLOCK_SRC = f"{CPU}, docs/bench/compile_unit-2026-11-28-cpu.txt (projected on a GPU)"
FLOAT8_WARM_SRC = f"{CPU}, docs/bench/float8_cache-2026-11-28-cpu.txt"
COMPILED_MFU_SRC = f"gpt2-xl on an H200, 50.9% and 52.4% in real full steps, {H200_RUN}"
EAGER_MFU_SRC = f"gpt2-xl eager on {H100_README}: 32.2%"
REGION_SRC = f"torch.profiler {CPU}, docs/benchmarks.md 'Compile unit', 2026-11-28"
WRITE_SRC = f"a conservative local disk; {CHECKPOINT_BYTES_PER_PARAM} bytes a parameter"
OVERHEAD_SRC = f"seen {CPU} (imports, probe, zygote, report), no file kept"
CV_SRC = f"gpt2-xl on an H200, the largest of 5 result files' step_time_s.cv, {H200_RUN}"


@dataclass(frozen=True, kw_only=True)
class PriceSource:
    """One figure the plan is priced with."""

    what: str  # the figure, in a few words
    value: float
    unit: Unit
    basis: Basis  # measured on this device class, measured elsewhere (a CPU, another GPU), assumed
    source: str  # the file and date, or why it is assumed


def _quoted(detail: str) -> str:
    """A measurement's detail in brackets after its source, or nothing."""
    return f" ({detail})" if detail else ""


def price_sources(*, device_name: str, device_type: str, n_layer: int) -> list[PriceSource]:
    """The figures a plan of an `n_layer` model on `device_name` is priced with, in the order a
    trial spends them."""
    if device_type != "cuda":  # no GPU figure to trace: a CPU plan learns from its own sweeps
        return []
    c = costs_for(device_name)
    where = c.source.removeprefix("measured ")  # "on an H200, docs/gpu/..."
    chip = chip_for(device_name)

    def on(key: str | None) -> Basis:
        """Measured on this kind of GPU, or on another."""
        return "measured" if chip is not None and chip.key == key else "measured elsewhere"

    own = on(c.measured_on)  # the trial costs: this GPU's, or the H200's (costs.GPU_DEFAULT)
    cold_s = compile_s(c, mode="default", n_layer=n_layer, float8=False)  # the forecast's own
    elsewhere: Basis = "measured elsewhere"
    meta = "before the model was built on the meta device"
    rows: list[tuple[str, float, Unit, Basis, str]] = [
        (
            "trial set-up",
            setup_s(c, device_type="cuda", n_layer=n_layer),
            "s",
            own,
            f"{where} ({meta})",
        ),
        ("cold compile, bf16 model", cold_s, "s", own, f"{where}, scaled by depth"),
        ("block compile, as layers", BLOCK_UNIT_LAYERS, "layers", elsewhere, BLOCK_SRC),
        (
            "cached compile, bf16 model",
            compile_s(c, mode="default", n_layer=n_layer, float8=False, warm=True),
            "s",
            own,
            f"{where}{_quoted(c.warm_detail)}, scaled by depth",
        ),
        ("float8 compile factor", c.float8_factor, "x", own, f"{where}{_quoted(c.float8_detail)}"),
        ("float8 cached share", FLOAT8_WARM_SHARE, "share", elsewhere, FLOAT8_WARM_SRC),
        ("autotune factor", AUTOTUNE_FACTOR, "x", "assumed", "not measured"),
        ("compiled step MFU", COMPILED_GPU_MFU, "share", on(H200), COMPILED_MFU_SRC),
        ("eager step MFU", ASSUMED_MFU, "share", on(H100), EAGER_MFU_SRC),
        ("step-time CV", c.step_cv, "share", own, CV_SRC),
        ("checkpoint write rate", WRITE_BYTES_PER_S / 1e9, "GB/s", "assumed", WRITE_SRC),
        ("block call host work", REGION_HOST_S * 1e6, "us", elsewhere, REGION_SRC),
        ("sweep start and end", SWEEP_OVERHEAD_S, "s", "assumed", OVERHEAD_SRC),
    ]
    return [PriceSource(what=w, value=v, unit=u, basis=b, source=t) for w, v, u, b, t in rows]
