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
    GENERIC,
    WARM_COMPILE_SHARE,
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
WARM_SHARE_SRC = f"{CPU}: a 2-layer GPT's 25-40 s cold, ~3 s from the cache (DESIGN.md)"
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


def price_sources(*, device_name: str, device_type: str, n_layer: int) -> list[PriceSource]:
    """The figures a plan of an `n_layer` model on `device_name` is priced with, in the order a
    trial spends them."""
    if device_type != "cuda":  # no GPU figure to trace: a CPU plan learns from its own sweeps
        return []
    c = costs_for(device_name)
    where = c.source.removeprefix("measured ")  # "on an H200, docs/gpu/..."
    chip = chip_for(device_name)

    def on(key: str) -> Basis:
        """Measured on this kind of GPU, or on another."""
        return "measured" if chip is not None and chip.key == key else "measured elsewhere"

    cold_s = compile_s(c, mode="default", n_layer=n_layer, float8=False)  # the forecast's own
    elsewhere: Basis = "measured elsewhere"
    rows: list[tuple[str, float, Unit, Basis, str]] = [
        (
            "trial set-up",
            setup_s(c, device_type="cuda", n_layer=n_layer),
            "s",
            *_setup(c.setup_s is not None, on(H100), where),
        ),
        ("cold compile, bf16 model", cold_s, "s", *_measured(c.compile_cold_s, on(H100), where)),
        ("block compile, as layers", BLOCK_UNIT_LAYERS, "layers", elsewhere, BLOCK_SRC),
        _warm(c.compile_warm_s, where),
        ("float8 compile factor", c.float8_factor, "x", *_float8(c is not GENERIC, where)),
        ("float8 cached share", FLOAT8_WARM_SHARE, "share", elsewhere, FLOAT8_WARM_SRC),
        ("autotune factor", AUTOTUNE_FACTOR, "x", "assumed", "not measured"),
        ("compiled step MFU", COMPILED_GPU_MFU, "share", on(H200), COMPILED_MFU_SRC),
        ("eager step MFU", ASSUMED_MFU, "share", on(H100), EAGER_MFU_SRC),
        ("step-time CV", c.step_cv, "share", on(H200), CV_SRC),
        ("checkpoint write rate", WRITE_BYTES_PER_S / 1e9, "GB/s", "assumed", WRITE_SRC),
        ("block call host work", REGION_HOST_S * 1e6, "us", elsewhere, REGION_SRC),
        ("sweep start and end", SWEEP_OVERHEAD_S, "s", "assumed", OVERHEAD_SRC),
    ]
    return [PriceSource(what=w, value=v, unit=u, basis=b, source=t) for w, v, u, b, t in rows]


def _setup(own: bool, generic: Basis, where: str) -> tuple[Basis, str]:
    """A process's set-up: the device's measured one, else the generic fit to an H100's."""
    if own:
        return "measured", f"{where} (before the model was built on the meta device)"
    return generic, f"10 s + 0.6 s a layer, fitted to gpt2-xl on {H100_README}"


def _measured(value: float | None, generic: Basis, where: str) -> tuple[Basis, str]:
    """A cold compile: the device's measured one, else the generic H100 figure by depth."""
    if value is not None:
        return "measured", where
    return generic, f"87 s at 48 layers on {H100_README}, scaled by depth"


def _float8(own: bool, where: str) -> tuple[Basis, str]:
    """float8's compile factor: the device's own, else the H200's (the one GPU that measured it)."""
    if own:
        return "measured", f"{where} (163.2 s against 62.9 s)"
    return "measured elsewhere", f"on an H200 (163.2 s against 62.9 s), {H200_RUN}"


def _warm(warm_s: float | None, where: str) -> tuple[str, float, Unit, Basis, str]:
    """A compile from the cache: the device's measured seconds, else a share measured here."""
    if warm_s is not None:
        return "cached compile, bf16 model", warm_s, "s", "measured", f"{where} (5.2 s, 5.2 s)"
    return "cached compile share", WARM_COMPILE_SHARE, "share", "measured elsewhere", WARM_SHARE_SRC
