"""What does the sweep-wide compile cache save? The default CPU sweep with it, against `off`.

    python -m scripts.bench.compile_cache [--pairs 2] [--workdir DIR] [-- sweep overrides ...]

Runs `python sweep.py -m search=throughput` in interleaved pairs (cache then off, off then
cache, ...), each in a fresh work dir so every `auto` cache starts empty (beside that dir's
sweeps/optuna.db) and no run inherits another's graphs. Both arms get the same sampler seed, so
their first points (the design and any prior) are the same. From every run's job folders (search
trials and race runs alike) it prints: the runs that compiled, the total compile seconds torch
spent in them, the Inductor FX-graph cache hits and misses and the cache states, and the sweep's
wall; then each figure's median and range per arm, and the per-pair ratio cache/off. Measured
numbers only.

The default overrides (`DEFAULT_OVERRIDES`) bound each sweep so a pair fits in minutes: a trial
count in place of the CPU wall cap (a wall cap would let the faster arm run more trials, and the
totals would compare different sweeps), a shorter race (the top 1 and the starting config, 2
rounds), no numerics guard and no MLflow. Pass your own after `--`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from scripts.bench.harness import (
    bench_args,
    bench_parser,
    format_table,
    pair_ratios,
    ratio_summary,
    run_or_stop,
    run_pairs,
    spread,
    sweep_argv,
    workdir_of,
)

log = logging.getLogger("bench_compile_cache")
ARMS = ("auto", "off")  # hydra.sweeper.compile_cache of each arm
WALL_NAME = "wall_s.txt"  # each work dir's measured sweep wall, for --report-only
DEFAULT_OVERRIDES = (
    "search=throughput",
    "hydra.sweeper.seed=0",
    "hydra.sweeper.n_trials=4",
    "hydra.sweeper.budget.cpu_max_wall_s=0",
    "hydra.sweeper.verify.top_k=1",
    "hydra.sweeper.verify.repeats=2",
    "hydra.sweeper.verify.max_rounds=2",
    "hydra.sweeper.guard.mode=off",
    "hydra.sweeper.mlflow.enabled=false",
)


def run_sweep(workdir: Path, arm: str, overrides: list[str]) -> float:
    """One sweep in `workdir` with hydra.sweeper.compile_cache=`arm`; its wall seconds."""
    argv = sweep_argv(*overrides, f"hydra.sweeper.compile_cache={arm}")
    log.info("running in %s: %s", workdir, " ".join(argv[2:]))
    child = run_or_stop(argv, cwd=workdir, log_name="sweep.out", what="sweep")
    (workdir / WALL_NAME).write_text(f"{child.wall_s}\n")
    return child.wall_s


def job_results(workdir: Path) -> list[dict]:
    """Every job's result (search trials and race runs) the sweep in `workdir` left."""
    found = []
    # the numbered job folders only: the sweep's trial-N links point at the same ones
    for path in sorted(workdir.glob("multirun/*/*/*/result.json")):
        if not path.parent.name.isdigit() or path.parent.is_symlink():
            continue
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return found


def tally(results: list[dict], wall_s: float) -> dict:
    """The run's figures: compiled runs, their compile seconds, cache hits/misses and states."""
    compiled = [
        r
        for r in results
        if (r.get("compile") or {}).get("mode", "none") != "none" and r.get("compile_s") is not None
    ]
    caches = [(r["compile"].get("cache") or {}) for r in compiled]
    states: dict[str, int] = {}
    for c in caches:
        states[c.get("state", "?")] = states.get(c.get("state", "?"), 0) + 1
    return {
        "runs": len(results),
        "compiled": len(compiled),
        "graphs": len({c.get("graph") for c in caches}),
        "compile_s": sum(float(r["compile_s"]) for r in compiled),
        "hits": sum(int(c.get("fxgraph_hits", 0)) for c in caches),
        "misses": sum(int(c.get("fxgraph_misses", 0)) for c in caches),
        "states": states,
        "wall_s": wall_s,
    }


