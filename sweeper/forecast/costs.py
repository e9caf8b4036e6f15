"""What a trial process costs besides its steps, by device: set-up, and torch.compile once per
graph, cold or from the sweep's compile cache, float8's graphs at their own price, a model compiled
block by block (runtime.compile_unit=block) at a few layers' price. Pure.

Where a device's costs were measured on our GPU hosts, they are that device's (with the run that
measured them); any other GPU is priced with the H200's, the one GPU whose trials left raw files
(docs/gpu/2026-11-26-h200), and a CPU with a generic model sized by depth, erring long. A later
process of a graph that is in the compile cache loads it (FX graph and AOTAutograd entries) instead
of compiling. A float8 graph (torchao's float8 linears) gets no AOTAutograd cache entry (torchao
0.18 builds config objects and allow_in_graph autograd functions inside the graph, which that cache
refuses to key), so a later process finds Inductor's kernels in the FX-graph cache but traces
autograd again: it is priced at FLOAT8_WARM_SHARE of its cold compile, which the plan says.
"""

from __future__ import annotations

from dataclasses import dataclass

from train.core.chips import chip_for

# The generic model by depth, a CPU's until its own sweeps calibrate it (GPUs are priced from a
# GPU's measured trials, below). Process start to first step: imports, model build and init,
# optimizer, data; first fitted to gpt2-xl on an H100 (2026-11-23, no raw file: 10 + 0.6 x 48 =
# 39 s), kept as the long-erring generic shape. The "cuda" base is a process that imports torch and
# opens CUDA (the lease's device probe).
SETUP_BASE_S = {"cuda": 10.0, "cpu": 2.0}
SETUP_PER_LAYER_S = 0.6
# torch.compile of the first step, generic: 87 s for gpt2-xl (48 layers) with mode=default (the same
# H100, no raw file); autotuning modes benchmark kernel choices on top: a guess of AUTOTUNE_FACTOR
# times as long, not measured here (every device).
COMPILE_PER_LAYER_S = 87.0 / 48
AUTOTUNE_FACTOR = 3.0
# runtime.compile_unit=block compiles one block's graph, which every block reuses, and the head's
# (train/model/regional.py): its compile is priced as a whole-model compile of this many layers,
# whatever the depth. Measured on this 2-core CPU at gpt2-xl's depth, docs/bench/
# compile_unit-2026-11-28-cpu.txt (scripts/bench/compile_unit.py, 2026-11-28: tiny at 48 layers,
# every compile cold, medians of 3 interleaved pairs: whole model 52.5 s, block 11.4 s, so
# 48 x 11.4 / 52.5 = 10.4 layers; 24 layers gave 9.1 the day before). Inductor's CPU ISA probe
# (~5 s) is left in both, which prices a block long. On a GPU it is projected, not measured.
BLOCK_UNIT_LAYERS = 48 * 11.4 / 52.5
# A compile whose graph is in the cache, generic: DESIGN.md measured the first compiled step of a
# 2-layer GPT at 25-40 s on this CPU and ~3 s in a later process reusing the on-disk cache.
WARM_COMPILE_SHARE = 0.1
# A float8 graph from the cache (FX-graph hits, autograd traced again), as a share of its cold
# compile: measured on this 2-core CPU, docs/bench/float8_cache-2026-11-28-cpu.txt
# (scripts/bench/float8_cache.py, 2026-11-28: tiny at gpt2-xl's 48 layers, tensorwise emulated,
# whole model, medians of 2 interleaved pairs: cold 126.8 s less Inductor's CPU ISA probe, warm
# 56.7 s). The same run's bf16 share, 0.069, is near the H200's measured 5.2 / 62.9 = 0.083. No
# GPU has run a second float8 process yet: projected there.
FLOAT8_WARM_SHARE = 56.7 / 126.8
# What float8 adds to a cold compile is per layer traced (torchao's casts and scales in every
# linear), so block by block it adds less: on this CPU a float8 graph's cold compile (less the ISA
# probe) is 126.8 / 59.1 = 2.15x a bf16 one's for the whole model and 10.7 / 8.2 = 1.30x block by
# block (docs/bench/float8_cache-2026-11-28-cpu.txt, both units): block keeps this share of the
# whole model's extra, applied to a device's measured whole-model factor (projected on a GPU).
FLOAT8_BLOCK_EXTRA_SHARE = (10.7 / 8.2 - 1) / (126.8 / 59.1 - 1)


@dataclass(frozen=True, kw_only=True)
class ProcessCosts:
    """One device's non-step costs of a trial process (seconds)."""

    source: str
    measured_on: str | None = None  # the chip table's key of the GPU that measured them
    float8_factor: float  # a float8 graph's cold compile over a bf16 one's
    # step-to-step coefficient of variation of a compute-bound step, for trial.target_ci's early
    # stop (train/core/window_ci.py); a sweep's own trials replace it (sweeper/plan/calibration.py)
    step_cv: float
    n_layer: int = 48  # the depth the compile figures were measured at (scaled linearly by depth)
    setup_s: float | None = None  # process start to first step; None: the generic depth model
    # a bf16 graph's first compile (mode=default); None: generic
    compile_cold_s: float | None = None
    compile_warm_s: float | None = None  # the graph from the compile cache; None: a share of cold
    # the measurements behind compile_warm_s and float8_factor, as the plan's sources quote them
    # (e.g. "5.2 s, 5.2 s"); empty where none
    warm_detail: str = ""
    float8_detail: str = ""


