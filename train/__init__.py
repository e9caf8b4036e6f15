"""The trainer: GPT-2 training, and the bounded trial the sweeper measures a configuration with.

Rooms: `model/` (the network), `data/` (token files and the loader), `run/` (one training process:
the session, the step, the device, checkpoints), `measure/` (clocks, FLOPs, peaks, memory),
`trial/` (one honest measurement, its result schema, the pruning link), `explain/` (the floor and
the bottleneck diagnosis), `proc/` (the processes the sweeper starts); `config.py` is the schema,
`config_rules.py` the rules across its fields, and `device.py` what every room may ask of the device
(its name, a sync before a clock read, TF32, memory peaks): `measure/` reads it and never imports
`run/`, which builds on `measure/`.

The sweeper must never import torch (it would load a CUDA context into a process that only plans
and launches), yet it should obey the trainer's rules rather than copies of them. TORCH_FREE names
the modules that import no torch when imported, so the sweeper may import them;
tests/test_torch_free.py imports each in a fresh interpreter and checks that torch stays
unloaded, and checks that every `train.*` import in sweeper/ names one of them. Some import torch
inside a function meant to run in a child process (`proc.probe`, `proc.zygote`,
`measure.compile_stats`, the run path of `trial.pinned`); the sweeper imports none of those
functions.
"""

TORCH_FREE: tuple[str, ...] = (
    "train",
    "train.config",
    "train.config_file",
    "train.config_rules",
    "train.data",
    "train.data.fetch",
    "train.explain",
    "train.explain.cli",
    "train.explain.diagnosis",
    "train.explain.evidence",
    "train.explain.floor",
    "train.explain.levers",
    "train.explain.sweep_dir",
    "train.export",
    "train.handoff",
    "train.handoff.files",
    "train.handoff.gaps",
    "train.handoff.interval",
    "train.handoff.llmc",
    "train.handoff.nanogpt",
    "train.keys",
    "train.measure",
    "train.measure.ceiling_cache",
    "train.measure.compile_graphs",
    "train.measure.compile_stats",
    "train.measure.cost",
    "train.measure.flops",
    "train.measure.memory_model",
    "train.measure.meters",
    "train.measure.window_ci",
    "train.model",
    "train.proc",
    "train.proc.compile_cache",
    "train.proc.deathsig",
    "train.proc.probe",
    "train.proc.zygote",
    "train.run",
    "train.run.disk_full",
    "train.run.identity",
    "train.paths",
    "train.trial",
    "train.trial.pinned",
    "train.trial.compile_charge",
    "train.trial.curve",
    "train.trial.progress",
    "train.trial.pruning",
    "train.trial.result",
    "train.trial.setup_clock",
)