def finished_pairs(root: Path) -> list[dict[str, dict]]:
    """The complete pairs already in `root` (pair<N>-<arm> work dirs with their wall), in order."""
    pairs = []
    for pair in range(len(list(root.glob("pair*-auto")))):
        dirs = {arm: root / f"pair{pair}-{arm}" for arm in ARMS}
        if not all((d / WALL_NAME).exists() for d in dirs.values()):
            break
        pairs.append(
            {a: tally(job_results(d), float((d / WALL_NAME).read_text())) for a, d in dirs.items()}
        )
    return pairs


def report(pairs: list[dict[str, dict]]) -> str:
    """One row per run (each pair's arms in ARMS order), each arm's spread, the pair ratios."""
    rows = [
        [
            arm,
            str(t["runs"]),
            str(t["compiled"]),
            str(t["graphs"]),
            f"{t['compile_s']:.1f}",
            str(t["hits"]),
            str(t["misses"]),
            " ".join(f"{k}={v}" for k, v in sorted(t["states"].items())) or "-",
            f"{t['wall_s']:.1f}",
        ]
        for pair in pairs
        for arm, t in ((a, pair[a]) for a in ARMS)
    ]
    head = [
        "compile_cache",
        "job runs",
        "compiled",
        "graphs",
        "compile s",
        "fx hits",
        "fx misses",
        "cache states",
        "sweep wall s",
    ]
    lines = [format_table(head, rows), ""]
    for arm in ARMS:
        mine = [pair[arm] for pair in pairs]
        lines.append(
            f"{arm:>5}: total compile s {spread([t['compile_s'] for t in mine], '{:.1f}')}, "
            f"sweep wall s {spread([t['wall_s'] for t in mine], '{:.1f}')}, compiled runs "
            f"{spread([float(t['compiled']) for t in mine], '{:.1f}')} "
            f"(median (min-max) of {len(mine)})"
        )
    compiled = [p for p in pairs if p["off"]["compile_s"]]
    if compiled:
        compile_ratios = pair_ratios(
            [p["auto"]["compile_s"] for p in compiled], [p["off"]["compile_s"] for p in compiled]
        )
        lines.append(f"cache/off per pair: total compile s {ratio_summary(compile_ratios)}")
    wall_ratios = pair_ratios(
        [p["auto"]["wall_s"] for p in pairs], [p["off"]["wall_s"] for p in pairs]
    )
    lines.append(f"cache/off per pair: sweep wall {ratio_summary(wall_ratios)}")
    if not any(t["compiled"] for p in pairs for t in p.values()):
        lines.append(
            "no run compiled: the sweeps chose runtime.compile=none throughout, and the "
            "cache had nothing to save"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(
        __doc__,
        pairs=2,
        arms="cache and off",
        workdir=True,
        overrides="sweep overrides (default: DEFAULT_OVERRIDES)",
    )
    parser.add_argument("--report-only", action="store_true", help="report --workdir's pairs only")
    args = bench_args(parser, argv)
    overrides = args.overrides or list(DEFAULT_OVERRIDES)
    if args.report_only:
        if args.workdir is None:
            parser.error("--report-only needs --workdir")
        print(report(finished_pairs(args.workdir)))
        return 0
    root = workdir_of(args, "bench-compile-cache-")

    def run(arm: str, pair: int) -> dict:
        workdir = root / f"pair{pair}-{arm}"
        workdir.mkdir(parents=True, exist_ok=False)
        wall_s = run_sweep(workdir, arm, overrides)
        figures = tally(job_results(workdir), wall_s)
        log.info("pair %d %s: %s", pair, arm, figures)
        return figures

    pairs = run_pairs(ARMS, args.pairs, run)
    print(f"sweep overrides: {' '.join(overrides)}")
    print(report(pairs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