# A float8 graph's cold compile over a bf16 one's, measured on one GPU only: the H200 (163.2 s
# against 62.9 s, docs/gpu/2026-11-26-h200), used for every GPU without a measurement of its own;
# this CPU measured 2.15x at the same depth (docs/bench/float8_cache-2026-11-28-cpu.txt), so a
# float8 compile priced as bf16's would be known to be short.
H200_FLOAT8_FACTOR = 163.2 / 62.9
# The step-time CV of gpt2-xl's steps on the H200, the largest of its five result files
# (docs/gpu/2026-11-26-h200: result-0..3.json and f8_tensorwise.json, step_time_s.cv 0.02-0.49%
# over 2-3 steps each; result-2.json's two real full steps gave 0.49%), used for every GPU without
# its own. Small samples: the forecast's window is the same for any CV up to 0.8% (3 steps,
# ci_min_steps; 1% would be 4), so its error would have to be 1.6x to change the plan.
H200_STEP_CV = 0.0049

# A CPU's (device name ""): sized by depth, until its own sweeps calibrate it (sweeper/plan/
# calibration.py).
GENERIC = ProcessCosts(
    source="generic: sized by depth", float8_factor=H200_FLOAT8_FACTOR, step_cv=H200_STEP_CV
)

# Measured by our GPU leases' own trials (result.json: wall_s, warmup_s, compile.cache).
# docs/gpu/2026-11-26-h200: gpt2-xl, 1,048,576 tokens a step; set-up (wall - warm-up - window)
# 23.8-30.7 s over 5 processes, with the model built and initialised on the host (before the meta
# device build); cold bf16 compiles 68.2 and 57.5 s, cache hits 5.2 and 5.2 s; float8 tensorwise
# cold 163.2 s (2.6x), its graph with no AOTAutograd cache entry. The set-up is not scaled by
# depth (one depth measured): it errs long for shallower models.
H200 = ProcessCosts(
    setup_s=26.6,
    compile_cold_s=62.9,
    compile_warm_s=5.2,
    float8_factor=H200_FLOAT8_FACTOR,
    step_cv=H200_STEP_CV,
    warm_detail="5.2 s, 5.2 s",
    float8_detail="163.2 s against 62.9 s",
    source="measured on an H200, docs/gpu/2026-11-26-h200",
    measured_on="h200",
)
# By the chip table's key (train/core/chips.py). Any other GPU is priced with the H200's figures
# (GPU_DEFAULT): the H100's of 2026-11-23 (a 39 s set-up, an 87 s cold compile) left no raw file,
# so they price nothing (docs/gpu-evidence.md says so).
MEASURED: dict[str, ProcessCosts] = {c.measured_on: c for c in (H200,) if c.measured_on}
GPU_DEFAULT = H200


def costs_for(device_name: str) -> ProcessCosts:
    """The GPU's measured costs, else the H200's (GPU_DEFAULT); a CPU's ("") GENERIC."""
    if not device_name:
        return GENERIC
    chip = chip_for(device_name)
    return MEASURED.get(chip.key, GPU_DEFAULT) if chip else GPU_DEFAULT


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
    float8_factor = costs.float8_factor if float8 else 1.0
    if unit == "block":  # one block's graph, reused: a few layers' compile at any depth
        n_layer = min(n_layer, BLOCK_UNIT_LAYERS)
        float8_factor = 1 + (float8_factor - 1) * FLOAT8_BLOCK_EXTRA_SHARE
    autotune = AUTOTUNE_FACTOR if "autotune" in mode else 1.0
    if costs.compile_cold_s is not None:
        cold = costs.compile_cold_s * n_layer / costs.n_layer
    else:
        cold = COMPILE_PER_LAYER_S * n_layer
    cold *= autotune * float8_factor
    if not warm:
        return cold
    if float8:  # its kernels from the cache, its autograd traced again
        return FLOAT8_WARM_SHARE * cold
    if costs.compile_warm_s is not None:
        return costs.compile_warm_s * n_layer / costs.n_layer
    return WARM_COMPILE_SHARE * cold


def uncached_note(*, float8: bool) -> str:
    """How a graph in the cache is priced where it is not simply loaded ('' where it is)."""
    if float8:
        return (
            f"float8 graphs get no AOTAutograd cache entry (torchao's float8 linears): kernels "
            f"from the cache, autograd traced again, {FLOAT8_WARM_SHARE:.0%} of a cold compile "
            f"(measured on a CPU)"
        )
    return ""
