"""`python -m train.explain`: why a step takes as long as it does, and how fast it could ever be.

Arithmetic mode (no run): the physical floor of a model + batch split + device + dtype, the real
MFU of a measured step time and what nanoGPT would print for it:
  python -m train.explain --model gpt2-xl --micro-batch 16 --block 1024 --grad-accum 64 \
      --device "NVIDIA H200" --dtype bf16 --step-time-s 21 --target-step-time-s 8
Measured mode: the time split and bottleneck verdict of a trial result, a sweep dir or a new trial:
  python -m train.explain --result outputs/.../trial.json      (or a sweep's multirun dir)
  python -m train.explain --run model=small-cpu data.num_workers=0
Argparse, not Hydra, so it answers arithmetic questions without composing a config; the arithmetic
path imports neither torch nor hydra (a fresh --run trial is a subprocess).
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
from dataclasses import asdict
from functools import partial
from pathlib import Path

import yaml

from train.core.chips import PEAK_DTYPES
from train.core.cost import (
    DEFAULT_PLANNED_TOKENS,
    planned_steps_for,
    train_time,
    usd_per_1b_tokens,
)
from train.core.diagnosis import Diagnosis, diagnose
from train.core.diagnosis_text import basis_text, fix_text, headline_text, host_signal_text
from train.core.flops import lookup_peak
from train.core.result import load_result
from train.explain.floor import FloorInputs, FloorReport, floor_report, format_floor
from train.explain.sweep_dir import judged, pick_result, sweep_evidence
from train.measure.ceiling_cache import newest_ceiling

log = logging.getLogger(__name__)
MODEL_DIR = Path(__file__).resolve().parents[2] / "conf" / "model"
SHAPE_KEYS = ("n_layer", "n_head", "n_embd", "vocab_size")


def arithmetic_inputs(args: argparse.Namespace) -> FloorInputs:
    shape: dict = {}
    name = args.model or "custom"
    if args.model:
        path = MODEL_DIR / f"{args.model}.yaml"
        if not path.exists():
            known = sorted(p.stem for p in MODEL_DIR.glob("*.yaml"))
            raise ValueError(
                f"--model {args.model!r} is not a preset in {MODEL_DIR}: use one "
                f"of {known} or pass --n-layer/--n-head/--n-embd/--vocab-size"
            )
        shape = yaml.safe_load(path.read_text())
    for key in (*SHAPE_KEYS, "block_size"):
        given = getattr(args, "block" if key == "block_size" else key)
        if given is not None:
            shape[key] = given
    missing = [k for k in (*SHAPE_KEYS, "block_size") if k not in shape]
    if missing:
        raise ValueError(f"model shape lacks {missing}: pass --model <preset> or --{missing[0]}")
    peak = lookup_peak(args.device, args.dtype, tf32=args.tf32)
    ceiling = None
    if args.ceiling_tflops is not None:
        ceiling = (args.ceiling_tflops * 1e12, "given with --ceiling-tflops")
    else:
        ceiling = newest_ceiling(args.device, args.dtype, tf32=args.tf32)
    return FloorInputs(
        model=name,
        n_layer=shape["n_layer"],
        n_head=shape["n_head"],
        n_embd=shape["n_embd"],
        vocab_size=shape["vocab_size"],
        block_size=shape["block_size"],
        micro_batch=args.micro_batch,
        grad_accum=args.grad_accum,
        world_size=args.world_size,
        device_name=args.device,
        dtype=args.dtype,
        peak_flops=peak.flops if peak else None,
        peak_source=peak.source if peak else None,
        ceiling_flops=ceiling[0] if ceiling else None,
        ceiling_source=ceiling[1] if ceiling else None,
        step_time_s=args.step_time_s,
        target_step_time_s=args.target_step_time_s,
    )


def result_floor(result: dict, *, target_step_time_s: float | None = None) -> FloorReport:
    """The floor report of a measured trial: its model, split, device peak/ceiling and its step
    as its tokens/s counts it (the window's tokens over its time: the mean step), so the floor's
    tokens/s and MFU are the result's own, not a second figure from the p50."""
    cfg, dev = result["config"], result["device"]
    m, b = cfg["model"], cfg["batch"]
    per_device = b["micro_batch"] * b["grad_accum"] * m["block_size"]
    tps = result.get("tokens_per_s")
    step_time_s = result["tokens_per_step"] / tps if tps else result["step_time_s"]["p50"]
    return floor_report(
        FloorInputs(
            model=m.get("name", "custom"),
            n_layer=m["n_layer"],
            n_head=m["n_head"],
            n_embd=m["n_embd"],
            vocab_size=m["vocab_size"],
            block_size=m["block_size"],
            micro_batch=b["micro_batch"],
            grad_accum=b["grad_accum"],
            world_size=max(1, result["tokens_per_step"] // per_device),
            device_name=dev.get("name") or dev.get("type") or "unknown",
            dtype=dev["dtype"],
            peak_flops=dev.get("peak_flops"),
            peak_source=dev.get("peak_source"),
            ceiling_flops=dev.get("ceiling_flops"),
            ceiling_source=dev.get("ceiling_source"),
            step_time_s=step_time_s,
            target_step_time_s=target_step_time_s,
        )
    )


def run_fresh_trial(overrides: list[str], out_dir: Path) -> Path:
    """Run `python -m train.trial <overrides>` in a subprocess writing into out_dir; return the
    result path."""
    out = out_dir / "result.json"
    cmd = [
        sys.executable,
        "-m",
        "train.trial",
        *overrides,
        f"trial.out={out}",
        f"hydra.run.dir={out_dir / 'trial'}",
    ]
    log.info("running %s", " ".join(cmd))
    # The child's own summary goes to our stderr so that stdout stays the report (or pure JSON).
    proc = subprocess.run(cmd, check=False, stdout=sys.stderr.fileno())
    if not out.exists():
        raise RuntimeError(
            f"the trial wrote no result (exit code {proc.returncode}): {' '.join(cmd)}"
        )
    return out


def _gain(g: float | None) -> str:
    if g is None:
        return "gain unknown"
    return "removes it" if g == float("inf") else f"up to {g:.2f}x"


def format_diagnosis(d: Diagnosis, result: dict, path: Path) -> str:
    lines = [f"result: {path}"]
    if d.verdict == "failed":
        return "\n".join([*lines, f"verdict: {headline_text(d)}"])
    st, dev = result["step_time_s"], result["device"]
    lines.append(
        f"{result['tokens_per_s']:,.0f} tokens/s on {dev.get('name')} ({dev.get('dtype')}), step "
        f"p50 {st['p50'] * 1e3:.1f} ms, mean {st['mean'] * 1e3:.1f} ms, cv {100 * st['cv']:.1f}%"
    )
    lines.append("where a mean step goes:")
    frac = d.evidence["time_frac"]
    for key, label in (
        ("compute", "compute (fwd+bwd)"),
        ("data_wait", "data wait"),
        ("optimizer", "optimizer"),
        ("checkpoint", "checkpoint stall"),
        ("comms", "comms"),
        ("other", "other (host, syncs)"),
    ):
        if key in frac:
            ms = d.attribution_s[key] * 1e3
            lines.append(f"  {label:<20} {ms:9.1f} ms  {100 * frac[key]:5.1f}%")
    lines.append(
        f"  warm-up {d.attribution_s['warmup_s'] or 0:.2f} s, of which compile "
        f"{d.attribution_s['compile_s']:.2f} s (excluded from the step numbers; "
        f"{100 * d.evidence['compile_share_of_planned_run']:.1f}% of a "
        f"{d.evidence['planned_steps']:,}-step run)"
    )
    lines.append(f"verdict: {headline_text(d)}")
    lines.append(f"  host signal: {host_signal_text(d)}")
    for fix in d.fixes:
        lines.append(f"  fix: {fix_text(fix)}: {_gain(fix.expected_gain)} ({basis_text(fix)})")
    if d.secondary:
        lines.append(f"  also over threshold: {', '.join(d.secondary)}")
    return "\n".join(lines)


def _jsonable(x):
    return None if isinstance(x, float) and x == float("inf") else x


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m train.explain", description=__doc__.splitlines()[0])
    src = p.add_argument_group("measured mode")
    src.add_argument("--result", type=Path, help="a trial result JSON, or a sweep dir to pick from")
    src.add_argument(
        "--run",
        nargs=argparse.REMAINDER,
        metavar="OVERRIDE",
        help="run a fresh trial with these Hydra overrides (must come last)",
    )
    src.add_argument("--planned-steps", type=int, help="planned run length for the compile share")
    ar = p.add_argument_group("arithmetic mode")
    ar.add_argument("--model", help=f"preset name in {MODEL_DIR}")
    for key in SHAPE_KEYS:
        ar.add_argument(f"--{key.replace('_', '-')}", dest=key, type=int)
    ar.add_argument("--block", type=int, help="sequence length (default: the preset's block_size)")
    ar.add_argument("--micro-batch", type=int)
    ar.add_argument("--grad-accum", type=int, default=1)
    ar.add_argument("--world-size", type=int, default=1)
    ar.add_argument("--device", help='device name, e.g. "NVIDIA H200" (as nvidia-smi names it)')
    ar.add_argument("--dtype", choices=PEAK_DTYPES, default="bf16")
    ar.add_argument(
        "--tf32",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fp32 matmuls on TF32 tensor cores (sets which fp32 peak applies)",
    )
    ar.add_argument("--ceiling-tflops", type=float, help="a measured matmul ceiling, TFLOP/s")
    p.add_argument("--step-time-s", type=float, help="a measured optimizer-step time")
    p.add_argument("--target-step-time-s", type=float, help="the step time you hope for")
    p.add_argument(
        "--planned-tokens",
        type=int,
        default=DEFAULT_PLANNED_TOKENS,
        help="tokens of the planned run, for the time to train (default 10B)",
    )
    p.add_argument(
        "--usd-per-hour",
        type=float,
        default=0.0,
        help="device price in USD per hour, for $ per 1B tokens (0 = hours only)",
    )
    p.add_argument("--format", choices=("text", "json"), default="text")
    args = p.parse_args(argv)
    if args.result is None and args.run is None and (args.micro_batch is None or not args.device):
        p.error("arithmetic mode needs --micro-batch and --device (or use --result / --run)")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    try:
        if args.result is None and args.run is None:
            report = floor_report(arithmetic_inputs(args))
            out = (
                json.dumps(_floor_doc(report), indent=2)
                if args.format == "json"
                else "\n".join([format_floor(report), *cost_lines(report, args)])
            )
            print(out)
            return 0
        if args.result is not None:
            # JSON mode keeps stdout one JSON document: the choice is said on stderr
            path = pick_result(
                args.result, say=print if args.format == "text" else partial(print, file=sys.stderr)
            )
        else:  # kept afterwards: the printed result path stays readable
            path = run_fresh_trial(args.run, Path(tempfile.mkdtemp(prefix="explain-")))
        result = load_result(path)
        d = diagnose(result, planned_steps=args.planned_steps)
        judge, unjudged = (
            sweep_evidence(args.result, path) if args.result is not None else (None, "")
        )
        dropped = 0
        if judge is not None and d.verdict != "failed":
            d, dropped = judged(d, judge)
        floor = (
            None
            if d.verdict == "failed"
            else result_floor(result, target_step_time_s=args.target_step_time_s)
        )
        if args.format == "json":
            doc = {
                "result": str(path),
                "diagnosis": _diagnosis_doc(d),
                "floor": _floor_doc(floor) if floor else None,
                "fixes_left_out": dropped,
                "fixes_unchecked": unjudged or None,
            }
            print(json.dumps(doc, indent=2, default=str))
        else:
            notes = [unjudged] if unjudged else []
            if dropped:
                notes.append(
                    f"{dropped} fix(es) left out: the sweep measured them no faster "
                    f"(the race, or a pruned or complete trial at this trial's other "
                    f"settings)"
                )
            print(
                format_diagnosis(d, result, path)
                + "".join(f"\n  note: {n}" for n in notes)
                + ("\n\nthe floor:\n" + format_floor(floor) if floor else "")
            )
        return 0 if d.verdict != "failed" else 3
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def cost_lines(r: FloorReport, args: argparse.Namespace) -> list[str]:
    """Time to train the planned tokens at the measured step and at the floor, and $ per 1B."""
    steps = planned_steps_for(planned_tokens=args.planned_tokens, tokens_per_step=r.tokens_per_step)
    lines = []
    floor = f"100%-MFU {r.inputs.dtype} floor"
    for label, step_s in (("measured step", r.inputs.step_time_s), (floor, r.floor_s)):
        if step_s is None:
            continue
        t = train_time(planned_steps=steps, step_s=step_s)
        text = (
            f"  time to train       {args.planned_tokens:,} tokens: {t.total_h:,.1f} h at the "
            f"{label} of {step_s:.3g} s ({steps:,} steps; no compile or checkpoint given)"
        )
        if args.usd_per_hour > 0:
            usd = usd_per_1b_tokens(
                total_s=t.total_s,
                planned_tokens=args.planned_tokens,
                usd_per_hour=args.usd_per_hour,
            )
            text += f", ${usd:,.2f} per 1B tokens at ${args.usd_per_hour:,.2f}/h"
        lines.append(text)
    return lines


def _floor_doc(r: FloorReport) -> dict:
    doc = asdict(r)
    doc.update(doc.pop("inputs"))
    return doc


def _diagnosis_doc(d: Diagnosis) -> dict:
    """The diagnosis as data (kinds and numbers) with the sentences the text report shows."""
    doc = asdict(d)
    doc["headline"] = headline_text(d)
    if d.verdict != "failed":
        doc["evidence"]["host_signal"] = host_signal_text(d)
    doc["fixes"] = [
        {
            "fix": fix_text(f),
            "changes": f.changes,
            "expected_gain": _jsonable(f.expected_gain),
            "basis": basis_text(f),
            "kind": f.kind,
            "numbers": {k: _jsonable(v) for k, v in f.numbers.items()},
            "measured": asdict(f.measured) if f.measured is not None else None,
        }
        for f in d.fixes
    ]
    return doc
