"""float8 against bf16, measured with real bounded trials (`train.trial.measurement.run_trial`).

    python -m scripts.bench.float8                          # CPU: emulated float8 on tiny
    python -m scripts.bench.float8 --device cuda --model gpt2-xl --tokens-per-step 65536 \
        --micro-batch 16 --rounds 3 --compile default          # a GPU with cc >= 8.9

Each round runs bf16, float8 tensorwise and float8 rowwise once, in a shuffled order (drift
cancels over rounds); it prints every trial's tokens/s, loss first -> last over the window, the
linears converted and the MFU basis, then each float8 recipe's tokens/s over bf16's in the same
round (median and range). On a CPU float8 runs in torchao's emulate mode: it tests the plumbing
(the loss over the window must stay finite and fall) and says nothing about speed. Exit 1 when a
float8 trial fails or its loss is not finite or does not fall.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import tempfile
from pathlib import Path

from scripts.bench.configs import compose_config
from scripts.bench.harness import bench_parser, format_table, ratio_summary, shuffled_rounds
from train.trial.measurement import run_trial

VARIANTS = {"bf16": "none", "float8 tensorwise": "tensorwise", "float8 rowwise": "rowwise"}


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = bench_parser(__doc__)
    p.add_argument("--device", default="cpu", help="cpu (float8 emulated) or cuda")
    p.add_argument("--model", default="tiny")
    p.add_argument("--block-size", type=int, default=64, help="the preset's block_size")
    p.add_argument("--tokens-per-step", type=int, default=256)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--steps", type=int, default=50, help="measured steps per trial")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--compile", default="none")
    p.add_argument("--lr", type=float, default=5e-3)
    return p.parse_args(argv)


def _overrides(a: argparse.Namespace, tmp: Path, float8: str) -> list[str]:
    emulate = a.device == "cpu"
    return [
        f"model={a.model}",
        f"batch.tokens_per_step={a.tokens_per_step}",
        f"batch.micro_batch={a.micro_batch}",
        f"batch.grad_accum={a.tokens_per_step // (a.micro_batch * a.block_size)}",
        f"runtime.device={a.device}",
        "runtime.dtype=bf16",
        f"runtime.compile={a.compile}",
        f"runtime.float8={float8}",
        f"runtime.float8_emulate={str(emulate).lower()}",
        f"optim.lr={a.lr}",
        "data.num_workers=0",
        f"data.dir={tmp / 'data' / 'synthetic'}",
        f"checkpoint.dir={tmp / 'ckpt'}",
        "trial.warmup_steps=2",
        f"trial.max_steps={a.steps}",
        f"trial.min_steps={a.steps}",
        "trial.max_seconds=3600",
        "trial.project_above_s=0",
    ]


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    logging.basicConfig(level=logging.WARNING)
    rows, ratios, ok = [], {name: [] for name in VARIANTS if name != "bf16"}, True
    with tempfile.TemporaryDirectory(prefix="bench_float8_") as tmp:
        for rnd, order in enumerate(shuffled_rounds(list(VARIANTS), a.rounds, seed=0), start=1):
            tps = {}
            for name in order:
                cfg = compose_config(_overrides(a, Path(tmp), VARIANTS[name]))
                r = run_trial(cfg, out_path=Path(tmp) / f"{rnd}-{VARIANTS[name]}.json")
                if r["status"] != "complete":
                    print(f"{name}: trial {r['status']}: {r['failure']}")
                    ok = False
                    continue
                tps[name] = r["tokens_per_s"]
                first, last = r["loss"]["first"], r["loss"]["last"]
                falls = math.isfinite(last) and last < first
                ok &= falls or name == "bf16"
                f8 = r.get("float8") or {}
                rows.append(
                    [
                        str(rnd),
                        name,
                        f"{r['tokens_per_s']:,.0f}",
                        f"{first:.3f} -> {last:.3f}",
                        f"{f8.get('linears_converted', 0)}/{f8.get('linears_total', '-')}"
                        + (" emulated" if f8.get("emulated") else ""),
                        str(r["mfu"].get("basis")),
                    ]
                )
            for name in ratios:
                if name in tps and "bf16" in tps:
                    ratios[name].append(tps[name] / tps["bf16"])
    print(
        f"device {a.device}, model {a.model}, {a.tokens_per_step} tokens/step, "
        f"{a.steps} measured steps per trial, {a.rounds} round(s), compile {a.compile}"
    )
    print(
        format_table(
            ["round", "variant", "tokens/s", "loss first -> last", "float8 linears", "MFU basis"],
            rows,
        )
    )
    for name, xs in ratios.items():
        if xs:
            print(
                f"{name} / bf16 tokens/s: {ratio_summary(xs, '{:.3f}', unit='rounds')}"
                + (" -- emulated: plumbing only, no speed claim" if a.device == "cpu" else "")
            )
    print("PASS" if ok else "FAIL: a float8 trial failed, or its loss did not stay finite and fall")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
