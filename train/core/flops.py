"""FLOPs per token, a device's peak (the chip table, train/core/chips.py), MFU and the 100%-MFU
step-time floor: pure arithmetic.

No torch here on purpose: everything is table-tested, and the training loop, the sweeper and the
report all share these numbers.

FLOPs per token follow the PaLM paper (Chowdhery et al. 2022, Appendix B), as nanoGPT does:
6N for the weight matmuls (2N forward, 4N backward) plus 12·L·H·Q·T for the attention score and
value matmuls (QK^T and AV, 2·2·T·H·Q per token per layer forward, times 3 for forward+backward).
Causal masking is *not* discounted: fused kernels skip the masked half, but the convention (and
FlopCounterMode) counts the full T×T product, so MFU stays comparable with published numbers.
"""

from __future__ import annotations

import logging
from typing import Any

from train.core.chips import PEAK_DTYPES, Peak, chip_for

log = logging.getLogger(__name__)

# nanoGPT's estimate_mfu divides by this, whatever the device (A100 bf16 dense peak).
NANOGPT_PROMISED_FLOPS = 312e12


def gpt2_num_params(
    *,
    n_layer: int,
    n_embd: int,
    vocab_size: int,
    block_size: int,
    bias: bool = True,
    exclude_position_embedding: bool = True,
) -> int:
    """Parameter count of our GPT (train/model/gpt.py), computed analytically.

    The token embedding is tied to lm_head, so it counts once. Per block (C = n_embd):
    c_attn 3C², attn.c_proj C², mlp.c_fc 4C², mlp.c_proj 4C² = 12C² weights, 2C LayerNorm gains,
    and with bias 3C + C + 4C + C linear biases + 2C LayerNorm biases = 11C.
    """
    c = n_embd
    per_block = 12 * c * c + 2 * c + (11 * c if bias else 0)
    ln_f = c + (c if bias else 0)
    n = n_layer * per_block + vocab_size * c + ln_f
    if not exclude_position_embedding:
        n += block_size * c
    return n


def flops_per_token(
    *,
    n_layer: int,
    n_head: int,
    n_embd: int,
    seq_len: int,
    vocab_size: int,
    num_params: int | None = None,
) -> float:
    """Training FLOPs (forward + backward) per token: 6N + 12·L·H·Q·T.

    N excludes the position embedding (a lookup, not a matmul); when not given it is computed for
    the GPT-2 layout with biases. T is the sequence length actually trained on, not block_size.
    """
    if n_embd % n_head != 0:
        raise ValueError(f"n_embd ({n_embd}) must be divisible by n_head ({n_head})")
    if seq_len <= 0:
        raise ValueError(f"seq_len must be > 0, got {seq_len}")
    if num_params is None:
        num_params = gpt2_num_params(
            n_layer=n_layer, n_embd=n_embd, vocab_size=vocab_size, block_size=seq_len
        )
    head_dim = n_embd // n_head
    return 6.0 * num_params + 12.0 * n_layer * n_head * head_dim * seq_len


def num_params_of(shape: Any, *, exclude_position_embedding: bool = True) -> int:
    """gpt2_num_params of anything with a GPT-2 model's shape attributes (n_layer, n_embd,
    vocab_size, block_size, bias): a ModelConfig, the memory model's inputs."""
    dims = {k: getattr(shape, k) for k in ("n_layer", "n_embd", "vocab_size", "block_size", "bias")}
    return gpt2_num_params(**dims, exclude_position_embedding=exclude_position_embedding)


def flops_per_token_of(shape: Any, *, num_params: int | None = None) -> float:
    """flops_per_token of anything with a GPT-2 model's shape attributes (n_layer, n_head, n_embd,
    vocab_size, block_size), trained on full blocks (T = block_size)."""
    dims = {k: getattr(shape, k) for k in ("n_layer", "n_head", "n_embd", "vocab_size")}
    return flops_per_token(**dims, seq_len=shape.block_size, num_params=num_params)


def mfu_basis(*, dtype: str, float8: str = "none") -> str:
    """What a trial's MFU is measured against, in words. A float8 trial's MFU is bf16-equivalent:
    the same model FLOPs (6N + 12LHQT) per token against the bf16 dense peak, not the float8 peak
    (twice as high on H100/H200), so a float8 win shows as a higher MFU than its bf16 rival's and
    the two stay comparable; it is not the tensor cores' float8 utilisation."""
    if float8 not in (None, "none"):
        return f"bf16-equivalent (float8 {float8} matmuls, against the bf16 dense peak)"
    return f"{dtype} dense peak"


def lookup_peak(device_name: str, dtype: str, *, tf32: bool = False) -> Peak | None:
    """Dense peak FLOP/s for a device and compute dtype, or None when unknown.

    dtype is "bf16" | "fp16" | "tf32" | "fp32"; with dtype "fp32" and tf32=True the matmuls run
    on TF32 tensor cores, so the TF32 peak applies. CPUs and unknown GPUs give None (with a
    warning for unknown GPUs) rather than a borrowed A100 number that would inflate MFU.
    """
    if dtype not in PEAK_DTYPES:
        raise ValueError(f"dtype must be one of {PEAK_DTYPES}, got {dtype!r}")
    if device_name.strip().lower() == "cpu":
        return None
    chip = chip_for(device_name)
    if chip is None or chip.peaks is None:
        log.warning(
            "no peak FLOP/s known for device %r; MFU will not be reported (add its peaks to "
            "train/core/chips.py CHIPS with a datasheet source)",
            device_name,
        )
        return None
    key = "tf32" if (dtype == "fp32" and tf32) else dtype
    return chip.peaks[key]


def mfu(*, tokens_per_s: float, flops_per_token: float, peak_flops: float | None) -> float | None:
    """Model FLOPs utilisation: achieved model FLOP/s over the device peak (None if no peak)."""
    if not peak_flops:
        return None
    return tokens_per_s * flops_per_token / peak_flops


def floor_step_time_s(*, tokens_per_step: int, flops_per_token: float, peak_flops: float) -> float:
    """The step time a run would take at 100% of peak: the floor no tuning can beat."""
    if peak_flops <= 0:
        raise ValueError(f"peak_flops must be > 0, got {peak_flops}")
    return tokens_per_step * flops_per_token / peak_flops


def nanogpt_reported_mfu(
    *,
    n_layer: int,
    n_head: int,
    n_embd: int,
    block_size: int,
    num_params: int,
    fwdbwd_per_iter: int,
    dt_s: float,
) -> float:
    """What nanoGPT's GPT.estimate_mfu returns for one iteration, for comparison with ours.

    nanoGPT (karpathy/nanoGPT model.py) computes flops_per_token = 6N + 12·L·H·Q·T with
    N = get_num_params() (all params minus wpe, i.e. our num_params()), Q = n_embd // n_head and
    T = config.block_size (not the trained sequence length), multiplies by T tokens per sequence
    and fwdbwd_per_iter sequences (train.py passes batch_size * gradient_accumulation_steps, per
    process), divides by the iteration time dt and by 312e12 (A100 bf16) on any device. train.py
    then prints an EMA (0.9 old + 0.1 new) of this value, skipping the first 5 iterations.
    """
    head_dim = n_embd // n_head
    per_token = 6 * num_params + 12 * n_layer * n_head * head_dim * block_size
    flops_per_iter = per_token * block_size * fwdbwd_per_iter
    return flops_per_iter / dt_s / NANOGPT_PROMISED_FLOPS
