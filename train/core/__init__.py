"""The torch-free core: the rules and arithmetic the trainer and the sweeper share.

Importing any module here never imports torch (tests/architecture/test_torch_free.py checks each in
a fresh interpreter), so the sweeper, which must not load a CUDA context into a process that only
plans and launches, imports from train/ only this package (tests/architecture/test_layers.py).
train/'s other rooms are the torch side: they build on the core, never the other way round.

What each module holds:
- `config` the trainer's schema (one dataclass per part), `rules` the rules across its fields on
  plain values, `keys` the schema's dotted keys and did-you-mean, `config_file` a best.yaml read
  against the schema before Hydra, `paths` whether a run can write where it is told.
- `chips` the chip table (peaks, compute capability, memory by device name), `units` GiB, `flops`
  FLOPs per token, MFU and the floor, `memory_model` a step's predicted memory, `cost` a
  step's price, `meters` and `window_ci` step-time statistics, `compile_graphs` which knobs change
  the compiled graph and a graph's cache state.
- `result` the trial's result schema, `curve`, `progress` and `pruning` what a running trial
  reports, `disk_full` a full disk told apart from other failures.
- `compile_cache` where a run's compile cache lives, `deathsig` a child that dies with its parent.
- `diagnosis`, `bottleneck_fixes`, `evidence` and `compute_levers`: why a step is slow, from a
  result's numbers, and what to do about it.
- `handoff/`: best.yaml for nanoGPT and llm.c.
- `hooks`: the tests' planted faults and data latency, no settings of the trainer (taken only
  under THROUGHPUT_SWEEP_TEST_HOOKS=1).
"""
