"""The chip table (train/core/chips.py): a device name finds its one record."""

from __future__ import annotations

import pytest

from train.core.chips import CHIPS, PEAK_DTYPES, chip_for, plan_device_names
from train.core.units import GIB

_MIB = 1 / 1024


@pytest.mark.parametrize(
    ("device_name", "key", "capability", "memory_gib"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm", (9, 0), 81090 * _MIB),
        ("nvidia h100 80gb hbm3", "h100-sxm", (9, 0), 81090 * _MIB),
        ("H100 80GB HBM3", "h100-sxm", (9, 0), 81090 * _MIB),
        ("NVIDIA H100 SXM5 80GB", "h100-sxm", (9, 0), 81090 * _MIB),
        ("NVIDIA H100 PCIe", "h100-pcie", (9, 0), 81008 * _MIB),
        ("NVIDIA H100 80GB HBM2e", "h100-pcie", (9, 0), 81008 * _MIB),
        ("NVIDIA H100 NVL", "h100-nvl", (9, 0), 95830 * _MIB),
        ("NVIDIA H200", "h200", (9, 0), 143156 * _MIB),
        ("  NVIDIA  H200 ", "h200", (9, 0), 143156 * _MIB),
        ("NVIDIA H200 NVL", "h200-nvl", (9, 0), None),
        ("NVIDIA GH200 480GB", "gh200", (9, 0), None),
        ("NVIDIA B200", "b200", (10, 0), 182642 * _MIB),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb", (8, 0), 42298834944 / GIB),
        ("nvidia a100 sxm4 40gb", "a100-sxm4-40gb", (8, 0), 42298834944 / GIB),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb", (8, 0), 81049 * _MIB),
        ("NVIDIA A100 80GB PCIe", "a100-80gb", (8, 0), 81049 * _MIB),
        ("NVIDIA A100-PCIE-40GB", "a100", (8, 0), None),
        ("NVIDIA L4", "l4", (8, 9), 23034 * _MIB),
        ("NVIDIA A10", "a10", (8, 6), 23028 * _MIB),
        ("NVIDIA L40S", "l40s", None, 46068 * _MIB),
    ],
)
def test_a_device_name_finds_its_record(device_name, key, capability, memory_gib) -> None:
    chip = chip_for(device_name)
    assert chip is not None
    assert (chip.key, chip.capability) == (key, capability)
    assert chip.memory_gib == (pytest.approx(memory_gib) if memory_gib else None)


@pytest.mark.parametrize(
    "device_name",
    [
        "NVIDIA A10G",  # no NVIDIA datasheet: unknown, not silently an A10
        "NVIDIA GeForce RTX 4090",
        "NVIDIA GeForce GTX 280",
        "NVIDIA H100",  # form factor unknown: SXM and PCIe differ by 30%
        "cpu",
        "",
    ],
)
def test_an_unknown_device_has_no_record(device_name: str) -> None:
    assert chip_for(device_name) is None


def test_the_a100s_share_one_datasheet() -> None:
    a100s = [c for c in CHIPS if c.key.startswith("a100")]
    assert len(a100s) == 3
    assert all(c.peaks is a100s[0].peaks and c.capability == (8, 0) for c in a100s)


@pytest.mark.parametrize("chip", [c for c in CHIPS if c.peaks], ids=lambda c: c.key)
def test_every_peak_table_has_all_dtypes_and_dense_order(chip) -> None:
    p = chip.peaks
    assert set(p) == set(PEAK_DTYPES)
    # Tensor-core bf16 is twice TF32 and well above CUDA-core fp32 on every listed chip.
    assert p["bf16"].flops == pytest.approx(2 * p["tf32"].flops, rel=0.03)
    assert p["tf32"].flops > p["fp32"].flops
    assert all("NVIDIA" in peak.source for peak in p.values())


def test_the_table_is_plausible_and_every_name_finds_its_own_record() -> None:
    assert len({c.key for c in CHIPS}) == len(CHIPS)
    for chip in CHIPS:
        assert chip.memory_gib is None or 15 < chip.memory_gib < 200, chip.key
        assert bool(chip.names) == (chip.memory_gib is not None), chip.key
        for name in chip.names:
            assert chip_for(name) is chip, name


def test_plan_devices_are_the_names_with_memory_and_peaks() -> None:
    names = plan_device_names()
    assert "NVIDIA H100 80GB HBM3" in names and "NVIDIA A100 80GB PCIe" in names
    assert "NVIDIA L40S" not in names  # memory known, no cited peak
    assert names == sorted(names)
