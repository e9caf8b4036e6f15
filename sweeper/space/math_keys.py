"""Which trainer keys change the math of a step, not only its speed: the one list the numerics
guard (sweeper/verify/guard.py), plan mode and the settings read.

A speed knob (micro-batch split, compile, data workers, checkpoints) leaves the loss curve as it
is, by the trainer's contract (the tokens per step are pinned). A math-changing knob trains a
different function: a precision, TF32 matmuls, float8 matmuls, a chunked loss, another attention
kernel. A config that changes one of them must keep the starting config's loss curve before it
may win (issue 22). Keys the trainer does not have yet are harmless here: a point that lacks a
key has the starting config's value for it.

Pure and torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from train.core.keys import ATTENTION, DTYPE, FLOAT8, FLOAT8_EMULATE, LOSS, TF32

# The trainer keys that change the numbers a step computes (train/core/config.py RuntimeConfig), and
# the test hook hooks.fault, whose `coarse_weights` plants a precision loss (train/trial/coarse.py)
MATH_KEYS: tuple[str, ...] = (
    DTYPE,  # fp32 | bf16 | fp16 autocast
    TF32,  # TF32 tensor cores for fp32 matmuls
    FLOAT8,  # torchao float8 training: none | tensorwise | rowwise
    FLOAT8_EMULATE,  # torchao's emulated float8 (CPU plumbing tests)
    LOSS,  # full | chunked head and cross-entropy
    ATTENTION,  # the attention kernel (SDPA backend or a flash implementation)
    "hooks.fault",  # test only: coarse_weights rounds every weight after each step
)


def _same(a: Any, b: Any) -> bool:
    return a == b or str(a).lower() == str(b).lower()


# keys that change the math only on some devices: TF32 is a CUDA tensor-core mode (torch's CPU
# matmuls ignore torch.backends.cuda.matmul.allow_tf32)
CUDA_ONLY_MATH_KEYS = (TF32,)


def math_changes(
    reference: Mapping[str, Any], candidate: Mapping[str, Any], *, device_type: str = "cuda"
) -> dict[str, tuple[Any, Any]]:
    """{key: (reference value, candidate value)} for each math key whose values differ on
    `device_type`. A key that `candidate` lacks keeps the reference's value (it is not set, so
    it is not changed)."""
    changed = {}
    for key in MATH_KEYS:
        if key not in candidate or (key in CUDA_ONLY_MATH_KEYS and device_type != "cuda"):
            continue
        ref = reference.get(key)
        if ref is None or not _same(ref, candidate[key]):
            changed[key] = (ref, candidate[key])
    return changed


def searched_math_keys(searched: Mapping[str, list[Any] | None]) -> list[str]:
    """The math keys a space searches with more than one value ({key: values or None for a
    range}), in MATH_KEYS order."""
    return [k for k in MATH_KEYS if k in searched and (searched[k] is None or len(searched[k]) > 1)]


def changes_text(changes: Mapping[str, tuple[Any, Any]]) -> str:
    """Like `runtime.dtype fp32 -> bf16, runtime.tf32 true -> false`."""
    return ", ".join(f"{k} {_text(a)} -> {_text(b)}" for k, (a, b) in changes.items())


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "(unset)" if value is None else str(value)
