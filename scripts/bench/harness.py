"""What every benchmark shares: the order of interleaved runs, the clocks, the spread and ratio
figures, the paired interval and the printed table.

Each benchmark compares arms (configs, launchers, cache modes) on a machine other people share, so
its runs are interleaved: pair i runs the arms in order when i is even and reversed when i is odd
(A B, B A, ...), or each round in a shuffled order, so that drift and other tenants' load fall on
every arm alike. A figure is then the median over pairs with its min-max range, and a comparison is
the per-pair ratio, never a ratio of two medians alone. Pure apart from `timed`, `run_child` and
`run_or_stop`.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from scripts.table import format_table
from train.core.paths import PROJECT_DIR

__all__ = [
    "REPO",
    "Child",
    "Interval",
    "bench_parser",
    "completed_trial",
    "emit",
    "format_table",
    "pair_order",
    "pair_ratios",
    "paired_interval",
    "quantile",
    "ratio_summary",
    "run_child",
    "run_or_stop",
    "run_pairs",
    "shuffled_rounds",
    "spread",
    "sweep_argv",
    "timed",
    "trial_argv",
    "verdict",
    "workdir_of",
]

REPO = PROJECT_DIR  # every child runs from the repository root

A = TypeVar("A")  # an arm: whatever names one side of a comparison
R = TypeVar("R")  # what one run of an arm returns

# --- the order of the runs ---------------------------------------------------------------------


def pair_order(index: int, arms: Sequence[A]) -> list[A]:
    """The arms in pair `index`'s order (0-based): as given in even pairs, reversed in odd ones."""
    return list(arms) if index % 2 == 0 else list(arms)[::-1]


def run_pairs(
    arms: Sequence[A],
    pairs: int,
    run: Callable[[A, int], R],
    *,
    after_pair: Callable[[int, dict[A, R]], None] | None = None,
) -> list[dict[A, R]]:
    """`pairs` interleaved pairs: run(arm, pair index) for each arm in `pair_order`; one dict of
    the arms' results per pair. `after_pair(index, that dict)` runs once each pair is done."""
    if pairs < 1:
        raise ValueError(f"--pairs must be at least 1, got {pairs}")
    out = []
    for i in range(pairs):
        out.append({arm: run(arm, i) for arm in pair_order(i, arms)})
        if after_pair is not None:
            after_pair(i, out[-1])
    return out


def shuffled_rounds(arms: Sequence[A], rounds: int, *, seed: int = 0) -> list[list[A]]:
    """Each round's order of the arms, shuffled by one seeded generator (reproducible)."""
    rng = random.Random(seed)
    return [rng.sample(list(arms), len(arms)) for _ in range(rounds)]


# --- clocks ------------------------------------------------------------------------------------


def timed(fn: Callable[[], R]) -> tuple[R, float]:
    """fn()'s value and the wall seconds it took (perf_counter; the caller syncs a device)."""
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


@dataclass(kw_only=True, frozen=True)
class Child:
    """A finished child process and its wall seconds, start to exit."""

    proc: subprocess.CompletedProcess
    wall_s: float

    @property
    def output(self) -> str:
        return (self.proc.stdout or "") + (self.proc.stderr or "")


