"""How good and how cheap is the TPE + pruning sweep? Compared with the full grid on one space.

    python -m scripts.bench.sweep [--workdir DIR] [--tpe-trials 8] [--search grid]

Runs `sweep.py -m search=<space>` twice in one work dir: once as the full grid (every feasible
point, no pruning), once with TPE + the median pruner and a smaller trial budget. Prints, from the
two Optuna studies and the trials' result files:
  (a) the gap between the sweep's winner and the grid's best, both as measured by the grid, so
      measurement noise does not blur whether the search found the best configuration; then
      both configs re-measured in `--remeasure` interleaved pairs of fresh processes, since one
      grid sample per point is a single draw of the machine's noise: the gap is 1 - the geometric
      mean of the per-pair ratios, with its 95% interval;
  (b) the sweep's trial time as a fraction of the grid's, in the search and with verification;
  (c) orchestration overhead (process start, imports, model build, logging: wall time not spent in
      warm-up or measured steps) as a fraction of the sweep's wall time.
Exit code 1 when any goal prints FAIL.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
from pathlib import Path

import optuna
from optuna.trial import TrialState

from scripts.bench.harness import (
    bench_parser,
    pair_ratios,
    paired_interval,
    run_child,
    run_or_stop,
    run_pairs,
    sweep_argv,
    trial_argv,
    verdict,
)
from sweeper.verify.race_rules import paired
from train.core.result import TrialResult, read_result

log = logging.getLogger("bench_sweep")
GOALS = {"gap": 0.03, "trial_time_frac": 0.30, "overhead_frac": 0.10}


def run_sweep(workdir: Path, study: str, *overrides: str) -> float:
    """Run one sweep to completion; returns its wall time in seconds."""
    argv = sweep_argv(f"hydra.sweeper.study_name={study}", *overrides)
    log.info("running: %s", " ".join(argv[1:]))
    child = run_or_stop(argv, cwd=workdir, log_name=f"{study}.log", what=f"sweep {study}")
    return child.wall_s


def load(workdir: Path, study: str) -> optuna.Study:
    return optuna.load_study(study_name=study, storage=f"sqlite:///{workdir / 'sweeps/optuna.db'}")


def key(params: dict) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def trial_result(trial) -> TrialResult | None:
    job_dir = trial.user_attrs.get("job_dir")
    return read_result(Path(job_dir) / "result.json" if job_dir else None)


def measured_s(result: TrialResult | None) -> float:
    """Seconds a trial spent on the work it exists for: warm-up plus measured steps."""
    if not result or not result.get("step_time_s"):
        return 0.0
    st = result["step_time_s"]
    return (result.get("warmup_s") or 0.0) + st["mean"] * st["n"]


def verification_dirs(sweep_dir: Path, n_search: int) -> list[Path]:
    """Job dirs after the search jobs are the verification runs (Hydra numbers jobs in order)."""
    jobs = sorted((p for p in sweep_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    return jobs[n_search:]


def summarize(workdir: Path, grid_name: str, tpe_name: str, tpe_wall: float) -> dict:
    grid, tpe = load(workdir, grid_name), load(workdir, tpe_name)
    grid_tps = {
        key(t.params): t.user_attrs["metrics"]["tokens_per_s"]
        for t in grid.get_trials(states=(TrialState.COMPLETE,))
    }
    best_grid = max(grid_tps.values())
    grid_best = next(
        t
        for t in grid.get_trials(states=(TrialState.COMPLETE,))
        if t.user_attrs["metrics"]["tokens_per_s"] == best_grid
    )
    winner_trial = tpe.user_attrs["verdict"]["winner_trial"]
    winner = tpe.trials[winner_trial]
    winner_in_grid = grid_tps.get(key(winner.params))
    gap = 1.0 - winner_in_grid / best_grid if winner_in_grid else float("nan")

    def search_time(study) -> float:
        return sum(t.user_attrs.get("wall_s", 0.0) for t in study.trials)

    sweep_dir = Path(winner.user_attrs["job_dir"]).parent
    verify_wall = 0.0
    verify_measured = 0.0
    # search jobs = trials that ran a process (a duplicate or an excluded point runs none)
    n_search_jobs = sum(1 for t in tpe.trials if "job_dir" in t.user_attrs)
    for job in verification_dirs(sweep_dir, n_search_jobs):
        res = read_result(job / "result.json")
        verify_measured += measured_s(res)
        verify_wall += res.get("wall_s", 0.0) if res else 0.0
    measured = sum(measured_s(trial_result(t)) for t in tpe.trials) + verify_measured
    states: dict[str, int] = {}
    for t in tpe.trials:
        name = "duplicate" if "duplicate_of" in t.user_attrs else t.state.name.lower()
        states[name] = states.get(name, 0) + 1
    return {
        "grid_points": len(grid.trials),
        "grid_best_job_dir": grid_best.user_attrs["job_dir"],
        "grid_best_params": grid_best.params,
        "winner_job_dir": winner.user_attrs["job_dir"],
        "grid_best_tokens_per_s": best_grid,
        "sweep_trials": states,
        "winner_params": winner.params,
        "winner_tokens_per_s_in_grid": winner_in_grid,
        "gap": gap,
        "trial_time_frac": search_time(tpe) / search_time(grid),
        "trial_time_frac_with_verification": (search_time(tpe) + verify_wall) / search_time(grid),
        "sweep_wall_s": tpe_wall,
        "measured_work_s": measured,
        "overhead_frac": 1.0 - measured / tpe_wall,
        "median_trial_wall_s": statistics.median(
            t.user_attrs["wall_s"] for t in tpe.trials if "wall_s" in t.user_attrs
        ),
        "median_trial_measured_s": statistics.median(
            measured_s(trial_result(t)) for t in tpe.trials if trial_result(t)
        ),
    }


def remeasure(
    workdir: Path, job_dirs: dict[str, Path], pairs: int
) -> dict[str, list[float | None]]:
    """Re-run each named config (its pinned trial_config.yaml) once per pair, in fresh processes,
    the order alternating A B, B A, ... so drift hits both sides alike; returns tokens/s per name
    and pair (None where a run failed)."""

    def run(name: str, i: int) -> float | None:
        res = workdir / "remeasure" / f"{name}-{i}.json"
        argv = trial_argv(
            "--config-path",
            str(job_dirs[name]),
            "--config-name",
            "trial_config",
            f"hydra.run.dir={workdir / 'remeasure' / f'{name}-{i}'}",
            f"trial.out={res}",
            "trial.study_storage=",
            "trial.progress_file=",
        )
        run_child(argv)
        result = read_result(res)
        if result is not None and result["status"] == "complete":
            return result["tokens_per_s"]
        log.warning("re-measuring %s (run %d) failed; see %s", name, i, res.parent)
        return None

    done = run_pairs(list(job_dirs), pairs, run)
    return {name: [p[name] for p in done] for name in job_dirs}


def remeasured_gap(again: dict[str, list[float | None]]) -> dict:
    """The winner's gap to the grid's best from the paired runs: 1 - the geometric mean of the
    per-pair ratios, with its 95% interval (the race's own paired test), beside the gap of the
    two medians (which ignores the pairing)."""
    w, g = paired(again["winner"], again["grid-best"])
    out: dict = {"pairs": len(w)}
    if len(w) >= 2:
        c = paired_interval(w, g, confidence=0.95)
        out |= {
            "gap": 1.0 - c.ratio,
            "gap_low": 1.0 - c.high,
            "gap_high": 1.0 - c.low,
            "ratios": pair_ratios(w, g),
            "median_gap": 1.0 - statistics.median(w) / statistics.median(g),
            "cv": {
                k: statistics.stdev(v) / statistics.fmean(v)
                for k, v in (("winner", w), ("grid-best", g))
            },
        }
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = bench_parser(__doc__, workdir=True)
    ap.add_argument("--search", default="grid", help="search space (conf/search/<name>.yaml)")
    ap.add_argument("--tpe-trials", type=int, default=8)
    ap.add_argument("--extra", nargs="*", default=[], help="more overrides for both sweeps")
    ap.add_argument(
        "--remeasure",
        type=int,
        default=12,
        help="interleaved pairs of re-runs of grid best and winner (0: skip)",
    )
    return ap.parse_args(argv)


def run_grid_and_tpe(workdir: Path, args: argparse.Namespace) -> float:
    """The full grid (the reference), then TPE + pruning on the same space; the TPE sweep's wall."""
    # no wall cap: the grid must be complete to be the reference
    common = [
        f"search={args.search}",
        "hydra.sweeper.mlflow.enabled=false",
        "hydra.sweeper.budget.cpu_max_wall_s=0",
    ]
    common += args.extra
    run_sweep(
        workdir,
        "bench-grid",
        *common,
        "hydra.sweeper.sampler=grid",
        "hydra.sweeper.pruner.kind=none",
        "hydra.sweeper.n_trials=0",
        "hydra.sweeper.verify.top_k=1",
        "hydra.sweeper.verify.repeats=1",
        "hydra.sweeper.verify.max_rounds=1",  # the reference is the grid's own measurements
    )
    tpe_wall = run_sweep(
        workdir,
        "bench-tpe",
        *common,
        "hydra.sweeper.sampler=tpe",
        "hydra.sweeper.pruner.kind=median",
        f"hydra.sweeper.n_trials={args.tpe_trials}",
        "hydra.sweeper.n_startup_trials=3",
    )
    return tpe_wall


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    if (workdir / "sweeps" / "optuna.db").exists():
        # the sweeps would resume their finished studies and time nothing
        raise SystemExit(f"--workdir {workdir} holds an earlier benchmark: pass a new directory")
    workdir.mkdir(parents=True, exist_ok=True)
    r = summarize(workdir, "bench-grid", "bench-tpe", run_grid_and_tpe(workdir, args))
    print(f"\nwork dir: {workdir}")
    print(
        f"grid: {r['grid_points']} points, best {r['grid_best_params']} "
        f"({r['grid_best_tokens_per_s']:,.0f} tokens/s)"
    )
    in_grid = r["winner_tokens_per_s_in_grid"]  # None where that grid point did not complete
    print(
        f"TPE + pruning: trials {r['sweep_trials']}, winner {r['winner_params']} "
        + (
            f"({in_grid:,.0f} tokens/s as measured by the grid)"
            if in_grid
            else "(not measured by the grid: that point failed there; gap n/a)"
        )
    )
    rows = [
        ("(a) winner vs grid best, gap", r["gap"], GOALS["gap"]),
        ("(b) sweep trial time / grid trial time", r["trial_time_frac"], GOALS["trial_time_frac"]),
        ("    ... including verification runs", r["trial_time_frac_with_verification"], None),
        ("(c) orchestration overhead / sweep wall", r["overhead_frac"], GOALS["overhead_frac"]),
    ]
    missed: list[str] = []  # the goals that print FAIL
    for name, value, goal in rows:
        said = "" if goal is None else verdict(value <= goal)
        if said == "FAIL":
            missed.append(name.strip())
        goal_text = "" if goal is None else f"goal <= {100 * goal:.0f}%"
        print(f"{name:<42} {100 * value:6.1f}%  {goal_text:<14} {said}")
    print(
        f"sweep wall {r['sweep_wall_s']:.0f} s, of which warm-up + measured steps "
        f"{r['measured_work_s']:.0f} s; median trial process {r['median_trial_wall_s']:.1f} s "
        f"for {r['median_trial_measured_s']:.1f} s of measured work"
    )
    same = key(r["winner_params"]) == key(r["grid_best_params"])
    if same:
        print("(a) re-measured: not needed, the winner is the grid's best config itself (gap 0)")
    elif args.remeasure:
        # One sample per grid point is one draw of this machine's noise: re-measure the two
        # configs side by side to see whether the gap is real.
        again = remeasure(
            workdir,
            {"grid-best": Path(r["grid_best_job_dir"]), "winner": Path(r["winner_job_dir"])},
            args.remeasure,
        )
        gap = remeasured_gap(again)
        r["remeasured"] = {"tokens_per_s": again, **gap}
        if "gap" in gap:
            ok = gap["gap"] <= GOALS["gap"]
            if not ok:
                missed.append("(a) re-measured gap")
            ratios = " ".join(f"{x:.3f}" for x in gap["ratios"])
            print(
                f"(a) re-measured, {gap['pairs']} interleaved pairs (winner / grid best): {ratios}"
            )
            print(
                f"(a) re-measured gap {100 * gap['gap']:.1f}% "
                f"(95% CI {100 * gap['gap_low']:.1f}% to {100 * gap['gap_high']:.1f}%; "
                f"gap of the medians {100 * gap['median_gap']:.1f}%, "
                f"CV winner {100 * gap['cv']['winner']:.1f}%, grid best "
                f"{100 * gap['cv']['grid-best']:.1f}%)  goal <= 3%  {verdict(ok)}"
            )
        else:
            print(
                f"(a) re-measured: only {gap['pairs']} pair(s) completed; see {workdir}/remeasure"
            )
    (workdir / "bench_sweep.json").write_text(json.dumps(r, indent=2, default=str))
    if missed:
        print(f"goals missed: {'; '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
