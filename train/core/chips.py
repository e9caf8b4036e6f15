"""The chip table: one record per GPU the project knows, found by the name torch gives it. Pure.

Each record holds what a chip is on paper: its dense peak FLOP/s by dtype (flops.lookup_peak, MFU,
the floor), its CUDA compute capability (float8 needs 8.9), and its total memory (the memory
model's refusals, plan devices). Every number cites its source. The table is read by the trainer
and the sweeper alike, so it imports no torch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from train.core.units import GIB

# The compute dtypes the peak table lists. "fp32" is the non-tensor-core CUDA-core peak; "tf32"
# the tensor core peak used for fp32 matmuls when TF32 is allowed.
PEAK_DTYPES = ("bf16", "fp16", "tf32", "fp32")


@dataclass(frozen=True, kw_only=True)
class Peak:
    """A dense peak throughput and where the number comes from."""

    # Peak FLOP/s (dense, no 2:4 sparsity).
    flops: float
    # Vendor document the number is taken from.
    source: str


@dataclass(frozen=True, kw_only=True)
class Chip:
    """One GPU: the names it matches and what its datasheet and torch say about it."""

    key: str  # a short id, e.g. "h100-sxm"
    # Regular expression searched in the device name (case-insensitive; runs of spaces, "_" and
    # "-" read as one space). The first record in CHIPS whose pattern matches wins.
    pattern: str
    # Dense peak FLOP/s by dtype (every one of PEAK_DTYPES); None: no datasheet to cite
    peaks: Mapping[str, Peak] | None
    # CUDA compute capability (NVIDIA's CUDA GPUs compute capability table); None: not listed
    capability: tuple[int, int] | None
    # Total memory in GiB, as torch.cuda.get_device_properties(i).total_memory reports it where a
    # public printout of that was found, else nvidia-smi's memory.total (a little larger than
    # torch's figure: H100 SXM 81559 MiB there against 81090 MiB in torch; the memory model's
    # ALLOCATOR_MARGIN absorbs the difference). None: not known
    memory_gib: float | None = None
    # The names torch.cuda.get_device_name gives the devices memory_gib was read from; a plan
    # device (sweeper/plan/plan_device.py) is named by one of them
    names: tuple[str, ...] = ()


_A100 = "NVIDIA A100 Tensor Core GPU datasheet (dense; SXM4 and PCIe, 40/80GB list equal peaks)"
_H100_WP = "NVIDIA H100 Tensor Core GPU Architecture whitepaper, peak table (dense column)"
_H100_DS = "NVIDIA H100 Tensor Core GPU datasheet, H100 NVL column (sparse figure / 2)"
_H200_DS = "NVIDIA H200 Tensor Core GPU datasheet (tensor figures listed with sparsity, / 2)"
_GH200_DS = "NVIDIA GH200 Grace Hopper Superchip datasheet (tensor figures with sparsity, / 2)"
_B200_DS = "NVIDIA HGX B200 specifications, per-GPU column (tensor figures with sparsity, / 2)"
_L4_DS = "NVIDIA L4 Tensor Core GPU datasheet (tensor figures with sparsity, / 2)"
_A10_DS = "NVIDIA A10 Tensor Core GPU datasheet (dense column)"

_MIB = 1 / 1024  # a MiB in GiB


def _peaks(source: str, *, bf16: float, fp16: float, tf32: float, fp32: float) -> dict[str, Peak]:
    return {
        "bf16": Peak(flops=bf16, source=source),
        "fp16": Peak(flops=fp16, source=source),
        "tf32": Peak(flops=tf32, source=source),
        "fp32": Peak(flops=fp32, source=source),
    }


_GH200_PEAKS = _peaks(_GH200_DS, bf16=1979e12 / 2, fp16=1979e12 / 2, tf32=989e12 / 2, fp32=67e12)
_H200_NVL_PEAKS = _peaks(_H200_DS, bf16=1671e12 / 2, fp16=1671e12 / 2, tf32=835e12 / 2, fp32=60e12)
_H200_PEAKS = _peaks(_H200_DS, bf16=1979e12 / 2, fp16=1979e12 / 2, tf32=989e12 / 2, fp32=67e12)
_H100_NVL_PEAKS = _peaks(_H100_DS, bf16=1671e12 / 2, fp16=1671e12 / 2, tf32=835e12 / 2, fp32=60e12)
_H100_PCIE_PEAKS = _peaks(_H100_WP, bf16=756e12, fp16=756e12, tf32=378e12, fp32=51.2e12)
_H100_SXM_PEAKS = _peaks(_H100_WP, bf16=989.4e12, fp16=989.4e12, tf32=494.7e12, fp32=66.9e12)
_B200_PEAKS = _peaks(_B200_DS, bf16=4.5e15 / 2, fp16=4.5e15 / 2, tf32=2.2e15 / 2, fp32=75e12)
_A100_PEAKS = _peaks(_A100, bf16=312e12, fp16=312e12, tf32=156e12, fp32=19.5e12)
_L4_PEAKS = _peaks(_L4_DS, bf16=242e12 / 2, fp16=242e12 / 2, tf32=120e12 / 2, fp32=30.3e12)
_A10_PEAKS = _peaks(_A10_DS, bf16=125e12, fp16=125e12, tf32=62.5e12, fp32=31.2e12)


def _chip(
    key: str,
    pattern: str,
    capability: tuple[int, int] | None,
    peaks: Mapping[str, Peak] | None,
    memory_gib: float | None = None,
    *names: str,
) -> Chip:
    """A table row: key, name pattern, capability, peaks, memory (GiB), torch's names for it."""
    return Chip(
        key=key,
        pattern=pattern,
        capability=capability,
        peaks=peaks,
        memory_gib=memory_gib,
        names=names,
    )


