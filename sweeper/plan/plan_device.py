"""The device a sweep plans for: probed where trials run, or a named plan device taken from the
chip table (train/core/chips.py: its memory, peaks and compute capability), so a plan can be made
for a GPU this machine lacks. The probe asks a child process (`probe_device`), so that the
sweeper never imports torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, replace

from train.core.chips import chip_for, plan_device_names
from train.core.paths import PROJECT_DIR
from train.core.rules import FLASH_IMPLS


def probe_device(timeout_s: float = 180.0) -> dict:
    """The device facts `python -m train.proc.probe` prints (its last line, JSON)."""
    out = subprocess.run(
        [sys.executable, "-m", "train.proc.probe"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=PROJECT_DIR,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"device probe failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


@dataclass(frozen=True, kw_only=True)
class DeviceFacts:
    """What planning needs of a device, probed where trials run or taken from a plan device."""

    name: str  # as torch names it, or "cpu"
    device_type: str  # cuda | cpu
    memory_gib: float | None  # total device memory; None = no memory-model refusals
    bf16_supported: bool
    cpu_count: int  # CPUs for data workers
    source: str  # "probed" | "plan device"
    # compute capability (runtime.float8 needs >= 8.9): probed, or a plan device's from the chip
    # table (train/core/chips.py); None on a CPU or where unknown
    cuda_capability: tuple[int, int] | None = None
    # runtime.attention's flash implementations installed where trials run: probed, or a plan
    # device's assumed software (hydra.sweeper.plan.software); None: not known
    flash_attention_impls: tuple[str, ...] | None = None
    # whether torchao (runtime.float8) is installed where trials run; None: ask this machine (the
    # trials run here). A plan device's is assumed from hydra.sweeper.plan.software
    torchao: bool | None = None

    def software_line(self) -> str:
        """What a plan for a named device assumes of its software ('' when probed)."""
        if self.source != "plan device":
            return ""
        flash = ", ".join(self.flash_attention_impls or ()) or "no FA3/FA4"
        torchao = "installed" if self.torchao else "absent"
        return (
            f"plan assumes {self.name}'s machine has torchao {torchao}, {flash} (not this "
            f"machine's packages); override with "
            f"hydra.sweeper.plan.software=torchao,fa3 (a comma list of torchao, fa3, fa4, "
            f"or '')"
        )


def known_plan_devices() -> list[str]:
    """Device names plan.device accepts: the chip table (train/core/chips.py) knows both a memory
    size and a peak for them."""
    return plan_device_names()


def plan_device_facts(
    name: str, *, cpu_count: int, software: tuple[str, ...] = ("torchao",)
) -> DeviceFacts:
    """The facts of a named device, for planning without it, with `software` (package names of
    hydra.sweeper.plan.software) as its machine's; ValueError for an unknown name."""
    chip = chip_for(name)
    if chip is None or chip.memory_gib is None or chip.peaks is None:
        raise ValueError(
            f"hydra.sweeper.plan.device={name!r} is not a known device; use one of "
            f"{known_plan_devices()} (names as torch.cuda.get_device_name spells them)"
        )
    # every device with a known memory and peak (Ampere and newer) computes in bf16
    return DeviceFacts(
        name=name,
        device_type="cuda",
        memory_gib=chip.memory_gib,
        bf16_supported=True,
        cpu_count=cpu_count,
        source="plan device",
        cuda_capability=chip.capability,
        flash_attention_impls=tuple(n for n in software if n in FLASH_IMPLS),
        torchao="torchao" in software,
    )


def device_facts(
    probed: dict | None,
    *,
    plan_device: str,
    cpu_count: int,
    software: tuple[str, ...] = ("torchao",),
) -> DeviceFacts:
    """The device a sweep plans for: the probed one (train/proc/probe.py), with a plan device's
    name, memory and assumed software (`software`) in its place when one is named; a plan device
    alone when nothing was probed."""
    if probed is None:
        return plan_device_facts(plan_device, cpu_count=cpu_count, software=software)
    facts = DeviceFacts(
        name=probed.get("device_name") or "cpu",
        device_type=probed["device_type"],
        memory_gib=probed.get("device_memory_gib"),
        bf16_supported=bool(probed.get("bf16_supported")),
        cpu_count=int(probed.get("cpu_count") or cpu_count),
        source="probed",
        cuda_capability=_pair(probed.get("cuda_capability")),
        # an older probe's JSON lacks the key: [] (none known to be installed)
        flash_attention_impls=tuple(probed.get("flash_attention_impls") or ()),
    )
    if not plan_device:
        return facts
    named = plan_device_facts(plan_device, cpu_count=facts.cpu_count, software=software)
    return replace(
        facts,
        name=named.name,
        memory_gib=named.memory_gib,
        source="plan device",
        cuda_capability=named.cuda_capability,
        torchao=named.torchao,
        flash_attention_impls=named.flash_attention_impls,
    )


def _pair(value: object) -> tuple[int, int] | None:
    """A probed [major, minor] as a tuple; None where absent."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    return int(value[0]), int(value[1])