def run_child(
    argv: Sequence[str],
    *,
    cwd: Path = REPO,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> Child:
    """One child process, its output captured as text, timed from start to exit."""
    proc, wall = timed(
        lambda: subprocess.run(
            list(argv),
            cwd=cwd,
            env=None if env is None else dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    )
    return Child(proc=proc, wall_s=wall)


def run_or_stop(argv: Sequence[str], *, cwd: Path, log_name: str, what: str) -> Child:
    """One child run in `cwd`, its output kept in cwd/`log_name`; a failed one stops the benchmark
    with a line naming `what` failed, its exit code and that log."""
    child = run_child(argv, cwd=cwd)
    log_path = cwd / log_name
    log_path.write_text(child.output)
    if child.proc.returncode != 0:
        raise SystemExit(f"{what} failed (exit {child.proc.returncode}); see {log_path}")
    return child


def sweep_argv(*overrides: str) -> list[str]:
    """`python sweep.py -m <overrides>`: the repository's sweep, from any working folder."""
    return [sys.executable, str(REPO / "sweep.py"), "-m", *overrides]


def trial_argv(*args: str) -> list[str]:
    """`python -m train.trial <args>`: one bounded trial (run it with cwd=REPO)."""
    return [sys.executable, "-m", "train.trial", *args]


def completed_trial(
    overrides: Sequence[str], *, out: Path, env: Mapping[str, str], tag: str
) -> tuple[dict, Child]:
    """One `python -m train.trial` child whose overrides write its result to `out`: the result
    and the child. A trial that fails or does not complete ends the benchmark, naming `tag`."""
    child = run_child(trial_argv(*overrides), env=env)
    if child.proc.returncode != 0 or not out.exists():
        raise SystemExit(
            f"{tag}: trial failed ({child.proc.returncode}):\n{child.proc.stderr[-3000:]}"
        )
    result = json.loads(out.read_text())
    if result["status"] != "complete":
        raise SystemExit(f"{tag}: trial {result['status']}: {result['failure']}")
    return result, child


def emit(text: str, out: Path | None) -> None:
    """Print a benchmark's output, and also write it to `out` where one is given (--out)."""
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")


def bench_parser(
    doc: str,
    *,
    pairs: int | None = None,
    arms: str = "",
    workdir: bool = False,
    overrides: str = "",
) -> argparse.ArgumentParser:
    """A benchmark's parser, described by its docstring's first paragraph; with --pairs (this
    many interleaved pairs of `arms` by default), --workdir (where the runs keep their folders,
    logs and studies) and positional Hydra overrides (described by `overrides`) where asked."""
    run_as = Path(sys.argv[0])  # a benchmark's usage line names the command that runs it
    prog = (
        f"python -m scripts.bench.{run_as.stem}" if run_as.parent == Path(__file__).parent else None
    )
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    if pairs is not None:
        what = f"interleaved pairs of {arms}" if arms else "interleaved pairs"
        parser.add_argument("--pairs", type=int, default=pairs, help=what)
    if workdir:
        parser.add_argument("--workdir", type=Path, default=None, help="default: a new temp dir")
    if overrides:
        parser.add_argument("overrides", nargs="*", help=overrides)
    return parser


def bench_args(
    parser: argparse.ArgumentParser,
    argv: list[str] | None,
    *,
    level: int = logging.INFO,
    fmt: str = "%(message)s",
) -> argparse.Namespace:
    """The command line parsed, and the benchmark's log lines routed to stderr at `level`."""
    args = parser.parse_args(argv)
    logging.basicConfig(level=level, format=fmt)
    return args


def workdir_of(args: argparse.Namespace, prefix: str) -> Path:
    """--workdir made if absent, or a new temporary folder named by `prefix`."""
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


# --- figures -----------------------------------------------------------------------------------


def spread(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    """'median (min-max)' of the values, each written with `fmt`."""
    if not values:
        raise ValueError("spread needs at least one value")
    lo, mid, hi = min(values), statistics.median(values), max(values)
    return f"{fmt.format(mid)} ({fmt.format(lo)}-{fmt.format(hi)})"


def pair_ratios(num: Sequence[float], den: Sequence[float]) -> list[float]:
    """num[i] / den[i] for each pair; the two arms must have run the same pairs."""
    if len(num) != len(den):
        raise ValueError(f"pairs: {len(num)} numerators and {len(den)} denominators")
    return [n / d for n, d in zip(num, den, strict=True)]


def ratio_summary(ratios: Sequence[float], fmt: str = "{:.2f}", *, unit: str = "pairs") -> str:
    """'median 1.23x (range 1.10-1.30, 3 pairs)' of per-pair ratios."""
    if not ratios:
        raise ValueError("ratio_summary needs at least one ratio")
    return (
        f"median {fmt.format(statistics.median(ratios))}x (range {fmt.format(min(ratios))}-"
        f"{fmt.format(max(ratios))}, {len(ratios)} {unit})"
    )


def quantile(values: Sequence[float], q: float) -> float:
    """The nearest-rank q-quantile (0 <= q <= 1) of the values: one of them, never interpolated."""
    if not values or not 0 <= q <= 1:
        raise ValueError(f"quantile needs values and 0 <= q <= 1, got {len(values)} values, q={q}")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclass(kw_only=True, frozen=True)
class Interval:
    """The geometric mean of per-pair ratios a / b and its confidence interval."""

    ratio: float
    low: float
    high: float
    pairs: int
    confidence: float


def paired_interval(
    a: Sequence[float | None], b: Sequence[float | None], *, confidence: float = 0.95
) -> Interval:
    """a / b from the pairs where both ran (None: a failed run), by the race's own paired t-test
    on log ratios (sweeper/verify/race_stats.py); fewer than 2 pairs give an unbounded interval."""
    from sweeper.verify.race_rules import paired
    from sweeper.verify.race_stats import compare

    x, y = paired(a, b)
    if not x:
        return Interval(ratio=math.nan, low=0.0, high=math.inf, pairs=0, confidence=confidence)
    c = compare(x, y, confidence=confidence)
    return Interval(ratio=c.ratio, low=c.low, high=c.high, pairs=c.rounds, confidence=confidence)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"
