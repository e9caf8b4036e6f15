"""Peak memory of the memory levers of issue 22 on this CPU, measured beside the memory model.

    python -m scripts.bench.levers_memory               # small-cpu, vocab 50304, micro-batch 16
    python -m scripts.bench.levers_memory --model tiny --micro-batch 4   # a smoke run

For runtime.loss full and chunked, each with runtime.activation_checkpointing none, selective and
every: build the trainer's real Session (fp32, eager, CPU, grad_accum 2), take one optimizer step
(AdamW's state exists from there, as after a trial's warm-up), then measure one more step with the
tensor-level counter (train/measure/memory_meter.py: every tensor storage alive at the worst
moment) and put train.core.memory_model.predict_memory's figure beside it.

With --time-rounds N it also times one unmetered optimizer step of each row over N interleaved,
shuffled rounds (informational: no bound; this CPU is shared and noisy).

Bounds (exit 1 if any fails, the failing ones named): chunked at most 60% of full's peak (with
no recompute); selective strictly between none and every (for each loss); every prediction
within 15% of its measured peak.
"""

from __future__ import annotations

import gc
import logging
import statistics
import tempfile
import time
from pathlib import Path

from scripts.bench.configs import compose_config
from scripts.bench.harness import (
    bench_args,
    bench_parser,
    format_table,
    pair_ratios,
    shuffled_rounds,
    timed,
    verdict,
)
from scripts.bench.memory import metered_step
from train.core.meters import PhaseClock
from train.data.synthetic import generate
from train.run.loop import Session, build_session, train_step

log = logging.getLogger("bench_levers_memory")

VOCAB = 50304
GRAD_ACCUM = 2
LOSSES = ("full", "chunked")
RECOMPUTE = ("none", "selective", "every")
MAX_CHUNKED_SHARE = 0.60  # the bound: chunked's peak at most 60% of full's
TOLERANCE = 0.15  # the memory model within 15% of each measured peak


def build(model: str, micro_batch: int, loss: str, ac: str, *, tmp: Path) -> Session:
    """The trainer's Session for one row (fp32, eager, CPU, grad_accum 2)."""
    block = 64  # tiny and small-cpu both
    cfg = compose_config(
        [
            f"model={model}",
            f"model.vocab_size={VOCAB}",
            f"batch.micro_batch={micro_batch}",
            f"batch.grad_accum={GRAD_ACCUM}",
            f"batch.tokens_per_step={micro_batch * GRAD_ACCUM * block}",
            "runtime.device=cpu",
            "runtime.dtype=fp32",
            "runtime.compile=none",
            f"runtime.activation_checkpointing={ac}",
            f"runtime.loss={loss}",
            "data.num_workers=0",
            f"data.dir={tmp / 'synthetic'}",
            f"checkpoint.dir={tmp / 'ckpt'}",
        ]
    )
    return build_session(cfg)


def measure(model: str, micro_batch: int, loss: str, ac: str, *, tmp: Path) -> dict:
    """One row: build, one warm-up step, one measured step, the prediction."""
    measured, step_s, estimate = metered_step(build(model, micro_batch, loss, ac, tmp=tmp))
    log.info(
        "%s loss=%s AC=%s: %.1f MiB measured, %.1f predicted (%s), metered step %.1f s",
        model,
        loss,
        ac,
        measured * 1024,
        estimate.peak_gib * 1024,
        estimate.phase,
        step_s,
    )
    return {
        "loss": loss,
        "ac": ac,
        "measured_mib": measured * 1024,
        "predicted_mib": estimate.peak_gib * 1024,
        "phase": estimate.phase,
    }


def bound_failures(rows: list[dict], *, tolerance: float = TOLERANCE) -> list[str]:
    """Each bound the rows break, in words; [] when all hold."""
    peak = {(r["loss"], r["ac"]): r["measured_mib"] for r in rows}
    bad = []
    share = peak["chunked", "none"] / peak["full", "none"]
    if share > MAX_CHUNKED_SHARE:
        bad.append(f"chunked is {100 * share:.1f}% of full (bound {100 * MAX_CHUNKED_SHARE:.0f}%)")
    for loss in LOSSES:
        none, sel, every = (peak[loss, ac] for ac in RECOMPUTE)
        if not every < sel < none:
            bad.append(
                f"loss={loss}: selective {sel:.1f} MiB is not between every {every:.1f} "
                f"and none {none:.1f}"
            )
    for r in rows:
        error = r["predicted_mib"] / r["measured_mib"] - 1
        if abs(error) > tolerance:
            bad.append(f"loss={r['loss']} AC={r['ac']}: predicted {100 * error:+.1f}% off")
    return bad


