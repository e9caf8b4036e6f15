"""The levers of a compute-bound step (issue 22): what changes the kernels and what is recomputed,
each with its expected gain, and only those that apply to the trial's device and config.

Two kinds of expected gain, labelled as such in each fix's basis:
- arithmetic on the trial's own numbers: recompute adds the forward FLOPs of the checkpointed
  blocks (every block: ~8N instead of 6N per token), so not recomputing gives at most their
  ratio over the compute share (Amdahl); attention is 12LHQT of the 6N + 12LHQT FLOPs;
- public evidence, not measured here, quoted as published: float8 training on H100s (torchao's
  float8 README: +25% tensorwise, +10% rowwise on Llama3-8B; torchtitan's Llama3-8B: +28%;
  nanochat's d26, an MLP of 1664 x 6656 close to GPT-2 XL's 1600 x 6400: 1.17x tensorwise,
  0.90x rowwise) and FlashAttention-3 on H100 (Shah et al. 2024: 1.5-2.0x FA2's attention
  throughput in bf16/fp16, forward).

Pure and torch-free: plain result dicts in; out, each lever as (its kind, the trainer keys it sets,
its expected gain, the numbers the gain came from), which train/core/bottleneck_fixes.py makes a
`Fix` and train/core/diagnosis_text.py says.
"""

from __future__ import annotations

import math
from typing import Any

from train.core.chips import chip_for
from train.core.rules import FLOAT8_MIN_CAPABILITY, num_checkpointed_blocks

# float8 tensorwise end to end on an H100, from the closest public shape to GPT-2 XL (nanochat
# d26); torchao's and torchtitan's Llama3-8B figures (+25%, +28%) are larger models' wider MLPs.
FLOAT8_TENSORWISE_EVIDENCE = 1.17
# FA3 over FA2's attention kernels on H100 (Shah et al. 2024, "FlashAttention-3"), upper end.
FA3_ATTENTION_SPEEDUP = 2.0
FA3_CAPABILITY = (9, 0)  # Hopper only (torch/nn/attention/_fa3.py: "FA3 requires compute 9.0")


def amdahl(share: float, speedup: float) -> float:
    """Whole-step speed-up when `share` of it gets `speedup`x faster (inf: the share vanishes)."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be in [0, 1], got {share}")
    rest = share / speedup if math.isfinite(speedup) else 0.0
    return 1.0 / ((1.0 - share) + rest) if (1.0 - share) + rest > 0 else math.inf


def _shape(cfg: dict[str, Any]) -> tuple[float, float, int, int] | None:
    """(6N, 12LHQT, n_layer, n_embd) per token from the result's model config (N ~ 12 L C^2 +
    V C), or None where the config lacks the shape."""
    m = cfg.get("model") or {}
    if not all(
        isinstance(m.get(k), int) for k in ("n_layer", "n_embd", "block_size", "vocab_size")
    ):
        return None
    n_layer, c = m["n_layer"], m["n_embd"]
    six_n = 6.0 * (12 * n_layer * c * c + m["vocab_size"] * c)
    attn = 12.0 * n_layer * c * m["block_size"]  # 12 L H Q T with H Q = C
    return six_n, attn, n_layer, c


# (kind, changes, expected gain, the numbers it came from); kinds are bottleneck_fixes.FixKind's
Lever = tuple[str, dict[str, Any], float, dict[str, Any]]


def recompute_levers(result: dict, compute_share: float) -> list[Lever]:
    """Fixes for a trial that recomputes blocks: keep them (memory permitting), or recompute only
    pointwise ops."""
    cfg = result.get("config") or {}
    rt = cfg.get("runtime") or {}
    policy = str(rt.get("activation_checkpointing") or "none")
    shape = _shape(cfg)
    if policy in ("none", "selective") or shape is None:
        return []
    six_n, attn, n_layer, c = shape
    recomputed = num_checkpointed_blocks(n_layer, policy) / n_layer
    block_fwd = (2.0 * 12 * n_layer * c * c + attn / 3) * recomputed  # their forward, again
    flops_ratio = (six_n + attn + block_fwd) / (six_n + attn)
    gain = amdahl(compute_share, flops_ratio)
    numbers = {"policy": policy, "recomputed": recomputed, "flops_ratio": flops_ratio}
    return [
        (
            "keep_blocks",
            {"runtime.activation_checkpointing": "none", "runtime.loss": "chunked"},
            gain,
            numbers,
        ),
        ("recompute_selective", {"runtime.activation_checkpointing": "selective"}, gain, numbers),
    ]


def precision_levers(result: dict, compute_share: float) -> list[Lever]:
    """float8 tensorwise and FA3 attention, where the device has them (compute capability by
    name, train/core/chips.py), with their expected gains."""
    dev = result.get("device") or {}
    if dev.get("type") != "cuda":
        return []
    chip = chip_for(str(dev.get("name") or ""))
    cap = chip.capability if chip else None
    cfg = result.get("config") or {}
    rt = cfg.get("runtime") or {}
    fixes: list[Lever] = []
    if cap is not None and cap >= FLOAT8_MIN_CAPABILITY and (rt.get("float8") or "none") == "none":
        changes = {"runtime.float8": "tensorwise"}
        if dev.get("dtype") != "bf16":
            changes["runtime.dtype"] = "bf16"  # float8 needs bf16 (train/core/rules.py)
        fixes.append(("float8", changes, FLOAT8_TENSORWISE_EVIDENCE, {}))
    shape = _shape(cfg)
    if cap == FA3_CAPABILITY and rt.get("attention") not in ("fa3", "fa4") and shape:
        six_n, attn = shape[:2]
        share = compute_share * attn / (six_n + attn)
        fixes.append(
            (
                "fa3",
                {"runtime.attention": "fa3"},
                amdahl(share, FA3_ATTENTION_SPEEDUP),
                {"attention_share": attn / (six_n + attn), "speedup": FA3_ATTENTION_SPEEDUP},
            )
        )
    return fixes