# First match wins, so the more specific names (NVL, PCIe, GH200, an A100's memory size) come
# before the generic ones. A10G (AWS) is deliberately absent: NVIDIA publishes no datasheet for it
# and its tensor throughput differs from the A10. A bare "NVIDIA H100" matches nothing: SXM and
# PCIe differ by 30%.
CHIPS: tuple[Chip, ...] = (
    _chip("gh200", r"\bGH200\b", (9, 0), _GH200_PEAKS),
    _chip("h200-nvl", r"\bH200\b.*\bNVL\b", (9, 0), _H200_NVL_PEAKS),
    # torch printout: total_memory=143156MB (nvidia-smi: 143771MiB)
    _chip("h200", r"\bH200\b", (9, 0), _H200_PEAKS, 143156 * _MIB, "NVIDIA H200"),
    # nvidia-smi memory.total 95830MiB (several public nvidia-smi tables)
    _chip(
        "h100-nvl", r"\bH100\b.*\bNVL\b", (9, 0), _H100_NVL_PEAKS, 95830 * _MIB, "NVIDIA H100 NVL"
    ),
    # torch 2.0.1 printout: total_memory=81008MB
    _chip(
        "h100-pcie",
        r"\bH100\b.*(\bPCIe\b|HBM2e)",
        (9, 0),
        _H100_PCIE_PEAKS,
        81008 * _MIB,
        "NVIDIA H100 PCIe",
    ),
    # torch 2.7 printouts: total_memory=81089MB / 81090MB (MiB) (e.g. the ml-engineering book)
    _chip(
        "h100-sxm",
        r"\bH100\b.*(HBM3|\bSXM)",
        (9, 0),
        _H100_SXM_PEAKS,
        81090 * _MIB,
        "NVIDIA H100 80GB HBM3",
    ),
    # torch printout: total_memory=182642MB
    _chip("b200", r"\bB200\b", (10, 0), _B200_PEAKS, 182642 * _MIB, "NVIDIA B200"),
    # CUDA deviceQuery: 42298834944 bytes (bottlerocket-os/bottlerocket#3873)
    _chip(
        "a100-sxm4-40gb",
        r"\bA100\b.*\bSXM4\b.*\b40GB\b",
        (8, 0),
        _A100_PEAKS,
        42298834944 / GIB,
        "NVIDIA A100-SXM4-40GB",
    ),
    # CUDA deviceQuery of an A100 80GB PCIe: 81049 MB (ekondis/mixbench#47); the SXM4 part has the
    # same 80 GB of HBM2e (nvidia-smi shows 81920MiB for both)
    _chip(
        "a100-80gb",
        r"\bA100\b.*\b80GB\b",
        (8, 0),
        _A100_PEAKS,
        81049 * _MIB,
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA A100 80GB PCIe",
    ),
    # any other A100 (e.g. A100-PCIE-40GB): the same peaks, its memory not known
    _chip("a100", r"\bA100\b", (8, 0), _A100_PEAKS),
    # nvidia-smi memory.total (modal-labs/modal-client#2797): L4 23034MiB, A10 23028MiB
    _chip("l4", r"\bL4\b", (8, 9), _L4_PEAKS, 23034 * _MIB, "NVIDIA L4"),
    _chip("a10", r"\bA10\b", (8, 6), _A10_PEAKS, 23028 * _MIB, "NVIDIA A10"),
    # nvidia-smi memory.total (modal-labs/modal-client#2797, beside the L4's and A10's); memory
    # only: no peak is cited for it, so MFU and plan devices leave it out
    _chip("l40s", r"\bL40S\b", None, None, 46068 * _MIB, "NVIDIA L40S"),
)

_MATCHERS = tuple((re.compile(chip.pattern, re.IGNORECASE), chip) for chip in CHIPS)


def chip_for(device_name: str) -> Chip | None:
    """The record of a device by its name (as torch.cuda.get_device_name or nvidia-smi spells it;
    case, runs of spaces, "_" and "-" do not matter), or None when no record matches."""
    name = re.sub(r"[\s_-]+", " ", device_name.strip())
    for pattern, chip in _MATCHERS:
        if pattern.search(name):
            return chip
    return None


def plan_device_names() -> list[str]:
    """Device names whose memory and peaks are both known: the ones a plan can be made for."""
    return sorted(n for c in CHIPS if c.memory_gib is not None and c.peaks for n in c.names)
