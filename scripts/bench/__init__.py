"""The benchmarks: each prints figures measured now, run from the repository root as
`python -m scripts.bench.<name>` (`--help` says what it compares). `harness` holds what they share:
interleaved pairs, clocks, spreads, per-pair ratios, the paired interval and the table; `configs`
composes their trainer configs; `noise_floor` measures the machine's own spread."""
