"""The lease's plan: whether the main command and the second fit one GPU lease, on any machine.

    python3 scripts/gpu_acceptance.py --lease --plan --device "NVIDIA H200"

A lease is 15 minutes of device time, the machine's start included (1-3 minutes), one command at
most 10. The main command (the `lease` stage: probe, the starting config, the gpu-lease sweep)
must end within LEASE_MAIN_S and the second (the production run from best.yaml and the evidence
folder) within LEASE_SECOND_S. Both are priced by the sweep's own forecast: the main command is
the sweep's plan mode for the named device (sweeper/forecast/: set-up, compile once per graph,
float8 at its own price; the guard and the race run by run), the second a production process of
the likeliest slowest winner (sweeper/forecast/costs.py). Nothing runs on a GPU.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acceptance.commands import child_env, sweep_argv
from acceptance.plan import Point, starting_point
from acceptance.profiles import LEASE, Profile
from sweeper.forecast import compile_s, costs_for, setup_s
from sweeper.numbers import fmt_secs
from sweeper.space.limits import predict_step
from train.core.chips import chip_for

LEASE_S = 900.0  # one lease of device time, the machine's start included
MACHINE_START_S = 180.0  # the start of a fresh machine: 1-3 minutes, its worst case
LEASE_MAIN_S = 540.0  # the main command's internal deadline (9 minutes)
LEASE_SECOND_S = 180.0  # the second command's (3 minutes)


@dataclass(frozen=True, kw_only=True)
class LeasePlan:
    device: str
    start: Point
    main_s: float  # probe + the sweep's planned wall + packing the state
    second_s: float  # the production process of the slowest likely winner + the evidence
    parts: dict[str, float]  # the main command's parts, seconds
    second_part: str  # what the second command's figure is
    notes: list[str] = field(default_factory=list)

    @property
    def total_s(self) -> float:
        return MACHINE_START_S + self.main_s + self.second_s

    def lines(self) -> list[str]:
        fits = (
            self.main_s <= LEASE_MAIN_S
            and self.second_s <= LEASE_SECOND_S
            and self.total_s <= LEASE_S
        )
        parts = ", ".join(f"{k} {fmt_secs(v)}" for k, v in self.parts.items())
        out = [
            f"lease: main {self.main_s:.0f} s, second {self.second_s:.0f} s, total "
            f"{self.total_s:.0f} s",
            f"  on {self.device}, from {self.start.name}; the total counts a machine start of "
            f"{MACHINE_START_S:.0f} s",
            f"  main ({parts}) against its {LEASE_MAIN_S:.0f} s deadline: "
            f"{'fits' if self.main_s <= LEASE_MAIN_S else 'DOES NOT FIT'}",
            f"  second ({self.second_part}) against its {LEASE_SECOND_S:.0f} s: "
            f"{'fits' if self.second_s <= LEASE_SECOND_S else 'DOES NOT FIT'}",
            f"  the lease ({LEASE_S:.0f} s of device time): {'fits' if fits else 'DOES NOT FIT'}",
        ]
        return out + [f"  {n}" for n in self.notes]


def sweep_plan_numbers(profile: Profile, start: Point, device: str) -> dict[str, Any]:
    """The sweep's plan mode for `device` with the lease's command (sweeper/report/plan_text.py
    plan_numbers), run as a child: nothing starts, no torch is imported."""
    with tempfile.TemporaryDirectory(prefix="lease-plan-") as tmp:
        work, numbers = Path(tmp), Path(tmp) / "plan.json"
        argv = sweep_argv(
            profile,
            work,
            start,
            plan=True,
            extra=[
                f"hydra.sweeper.plan.device={device}",
                f"hydra.sweeper.plan.json={numbers}",
            ],
        )
        ran = subprocess.run(
            argv,
            cwd=work,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if ran.returncode != 0 or not numbers.is_file():
            tail = (ran.stdout + ran.stderr)[-2000:]
            raise ValueError(
                f"the sweep's plan for {device!r} failed (exit {ran.returncode}):\n{tail}"
            )
        return json.loads(numbers.read_text())


def production_s(
    profile: Profile, model: dict[str, Any], point: dict[str, Any], *, device: str
) -> float:
    """One production process of `point` (searched keys over the start) on `device`: set-up, its
    graph (compiled as profile.compile_unit) from the compile cache the sweep left on the same
    machine, and profile.production_steps full steps at the forecast step."""
    cfg = {f"model.{k}": v for k, v in model.items()}
    cfg.update(
        {
            "batch.tokens_per_step": profile.tokens_per_step,
            "runtime.dtype": profile.dtype,
            "runtime.compile": "default",
            **point,
        }
    )
    step = predict_step(cfg, device_name=device, device_type="cuda", bf16_supported=True)
    costs = costs_for(device)
    n_layer = int(model["n_layer"])
    float8 = str(cfg.get("runtime.float8") or "none") != "none"
    return (
        setup_s(costs, device_type="cuda", n_layer=n_layer)
        + compile_s(
            costs,
            mode=str(cfg["runtime.compile"]),
            n_layer=n_layer,
            float8=float8,
            warm=True,
            unit=profile.compile_unit,
        )
        + profile.production_steps * step.predicted_s
    )


def lease_plan(device: str, *, profile: Profile = LEASE, numbers: dict | None = None) -> LeasePlan:
    """The lease on `device` (a name plan_device knows); `numbers`: the sweep plan's, for tests."""
    from acceptance.stages import model_fields
    from sweeper.forecast.costs import SETUP_BASE_S

    chip = chip_for(device)
    memory = chip.memory_gib if chip else None
    if memory is None:
        raise ValueError(
            f"--device {device!r} has no known memory size; use a name "
            f"hydra.sweeper.plan.device knows, e.g. 'NVIDIA H200'"
        )
    model = model_fields(profile.model)
    start = starting_point(profile, model, device_type="cuda", memory_gib=memory)
    plan = numbers if numbers is not None else sweep_plan_numbers(profile, start, device)
    probe = SETUP_BASE_S["cuda"]  # the device probe: a process that imports torch and opens CUDA
    sweep_s = float(plan.get("wall_s") or 0.0)
    parts = {
        "probe": probe,
        "search": float(plan.get("search_s") or 0.0),
        "the save measured once": float(plan.get("once_s") or 0.0),
        "guard": float(plan.get("guard_s") or 0.0),
        "race": float(plan.get("race_s") or 0.0),
        "start and end": float(plan.get("overhead_s") or 0.0),
        "packing": profile.pack_margin_s,
    }
    main = probe + sweep_s + profile.pack_margin_s
    points = {"batch.micro_batch": start.micro_batch}, *plan.get("prior", [])
    seconds = {
        json.dumps(p, sort_keys=True): production_s(profile, model, p, device=device)
        for p in points
    }
    slowest = max(seconds, key=seconds.__getitem__)
    second = seconds[slowest] + profile.pack_margin_s
    notes = []
    if plan.get("software"):
        notes.append(str(plan["software"]))
    for r in plan.get("runs", []):
        comp = f" (compile {fmt_secs(r['compile_s'])}: {r['note']})" if r.get("compile_s") else ""
        notes.append(f"{r['count']} x {fmt_secs(r['each_s'])} {r['label']}{comp}")
    return LeasePlan(
        device=device,
        start=start,
        main_s=main,
        second_s=second,
        parts=parts,
        second_part=f"production of {slowest}: set-up, compile, "
        f"{profile.production_steps} steps; packing",
        notes=notes,
    )


__all__ = ["LEASE_MAIN_S", "LEASE_S", "LEASE_SECOND_S", "LeasePlan", "lease_plan"]
