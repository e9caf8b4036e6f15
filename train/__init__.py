"""The trainer: GPT-2 training, and the bounded trial the sweeper measures a configuration with.

Rooms, bottom first (tests/architecture/test_layers.py holds the order): `core/` (torch-free: the
schema and its rules, keys, the chip table, FLOPs, the memory model, step statistics, the result
schema, the handoff rules), `device.py` (the device of one process: choosing it, its name, a sync
before a clock read, autocast, TF32, threads, memory peaks) and `proc/` (the processes the sweeper
starts), `model/` (the network), `data/` (token files and the loader), `measure/` (clocks, the
measured ceiling, memory and compile counters), `run/` (one training process: the session, the step,
checkpoints, DDP), `trial/` (one honest measurement and its result), `explain/` (the floor and the
bottleneck verdict).

The sweeper must never import torch (it would load a CUDA context into a process that only plans
and launches), yet it should obey the trainer's rules rather than copies of them: it imports from
train/ only `train.core`, whose modules import no torch (tests/architecture/test_torch_free.py).
"""
