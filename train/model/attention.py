"""Choosing and verifying the scaled-dot-product-attention backend.

`sdpa_context("flash")` restricts torch's SDPA dispatcher to exactly one backend, so a fused
kernel that cannot run for these shapes/dtype/device raises instead of silently falling back to
the slow math path (checked on torch 2.13 CPU: "efficient" and "cudnn" raise "No viable backend
for scaled_dot_product_attention was found"). `probe_backend` runs one real SDPA call to report
which kernel actually ran.

How the probe tells which kernel ran: it records the aten ops of one forward+backward under a
TorchDispatchMode (the documented `__torch_dispatch__` extension point that FlopCounterMode is
built on). Each fused backend is its own aten op; the math backend decomposes into bmm/softmax,
so "no fused op seen" means math. We do not use `torch._fused_sdp_choice`: it is private, it
reports the dispatcher's intended choice rather than what ran, and it cannot see a backward
failure.

The flash implementations torch registers (torch >= 2.11: `list_flash_attention_impls()`, "FA3"
and "FA4" in torch 2.11-2.13) are runtime.attention values of their own ("fa3", "fa4"):
`activate_flash_attention_impl` swaps the kernels behind SDPA's flash backend for the named
implementation, process-wide, and the flash backend alone is then allowed. FA3 runs on compute
capability 9.0 (Hopper), FA4 on 9.0 and 10.x, fp16/bf16 only; each needs its provider package
(`flash_attn_interface`, `flash_attn.cute`). They are refused where the installed torch lists no
such implementation or the device is not CUDA (train/core/rules.py flash_impl_unsupported), and
the probe raises where activation or the kernel fails.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

from train.core.rules import FLASH_IMPL_PACKAGES, FLASH_IMPLS
from train.core.rules import installed_flash_impls as installed_impls

log = logging.getLogger(__name__)

BACKENDS = ("auto", "flash", "efficient", "cudnn", "math")

_SDP_BACKENDS: dict[str, SDPBackend] = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}

# aten forward op (overload packet name) -> backend that produced it. Math has no op of its own.
_FUSED_OPS: dict[str, str] = {
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_flash_attention_for_cpu": "flash",
    "_scaled_dot_product_efficient_attention": "efficient",
    "_scaled_dot_product_cudnn_attention": "cudnn",
    "_scaled_dot_product_fused_attention_overrideable": "overrideable",
}


def _check_name(name: str) -> None:
    if name not in BACKENDS + FLASH_IMPLS:
        raise ValueError(f"runtime.attention must be one of {BACKENDS + FLASH_IMPLS}, got {name!r}")


def listed_flash_impls() -> list[str]:
    """The flash attention implementations this torch registers, lower-cased ([] before 2.11)."""
    lister = getattr(torch.nn.attention, "list_flash_attention_impls", None)
    return [str(name).lower() for name in lister()] if lister is not None else []


def installed_flash_impls() -> list[str]:
    """The listed implementations whose package is installed (activation imports it)."""
    return installed_impls(listed_flash_impls())


def activate_flash_impl(name: str) -> None:
    """Make SDPA's flash backend run implementation `name` ("fa3"), process-wide; a ValueError
    naming runtime.attention where torch lists no such implementation or its package fails."""
    if name not in listed_flash_impls():
        raise ValueError(
            f"runtime.attention={name}: this torch ({torch.__version__}) lists no such flash "
            f"attention implementation (it lists {listed_flash_impls()}); use auto or flash"
        )
    current = torch.nn.attention.current_flash_attention_impl()
    if current is not None and current.lower() == name:
        return
    try:
        torch.nn.attention.activate_flash_attention_impl(name.upper())
    except (ImportError, RuntimeError) as e:
        raise ValueError(
            f"runtime.attention={name} cannot be activated: {type(e).__name__}: {e}; install "
            f"its package ({FLASH_IMPL_PACKAGES.get(name, 'its provider')}) or use auto or flash"
        ) from e
    log.info("flash attention implementation %s activated", name.upper())


def sdpa_context(name: str) -> contextlib.AbstractContextManager[Any]:
    """Context manager that lets SDPA use only `name` ("auto": whatever torch picks; "fa3",
    "fa4": the flash backend, whose kernels `activate_flash_impl` swapped)."""
    _check_name(name)
    if name == "auto":
        return contextlib.nullcontext()
    return sdpa_kernel([_SDP_BACKENDS["flash" if name in FLASH_IMPLS else name]])


class _OpRecorder(TorchDispatchMode):
    """Collects the aten overload-packet names dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _run_once(
    name: str, *, device: torch.device, dtype: torch.dtype, shape: tuple[int, int, int, int]
) -> str:
    """One causal SDPA forward+backward under `name`; returns the backend that ran."""
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    recorder = _OpRecorder()
    with sdpa_context(name):
        with recorder:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
        # Backward too: some kernels only fail there (e.g. head sizes unsupported in backward).
        y.float().sum().backward()
    used = [_FUSED_OPS[op] for op in recorder.ops if op in _FUSED_OPS]
    return used[0] if used else "math"


@contextlib.contextmanager
def _capture_warnings() -> Iterator[list[warnings.WarningMessage]]:
    # The dispatcher explains why each kernel was rejected through TORCH_WARN (Python warnings).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def available_backends(
    *, device: torch.device | str, dtype: torch.dtype, shape: tuple[int, int, int, int]
) -> list[str]:
    """Named backends that run for these shapes on this device (tried one by one)."""
    device = torch.device(device)
    ok = []
    for name in _SDP_BACKENDS:
        try:
            with _capture_warnings():
                _run_once(name, device=device, dtype=dtype, shape=shape)
        except RuntimeError:
            continue
        ok.append(name)
    return ok


def probe_backend(
    name: str,
    *,
    device: torch.device | str,
    dtype: torch.dtype,
    batch: int,
    n_head: int,
    seq_len: int,
    head_dim: int,
) -> str:
    """Run one SDPA call with the real shapes under `name` and return the backend that ran.

    Returns "flash" | "efficient" | "cudnn" | "math" (or "overrideable" on out-of-tree devices),
    or "fa3"/"fa4" where that implementation was activated and the flash backend ran.
    A named backend that cannot run raises ValueError with torch's reasons and the backends that
    can. A small `batch` is enough (and cheaper): the choice depends on head_dim, dtype, device
    and masking, not on the batch size.
    """
    _check_name(name)
    device = torch.device(device)
    shape = (batch, n_head, seq_len, head_dim)
    if name in FLASH_IMPLS:
        activate_flash_impl(name)
    with _capture_warnings() as caught:
        try:
            used = _run_once(name, device=device, dtype=dtype, shape=shape)
        except RuntimeError as e:
            if name == "auto":
                raise
            reasons = [str(w.message) for w in caught] + [str(e)]
            ok = available_backends(device=device, dtype=dtype, shape=shape)
            raise ValueError(
                f"runtime.attention={name!r} cannot run on {device} for dtype {dtype}, "
                f"shape (B, nh, T, hs)={shape}: {' | '.join(reasons)}. "
                f"Backends that run here: {ok} (or 'auto')."
            ) from e
    if name in FLASH_IMPLS and used == "flash":
        used = name  # the flash backend ran on the activated implementation's kernels
    log.info("SDPA backend requested %r, ran %r (%s, %s, %s)", name, used, device, dtype, shape)
    return used