def report(rows: list[dict], *, model: str, micro_batch: int) -> str:
    """The table and the two headline ratios."""
    full = {r["ac"]: r["measured_mib"] for r in rows if r["loss"] == "full"}
    table = format_table(
        ["loss", "recompute", "measured MiB", "vs full/none", "predicted MiB", "error", "peak at"],
        [
            [
                r["loss"],
                r["ac"],
                f"{r['measured_mib']:.1f}",
                f"{100 * r['measured_mib'] / full['none']:.1f}%",
                f"{r['predicted_mib']:.1f}",
                f"{100 * (r['predicted_mib'] / r['measured_mib'] - 1):+.2f}%",
                r["phase"],
            ]
            for r in rows
        ],
    )
    return (
        f"{model}, vocab {VOCAB}, micro-batch {micro_batch} x grad_accum {GRAD_ACCUM}, fp32, "
        f"eager, CPU; measured: tensor storages under a dispatch-mode counter over one optimizer "
        f"step after one warm-up step\n{table}"
    )


def time_rounds(model: str, micro_batch: int, rounds: int, *, tmp: Path) -> str:
    """Step time of each row, unmetered: every session built, one warm-up step each, then
    `rounds` rounds that run one optimizer step of each row in a fresh random order (so load on
    this shared machine falls on all rows alike). Per row: the median step and its range, and the
    median and range of its per-round ratio to the same round's full/none step."""
    keys = [(loss, ac) for loss in LOSSES for ac in RECOMPUTE]
    sessions = {k: build(model, micro_batch, *k, tmp=tmp) for k in keys}
    times: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
    try:
        for s in sessions.values():
            train_step(s, lr=s.cfg.optim.lr, clock=PhaseClock())
        for order in shuffled_rounds(keys, rounds, seed=0):
            for k in order:
                s = sessions[k]
                _, step_s = timed(lambda s=s: train_step(s, lr=s.cfg.optim.lr, clock=PhaseClock()))
                times[k].append(step_s)
    finally:
        for s in sessions.values():
            s.batches.close()
            s.checkpointer.close()
    base = times["full", "none"]
    rows = []
    for k in keys:
        ratios = sorted(pair_ratios(times[k], base))
        steps = sorted(times[k])
        rows.append(
            [
                *k,
                f"{statistics.median(steps):.3f}",
                f"{steps[0]:.3f}-{steps[-1]:.3f}",
                f"{statistics.median(ratios):.3f}",
                f"{ratios[0]:.3f}-{ratios[-1]:.3f}",
            ]
        )
    table = format_table(
        ["loss", "recompute", "step s (median)", "range", "x full/none (median)", "range"], rows
    )
    return f"step time, {rounds} interleaved rounds (shuffled order each round):\n{table}"


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--model", default="small-cpu", choices=("tiny", "small-cpu"))
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--tolerance", type=float, default=TOLERANCE, help="max |error| (0.15)")
    parser.add_argument(
        "--time-rounds",
        type=int,
        default=0,
        help="also time each row over this many interleaved rounds (0: off)",
    )
    args = bench_args(parser, argv, fmt="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("train").setLevel(logging.WARNING)
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-levers-") as tmp:
        generate(Path(tmp) / "synthetic", num_tokens=200_000)
        for loss in LOSSES:
            for ac in RECOMPUTE:
                rows.append(measure(args.model, args.micro_batch, loss, ac, tmp=Path(tmp)))
                gc.collect()
        timing = (
            time_rounds(args.model, args.micro_batch, args.time_rounds, tmp=Path(tmp))
            if args.time_rounds > 0
            else ""
        )
    print(report(rows, model=args.model, micro_batch=args.micro_batch))
    if timing:
        print(timing)
    peak = {(r["loss"], r["ac"]): r["measured_mib"] for r in rows}
    bad = bound_failures(rows, tolerance=args.tolerance)
    print(
        f"chunked/full (no recompute): {100 * peak['chunked', 'none'] / peak['full', 'none']:.1f}%"
        f" (bound {100 * MAX_CHUNKED_SHARE:.0f}%); worst model error "
        f"{max(abs(r['predicted_mib'] / r['measured_mib'] - 1) for r in rows) * 100:.2f}% "
        f"(bound {100 * args.tolerance:.0f}%); {verdict(not bad)}"
        f"{': ' + '; '.join(bad) if bad else ''}"
        f" ({time.perf_counter() - started:.0f} s)"
    )
    return 0 if not bad else 1


if __name__ == "__main__":
    raise SystemExit(main())
