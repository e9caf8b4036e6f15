"""Cold compile and step time of runtime.compile_unit=model against block, on a deep narrow model.

    python -m scripts.bench.compile_unit [--pairs 3] [--n-layer 24] [--n-embd 64] [--steps 20]
    python -m scripts.bench.compile_unit --device cuda --model gpt2-xl --block-size 1024 \
        --dtype bf16 --micro-batch 16 --grad-accum 4 --steps 5 --pairs 1   # on a GPU

Each run is one `python -m train.trial` in a fresh process with runtime.compile_cache=off (a
private, empty cache folder; Inductor's FX-graph and AOTAutograd caches off), so every compile is
cold. The pairs are interleaved, their order alternating (model then block, block then model, ...)
so that load from other users falls on both arms alike. Each run prints its cold compile (torch's
own compile seconds in the warm-up, train/measure/compile_stats.py), its warm-up wall, its measured
step time (p50 of the window) and the Dynamo recompiles its log shows (TORCH_LOGS=recompiles: a
block that could not reuse block 1's graph would show one). Then each figure's min / median / max
per arm, and the per-pair ratios: compile model / block (the goal: >= 3x) and step block / model
(the goal: within 3%). Measured numbers only.

On a GPU (--device cuda) the same runs compare gpt2-xl's cold compile and step (the 9-minute sweep
issue's GPU comparison); --n-layer and --n-embd change the preset only where given (tiny: 24 and 64
unless given).

Part of every cold compile on a CPU is no graph's: Inductor's ISA probe (cpu_vec_isa.pick_vec_isa
builds and loads a test program per instruction set into the cache folder, once per folder: a
sweep's shared cache pays it once). Each pair also times that probe alone, in a fresh process with
an empty folder, and the ratios are printed with it taken off both arms as well.

Step times of runs in separate processes, minutes apart, carry this shared machine's drift (10-20%
from one minute to the next here), more than the few % asked of them. So the two units are also
built in this process and stepped alternately, one optimizer step each, for --rounds rounds
(scripts/bench/step_pairs.py): each round's block / model ratio has the drift cancelled, and their
median and range are the step comparison to read (0 rounds: skipped; a GPU holds gpt2-xl twice only
if it fits).

Not cleared between runs: Inductor's precompiled C++ header (kept in torch's default temp folder,
not the cache folder), built once per machine by whichever run comes first.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from scripts.bench.configs import compose_config, cpu_trial_overrides_of
from scripts.bench.harness import (
    bench_parser,
    completed_trial,
    emit,
    format_table,
    pair_ratios,
    run_child,
    run_pairs,
    spread,
)
from scripts.bench.step_pairs import StepPairs, interleaved_steps
from train.core.compile_cache import cache_env
from train.core.config import Config

UNITS = ("model", "block")
RECOMPILE_MARK = "Recompiling function"  # torch/_dynamo's recompiles log line
ISA_PROBE = (
    "import time; from torch._inductor import cpu_vec_isa; t = time.perf_counter(); "
    "cpu_vec_isa.pick_vec_isa(); print(time.perf_counter() - t)"
)


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = bench_parser(__doc__, pairs=3, arms="model and block")
    p.add_argument("--model", default="tiny", help="a preset of conf/model/")
    p.add_argument("--device", default="cpu", help="runtime.device: cpu or cuda")
    p.add_argument("--dtype", default="auto", help="runtime.dtype")
    p.add_argument("--block-size", type=int, default=64, help="model.block_size")
    p.add_argument("--n-layer", type=int, help="model.n_layer (tiny: 24 unless given)")
    p.add_argument("--n-embd", type=int, help="model.n_embd (tiny: its own 64, narrow)")
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--grad-accum", type=int, default=4)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--steps", type=int, default=20, help="measured steps per run")
    p.add_argument("--compile", default="default", help="runtime.compile mode")
    p.add_argument("--activation-checkpointing", default="none")
    p.add_argument("--threads", type=int, default=0, help="runtime.threads (0: torch's default)")
    p.add_argument(
        "--rounds",
        type=int,
        default=40,
        help="rounds of one step per unit, interleaved in this process (0: skip)",
    )
    p.add_argument("--out", type=Path, help="also write the output to this file")
    return p.parse_args(argv)


def trial_overrides(a: argparse.Namespace, tmp: Path, unit: str, tag: str) -> list[str]:
    """The overrides of one cold trial of `unit`: the preset on the device asked for, the cache
    off, real full steps."""
    base = cpu_trial_overrides_of(a, tmp)  # --model, --micro-batch, ... --steps
    shape = {"model.n_layer": a.n_layer, "model.n_embd": a.n_embd}
    if a.model == "tiny" and a.n_layer is None:
        shape["model.n_layer"] = 24
    return [
        *(o for o in base if not o.startswith(("runtime.device=", "runtime.compile="))),
        f"runtime.device={a.device}",
        f"runtime.dtype={a.dtype}",
        f"model.block_size={a.block_size}",
        *(f"{k}={v}" for k, v in shape.items() if v is not None),
        f"runtime.compile={a.compile}",
        f"runtime.compile_unit={unit}",
        "runtime.compile_cache=off",
        f"runtime.activation_checkpointing={a.activation_checkpointing}",
        f"runtime.threads={a.threads}",
        "trial.project_above_s=0",
        f"trial.out={tmp / f'{tag}.json'}",
        f"hydra.run.dir={tmp / tag}",
    ]


def shape_overrides(a: argparse.Namespace) -> list[str]:
    """The model, its shape and device as this run sets them (for the report's first line)."""
    keys = ("model=", "model.n_layer=", "model.n_embd=", "model.block_size=", "runtime.d")
    return [o for o in trial_overrides(a, Path("."), "model", "x") if o.startswith(keys)]


def in_process_steps(a: argparse.Namespace, tmp: Path) -> StepPairs | None:
    """Both units' steps interleaved in this process (module doc); None with --rounds 0."""
    if a.rounds < 1:
        return None
    runtime_only = ("hydra.", "trial.out=")

    def config(unit: str) -> Config:
        overrides = trial_overrides(a, tmp, unit, "in-process")
        return compose_config([o for o in overrides if not o.startswith(runtime_only)])

    arms = {unit: config(unit) for unit in UNITS}
    return interleaved_steps(arms, warmup_steps=a.warmup_steps, rounds=a.rounds)


def run_one(a: argparse.Namespace, tmp: Path, unit: str, tag: str) -> dict:
    """One cold trial of `unit` in a fresh process: its result, and the recompiles it logged."""
    env = {**os.environ, **cache_env("off"), "TORCH_LOGS": "recompiles"}
    out = tmp / f"{tag}.json"
    result, child = completed_trial(trial_overrides(a, tmp, unit, tag), out=out, env=env, tag=tag)
    result["recompiles"] = child.output.count(RECOMPILE_MARK)
    return result


def isa_probe_s(folder: Path, *, device: str = "cpu") -> float:
    """Inductor's CPU ISA probe alone, in a fresh process with the empty cache folder `folder`
    (0 on a GPU, whose compile never runs it)."""
    if device != "cpu":
        return 0.0
    child = run_child(
        [sys.executable, "-c", ISA_PROBE], env={**os.environ, **cache_env(str(folder))}
    )
    child.proc.check_returncode()
    return float(child.proc.stdout.split()[-1])


def measure(a: argparse.Namespace, tmp: Path) -> tuple[dict[str, list[dict]], list[float]]:
    """The interleaved pairs: each unit's results in pair order, and each pair's ISA probe."""
    probes: list[float] = []

    def run(unit: str, i: int) -> dict:
        r = run_one(a, tmp, unit, f"{i + 1}-{unit}")
        print(
            f"pair {i + 1} {unit}: compile {r['compile_s']:.1f} s, step p50 "
            f"{r['step_time_s']['p50'] * 1e3:.1f} ms",
            file=sys.stderr,
            flush=True,
        )
        return r

    pairs = run_pairs(
        UNITS,
        a.pairs,
        run,
        after_pair=lambda i, _: probes.append(isa_probe_s(tmp / f"isa-{i + 1}", device=a.device)),
    )
    return {u: [p[u] for p in pairs] for u in UNITS}, probes


def report(
    a: argparse.Namespace,
    runs: dict[str, list[dict]],
    probes: list[float],
    load_before: float,
    steps: StepPairs | None = None,
) -> str:
    rows = [
        [
            str(i + 1),
            u,
            f"{r['compile_s']:.1f}",
            f"{probes[i]:.1f}",
            f"{r['warmup_s']:.1f}",
            f"{r['step_time_s']['p50'] * 1e3:.1f}",
            f"{r['step_time_s']['cv']:.1%}",
            str(r["recompiles"]),
            r["compile"]["cache"]["state"],
        ]
        for i in range(a.pairs)
        for u in UNITS
        for r in [runs[u][i]]
    ]
    compile_s = {u: [r["compile_s"] for r in runs[u]] for u in UNITS}
    graphs_s = {u: [c - p for c, p in zip(compile_s[u], probes, strict=True)] for u in UNITS}
    step_ms = {u: [r["step_time_s"]["p50"] * 1e3 for r in runs[u]] for u in UNITS}

    def ratio(xs: dict[str, list[float]], num: str, den: str) -> list[float]:
        return pair_ratios(xs[num], xs[den])

    first = runs["model"][0]
    return "\n".join(
        [
            f"runtime.compile_unit model vs block: {' '.join(shape_overrides(a))}, "
            f"runtime.compile={a.compile}, activation_checkpointing={a.activation_checkpointing}, "
            f"micro_batch {a.micro_batch} x grad_accum {a.grad_accum}, runtime.threads={a.threads} "
            f"({first['fingerprint'].get('torch_threads')} used), {a.steps} measured steps, "
            f"{a.pairs} interleaved pairs, every run a fresh process with "
            "runtime.compile_cache=off",
            f"device {first['device']['name']}, {os.cpu_count()} CPUs, 1-minute load average "
            f"{load_before:.1f} at the start and {os.getloadavg()[0]:.1f} at the end (other users "
            f"share this machine), torch {first['fingerprint'].get('torch')}",
            "",
            format_table(
                [
                    "pair",
                    "unit",
                    "cold compile s",
                    "pair's ISA probe s",
                    "warm-up s",
                    "step p50 ms",
                    "step cv",
                    "recompiles",
                    "cache",
                ],
                rows,
            ),
            "",
            "median (min-max) over the pairs:",
            *(
                f"  {u:5s}: cold compile {spread(compile_s[u], '{:.1f}')} s, less the ISA probe "
                f"{spread(graphs_s[u], '{:.1f}')} s, step p50 {spread(step_ms[u], '{:.1f}')} ms"
                for u in UNITS
            ),
            f"  ISA probe alone: {spread(probes, '{:.1f}')} s",
            f"  cold compile model / block: "
            f"{spread(ratio(compile_s, 'model', 'block'), '{:.2f}')}x (goal >= 3x); "
            "less the ISA probe: "
            f"{spread(ratio(graphs_s, 'model', 'block'), '{:.2f}')}x",
            f"  step time block / model:    {spread(ratio(step_ms, 'block', 'model'), '{:.3f}')} "
            "(goal within 0.97-1.03; runs minutes apart, the machine's drift included)",
            *_in_process_lines(steps),
        ]
    )


def _in_process_lines(steps: StepPairs | None) -> list[str]:
    """The interleaved in-process comparison's lines (none where it was skipped)."""
    if steps is None:
        return []
    n = len(steps.ratios)
    return [
        "",
        f"interleaved in one process, {n} rounds of one optimizer step per unit (A B / B A):",
        *(
            f"  {u:5s}: step {spread([s * 1e3 for s in steps.seconds[u]], '{:.1f}')} ms"
            for u in UNITS
        ),
        f"  step time block / model, per round: {spread(steps.ratios, '{:.3f}')} "
        "(goal within 0.97-1.03)",
    ]


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_compile_unit_") as tmp:
        runs, probes = measure(a, Path(tmp))
        steps = in_process_steps(a, Path(tmp))
        emit(report(a, runs, probes, load_before, steps), a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
