"""How steady is this machine's clock for fixed work? The floor under any step-time spread.

    python -m scripts.bench.noise_floor [--reps 30] [--rep-seconds 0.25] [--threads 0]

Times the same fixed work (square fp32 matmuls on the CPU) `--reps` times and prints the spread
(CV = std/mean) of those times. The work never changes, so its spread is the machine's own: other
tenants of a shared VM, frequency scaling, the scheduler. A trainer's step-time CV cannot be
expected below this figure on the same machine at the same time; `scripts.bench.trainer` prints
both.
"""

from __future__ import annotations

import logging
import statistics
import sys
import time
from dataclasses import dataclass

import torch

from scripts.bench.harness import bench_parser

log = logging.getLogger("noise_floor")

_SIZE = 256  # matmul side: in cache, so memory bandwidth noise stays out of the figure


@dataclass(kw_only=True, frozen=True)
class Floor:
    """Spread of `reps` timings of identical work."""

    cv: float  # std/mean of the rep times
    p50_s: float  # median rep time
    reps: int
    threads: int


def _work(a: torch.Tensor, n: int) -> None:
    for _ in range(n):
        torch.mm(a, a)


def measure_floor(*, reps: int = 30, rep_seconds: float = 0.25, threads: int = 0) -> Floor:
    """Calibrate a matmul count that takes ~rep_seconds, then time it `reps` times."""
    if reps < 2 or rep_seconds <= 0:
        raise ValueError(f"reps must be >= 2 and rep_seconds > 0, got {reps}, {rep_seconds}")
    before = torch.get_num_threads()
    if threads > 0:
        torch.set_num_threads(threads)
    try:
        a = torch.randn(_SIZE, _SIZE)
        _work(a, 10)  # warm the kernels and the thread pool
        t0 = time.perf_counter()
        _work(a, 50)
        per_mm = (time.perf_counter() - t0) / 50
        n = max(1, round(rep_seconds / per_mm))
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            _work(a, n)
            times.append(time.perf_counter() - t0)
        return Floor(
            cv=statistics.pstdev(times) / statistics.fmean(times),
            p50_s=statistics.median(times),
            reps=reps,
            threads=torch.get_num_threads(),
        )
    finally:
        torch.set_num_threads(before)


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__)
    p.add_argument("--reps", type=int, default=30, help="timed repetitions")
    p.add_argument("--rep-seconds", type=float, default=0.25, help="target seconds per repetition")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    args = p.parse_args(argv)
    floor = measure_floor(reps=args.reps, rep_seconds=args.rep_seconds, threads=args.threads)
    print(
        f"noise floor: CV {100 * floor.cv:.2f}% over {floor.reps} reps of "
        f"{floor.p50_s * 1e3:.0f} ms fixed matmul work ({floor.threads} threads)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
