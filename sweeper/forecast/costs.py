"""What a trial process costs besides its steps, by device: set-up, and torch.compile once per
graph, cold or from the sweep's compile cache, float8's graphs at their own price, a model compiled
block by block (runtime.compile_unit=block) at a few layers' price. Pure.

Where a device's costs were measured on our GPU hosts, they are that device's (with the run that
measured them); elsewhere a generic model sized by depth, erring long. A later process of a graph
that is in the compile cache loads it (FX graph and AOTAutograd entries) instead of compiling; a
float8 graph (torchao's float8 linears) got no AOTAutograd cache entry on the H200 (hits 0, misses
0), so inductor's cached kernels are found but autograd is traced again: it is priced cold every
time, which the plan says.
"""

from __future__ import annotations

from dataclasses import dataclass

from train.core.chips import chip_for

# Process start to first step, generic: CUDA context, model build and init, optimizer, data, NVML.
# Fitted to gpt2-xl on an H100 (2026-11-23, README only, no raw file): a 45 s trial process of which
# 7 s were steps (10 + 0.6 x 48 = 39 s).
SETUP_BASE_S = {"cuda": 10.0, "cpu": 2.0}
SETUP_PER_LAYER_S = 0.6
# torch.compile of the first step, generic: 87 s for gpt2-xl (48 layers) with mode=default on an
# H100 (2026-11-23, README only); autotuning modes benchmark kernel choices on top: a guess of
# AUTOTUNE_FACTOR times as long, not measured here.
COMPILE_PER_LAYER_S = 87.0 / 48
AUTOTUNE_FACTOR = 3.0
# runtime.compile_unit=block compiles one block's graph, which every block reuses, and the head's
# (train/model/regional.py): its compile is priced as a whole-model compile of this many layers,
# whatever the depth. Measured on this 2-core CPU, docs/bench/compile_unit-2026-11-27-cpu.txt
# (scripts/bench/compile_unit.py, 2026-11-27: tiny at 24 layers, every compile cold, medians of 3
# interleaved pairs: whole model 31.8 s, block 12.1 s, so 24 x 12.1 / 31.8 = 9.1 layers). On a
# GPU it is projected, not measured: the same 9.1 layers' worth assumed.
BLOCK_UNIT_LAYERS = 24 * 12.1 / 31.8
# A compile whose graph is in the cache, generic: DESIGN.md measured the first compiled step of a
# 2-layer GPT at 25-40 s on this CPU and ~3 s in a later process reusing the on-disk cache.
WARM_COMPILE_SHARE = 0.1


@dataclass(frozen=True, kw_only=True)
class ProcessCosts:
    """One device's non-step costs of a trial process (seconds)."""

    setup_s: float | None  # process start to first step; None: the generic depth model
    compile_cold_s: float | None  # a bf16 graph's first compile (mode=default); None: generic
    compile_warm_s: float | None  # the same graph from the compile cache; None: a share of cold
    float8_factor: float  # a float8 graph's cold compile over a bf16 one's
    float8_cached: bool  # whether a float8 graph loads from the cache (else priced cold)
    n_layer: int  # the depth the compile figures were measured at (scaled linearly by depth)
    source: str


GENERIC = ProcessCosts(
    setup_s=None,
    compile_cold_s=None,
    compile_warm_s=None,
    float8_factor=1.0,
    float8_cached=True,
    n_layer=48,
    source="generic: sized by depth",
)

# Measured by our GPU leases' own trials (result.json: wall_s, warmup_s, compile.cache), by the
# chip table's key (train/core/chips.py).
MEASURED: dict[str, ProcessCosts] = {
    # docs/gpu/2026-11-26-h200: gpt2-xl, 1,048,576 tokens a step; set-up (wall - warm-up - window)
    # 23.8-30.7 s over 5 processes; cold bf16 compiles 68.2 and 57.5 s, cache hits 5.2 and 5.2 s;
    # float8 tensorwise cold 163.2 s (2.6x), its graph with no AOTAutograd cache entry
    "h200": ProcessCosts(
        setup_s=26.6,
        compile_cold_s=62.9,
        compile_warm_s=5.2,
        float8_factor=163.2 / 62.9,
        float8_cached=False,
        n_layer=48,
        source="measured on an H200, docs/gpu/2026-11-26-h200",
    ),
}


def costs_for(device_name: str) -> ProcessCosts:
    """The device's measured costs, else GENERIC."""
    chip = chip_for(device_name or "")
    return MEASURED.get(chip.key, GENERIC) if chip else GENERIC


def setup_s(costs: ProcessCosts, *, device_type: str, n_layer: int) -> float:
    """A trial process's set-up, start to first step."""
    if costs.setup_s is not None:
        return costs.setup_s
    return SETUP_BASE_S.get(device_type, 10.0) + SETUP_PER_LAYER_S * n_layer


def compile_s(
    costs: ProcessCosts,
    *,
    mode: str,
    n_layer: int,
    float8: bool,
    warm: bool = False,
    unit: str = "model",
) -> float:
    """torch.compile of a graph in `mode` ("none": 0) at `n_layer` layers, the whole model or
    (`unit` block) each block once: its cold compile, or with `warm` its load from the compile
    cache (float8 graphs priced cold where they are not cached)."""
    if not mode or mode == "none":
        return 0.0
    if unit == "block":  # one block's graph, reused: a few layers' compile at any depth
        n_layer = min(n_layer, BLOCK_UNIT_LAYERS)
    autotune = AUTOTUNE_FACTOR if "autotune" in mode else 1.0
    if costs.compile_cold_s is not None:
        cold = costs.compile_cold_s * n_layer / costs.n_layer
    else:
        cold = COMPILE_PER_LAYER_S * n_layer
    cold *= autotune * (costs.float8_factor if float8 else 1.0)
    if not warm or (float8 and not costs.float8_cached):
        return cold
    if costs.compile_warm_s is not None:
        return costs.compile_warm_s * n_layer / costs.n_layer
    return WARM_COMPILE_SHARE * cold


def uncached_note(costs: ProcessCosts, *, float8: bool) -> str:
    """Why a graph is priced cold although it is in the cache ('' where it is not)."""
    if float8 and not costs.float8_cached:
        return (
            "float8 graphs got no AOTAutograd cache entry on this device (torchao's float8 "
            "linears): every process compiles them cold"
        )
    return ""
