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
    # device (sweeper/plan/device.py) is named by one of them
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


_A100_PEAKS = _peaks(_A100, bf16=312e12, fp16=312e12, tf32=156e12, fp32=19.5e12)

# First match wins, so the more specific names (NVL, PCIe, GH200, an A100's memory size) come
# before the generic ones. A10G (AWS) is deliberately absent: NVIDIA publishes no datasheet for it
# and its tensor throughput differs from the A10. A bare "NVIDIA H100" matches nothing: SXM and
# PCIe differ by 30%.
CHIPS: tuple[Chip, ...] = (
    Chip(
        key="gh200",
        pattern=r"\bGH200\b",
        capability=(9, 0),
        peaks=_peaks(_GH200_DS, bf16=1979e12 / 2, fp16=1979e12 / 2, tf32=989e12 / 2, fp32=67e12),
    ),
    Chip(
        key="h200-nvl",
        pattern=r"\bH200\b.*\bNVL\b",
        capability=(9, 0),
        peaks=_peaks(_H200_DS, bf16=1671e12 / 2, fp16=1671e12 / 2, tf32=835e12 / 2, fp32=60e12),
    ),
    Chip(
        key="h200",
        pattern=r"\bH200\b",
        capability=(9, 0),
        peaks=_peaks(_H200_DS, bf16=1979e12 / 2, fp16=1979e12 / 2, tf32=989e12 / 2, fp32=67e12),
        # torch printout: total_memory=143156MB (nvidia-smi: 143771MiB)
        memory_gib=143156 * _MIB,
        names=("NVIDIA H200",),
    ),
    Chip(
        key="h100-nvl",
        pattern=r"\bH100\b.*\bNVL\b",
        capability=(9, 0),
        peaks=_peaks(_H100_DS, bf16=1671e12 / 2, fp16=1671e12 / 2, tf32=835e12 / 2, fp32=60e12),
        # nvidia-smi memory.total 95830MiB (several public nvidia-smi tables)
        memory_gib=95830 * _MIB,
        names=("NVIDIA H100 NVL",),
    ),
    Chip(
        key="h100-pcie",
        pattern=r"\bH100\b.*(\bPCIe\b|HBM2e)",
        capability=(9, 0),
        peaks=_peaks(_H100_WP, bf16=756e12, fp16=756e12, tf32=378e12, fp32=51.2e12),
        # torch 2.0.1 printout: total_memory=81008MB
        memory_gib=81008 * _MIB,
        names=("NVIDIA H100 PCIe",),
    ),
    Chip(
        key="h100-sxm",
        pattern=r"\bH100\b.*(HBM3|\bSXM)",
        capability=(9, 0),
        peaks=_peaks(_H100_WP, bf16=989.4e12, fp16=989.4e12, tf32=494.7e12, fp32=66.9e12),
        # torch 2.7 printouts: total_memory=81089MB / 81090MB (MiB) (e.g. the ml-engineering book)
        memory_gib=81090 * _MIB,
        names=("NVIDIA H100 80GB HBM3",),
    ),
    Chip(
        key="b200",
        pattern=r"\bB200\b",
        capability=(10, 0),
        peaks=_peaks(_B200_DS, bf16=4.5e15 / 2, fp16=4.5e15 / 2, tf32=2.2e15 / 2, fp32=75e12),
        # torch printout: total_memory=182642MB
        memory_gib=182642 * _MIB,
        names=("NVIDIA B200",),
    ),
    Chip(
        key="a100-sxm4-40gb",
        pattern=r"\bA100\b.*\bSXM4\b.*\b40GB\b",
        capability=(8, 0),
        peaks=_A100_PEAKS,
        # CUDA deviceQuery: 42298834944 bytes (bottlerocket-os/bottlerocket#3873)
        memory_gib=42298834944 / GIB,
        names=("NVIDIA A100-SXM4-40GB",),
    ),
    Chip(
        key="a100-80gb",
        pattern=r"\bA100\b.*\b80GB\b",
        capability=(8, 0),
        peaks=_A100_PEAKS,
        # CUDA deviceQuery of an A100 80GB PCIe: 81049 MB (ekondis/mixbench#47); the SXM4 part
        # has the same 80 GB of HBM2e (nvidia-smi shows 81920MiB for both)
        memory_gib=81049 * _MIB,
        names=("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"),
    ),
    # any other A100 (e.g. A100-PCIE-40GB): the same peaks, its memory not known
    Chip(key="a100", pattern=r"\bA100\b", capability=(8, 0), peaks=_A100_PEAKS),
    # nvidia-smi memory.total (modal-labs/modal-client#2797): L4 23034MiB, A10 23028MiB
    Chip(
        key="l4",
        pattern=r"\bL4\b",
        capability=(8, 9),
        peaks=_peaks(_L4_DS, bf16=242e12 / 2, fp16=242e12 / 2, tf32=120e12 / 2, fp32=30.3e12),
        memory_gib=23034 * _MIB,
        names=("NVIDIA L4",),
    ),
    Chip(
        key="a10",
        pattern=r"\bA10\b",
        capability=(8, 6),
        peaks=_peaks(_A10_DS, bf16=125e12, fp16=125e12, tf32=62.5e12, fp32=31.2e12),
        memory_gib=23028 * _MIB,
        names=("NVIDIA A10",),
    ),
    # nvidia-smi memory.total (modal-labs/modal-client#2797, beside the L4's and A10's); memory
    # only: no peak is cited for it, so MFU and plan devices leave it out
    Chip(
        key="l40s",
        pattern=r"\bL40S\b",
        capability=None,
        peaks=None,
        memory_gib=46068 * _MIB,
        names=("NVIDIA L40S",),
    ),
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
