"""Everything before the first trial: the settings checked, the device known, the space scanned,
the plan predicted. `hydra.sweeper.plan.enabled=true` stops here (the text it prints is
sweeper/report/plan_text.py's).

- `preflight`: settings refused before anything starts, one line each.
- `extras`: a launcher plugin the command line names but this install lacks (the `[scale]` extra).
- `prepare`: the sweep's request turned into a `Prepared` sweep (base config, device, space).
- `plan_device`: the device a sweep plans for, probed in a child process or named (`DeviceFacts`).
- `gpu_slots`: which GPUs each parallel trial owns.
- `scan`: the space scanned against the constraints, the memory model and the trial limits.
- `build`: the trial counts and the predicted wall time (`SweepPlan`, `build_plan`).
"""

__all__ = [
    "build",
    "extras",
    "gpu_slots",
    "memory_levers",
    "plan_device",
    "preflight",
    "prepare",
    "scan",
]
