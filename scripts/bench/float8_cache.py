"""What the compile cache saves a float8 graph against a bf16 one: cold, then warm in a new process.

    python -m scripts.bench.float8_cache [--pairs 2] [--n-layer 48] [--unit model]

A float8 graph (torchao's Float8Linear, runtime.float8=tensorwise, emulated on this CPU) gets no
AOTAutograd cache entry: torchao 0.18 builds config objects and `allow_in_graph` autograd
functions inside the graph, which the AOTAutograd cache refuses to key ("Bypassing autograd
cache"), so a later process traces autograd again. Inductor's FX-graph cache still holds its
kernels. This measures what that leaves: for each arm (bf16, float8) a cold trial in a fresh
process with an empty cache folder, then a warm trial of the same config in another fresh process
on that folder. Pairs interleave the arms, their order alternating. Printed per run: torch's
compile seconds of the warm-up (train/measure/compile_stats.py), the cache's FX-graph and
AOTAutograd hits and misses; then per arm the warm / cold share (median and range over the
pairs), also with Inductor's ISA probe (a CPU's one-off per cache folder, timed alone per pair,
scripts/bench/compile_unit.py) taken off the cold run, which alone pays it. The sweep's forecast
prices a float8 graph from the cache with its share
(sweeper/forecast/costs.py). Measured numbers only.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from scripts.bench.compile_unit import isa_probe_s
from scripts.bench.configs import cpu_trial_overrides
from scripts.bench.harness import (
    bench_parser,
    completed_trial,
    emit,
    format_table,
    pair_ratios,
    run_pairs,
    spread,
)
from train.core.compile_cache import cache_env

ARMS = ("bf16", "float8")
BYPASS_MARK = "Bypassing autograd cache"  # torch/_functorch/_aot_autograd/autograd_cache.py


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = bench_parser(__doc__, pairs=2, arms="bf16 and float8")
    p.add_argument("--n-layer", type=int, default=48)
    p.add_argument("--unit", default="model", help="runtime.compile_unit")
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--out", type=Path, help="also write the output to this file")
    return p.parse_args(argv)


def run_one(a: argparse.Namespace, tmp: Path, arm: str, cache: Path, tag: str) -> dict:
    """One trial of `arm` in a fresh process on the cache folder `cache`: its result's compile
    figures and whether torch logged an AOTAutograd cache bypass."""
    out = tmp / f"{tag}.json"
    overrides = [
        *cpu_trial_overrides(
            tmp,
            model="tiny",
            micro_batch=a.micro_batch,
            grad_accum=1,
            block_size=64,
            warmup_steps=1,
            steps=2,
        ),
        f"model.n_layer={a.n_layer}",
        "runtime.dtype=bf16",
        "runtime.compile=default",
        f"runtime.compile_unit={a.unit}",
        f"runtime.compile_cache={cache}",
        f"runtime.float8={'tensorwise' if arm == 'float8' else 'none'}",
        f"runtime.float8_emulate={arm == 'float8'}",
        "trial.project_above_s=0",
        f"trial.out={out}",
        f"hydra.run.dir={tmp / tag}",
    ]
    env = {
        **os.environ,
        **cache_env(str(cache)),
        "TORCH_LOGS": "torch._functorch._aot_autograd.autograd_cache",
    }
    result, child = completed_trial(overrides, out=out, env=env, tag=tag)
    c = result["compile"]["cache"]
    return {
        "compile_s": result["compile_s"],
        "fx": f"{c['fxgraph_hits']}/{c['fxgraph_misses']}",
        "autograd": f"{c['autograd_hits']}/{c['autograd_misses']}",
        "bypass": BYPASS_MARK in child.output,
    }


def measure(a: argparse.Namespace) -> tuple[list[dict[str, dict]], list[float]]:
    """The interleaved pairs: per pair and arm, its cold run and its warm run; each pair's ISA
    probe. Every run's folders and cache folders live in one temporary folder."""
    with tempfile.TemporaryDirectory(prefix="bench_float8_cache_") as tmp:
        return _measure(a, Path(tmp))


def _measure(a: argparse.Namespace, tmp: Path) -> tuple[list[dict[str, dict]], list[float]]:
    probes: list[float] = []

    def run(arm: str, i: int) -> dict:
        cache = tmp / f"cache-{i + 1}-{arm}"
        cold = run_one(a, tmp, arm, cache, f"{i + 1}-{arm}-cold")
        warm = run_one(a, tmp, arm, cache, f"{i + 1}-{arm}-warm")
        print(
            f"pair {i + 1} {arm}: cold {cold['compile_s']:.1f} s, warm {warm['compile_s']:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        return {"cold": cold, "warm": warm}

    pairs = run_pairs(
        ARMS,
        a.pairs,
        run,
        after_pair=lambda i, _: probes.append(isa_probe_s(tmp / f"isa-{i + 1}")),
    )
    return pairs, probes


def report(
    a: argparse.Namespace, pairs: list[dict[str, dict]], probes: list[float], load_before: float
) -> str:
    rows = [
        [
            str(i + 1),
            arm,
            kind,
            f"{r['compile_s']:.1f}",
            r["fx"],
            r["autograd"],
            "yes" if r["bypass"] else "no",
        ]
        for i, pair in enumerate(pairs)
        for arm in ARMS
        for kind in ("cold", "warm")
        for r in [pair[arm][kind]]
    ]

    def seconds(arm: str, kind: str) -> list[float]:
        return [p[arm][kind]["compile_s"] for p in pairs]

    lines = [
        f"the compile cache, bf16 against float8 (tensorwise, emulated): model=tiny "
        f"model.n_layer={a.n_layer}, runtime.compile=default, runtime.compile_unit={a.unit}, "
        f"micro_batch {a.micro_batch}, {a.pairs} interleaved pairs, each arm a cold process on "
        "an empty cache folder then a warm one on the same folder",
        f"{os.cpu_count()} CPUs, 1-minute load average {load_before:.1f} at the start and "
        f"{os.getloadavg()[0]:.1f} at the end (other users share this machine)",
        "",
        format_table(
            [
                "pair",
                "arm",
                "run",
                "compile s",
                "FX hits/misses",
                "AOTAutograd hits/misses",
                "AOTAutograd bypass",
            ],
            rows,
        ),
        "",
        "median (min-max) over the pairs:",
    ]
    for arm in ARMS:
        cold = seconds(arm, "cold")
        less_probe = [c - p for c, p in zip(cold, probes, strict=True)]
        share = pair_ratios(seconds(arm, "warm"), cold)
        share_less = pair_ratios(seconds(arm, "warm"), less_probe)
        lines.append(
            f"  {arm:6s}: cold {spread(cold, '{:.1f}')} s ({spread(less_probe, '{:.1f}')} s less "
            f"the ISA probe), warm {spread(seconds(arm, 'warm'), '{:.1f}')} s; warm / cold "
            f"{spread(share, '{:.3f}')}, less the probe {spread(share_less, '{:.3f}')}"
        )
    lines.append(f"  ISA probe alone: {spread(probes, '{:.1f}')} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    load_before = os.getloadavg()[0]
    pairs, probes = measure(a)
    emit(report(a, pairs, probes, load_before), a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
