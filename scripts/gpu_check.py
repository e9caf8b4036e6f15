"""Verify the GPU path in minutes: gpt2 and gpt2-xl, bf16, eager and torch.compile.

    python scripts/gpu_check.py                          # 4 trials on the first CUDA device
    python scripts/gpu_check.py --xl-micro-batch 8       # more memory, usually faster
    python scripts/gpu_check.py --models gpt2 --compile default

Each configuration runs as its own `python -m train.trial` process (a fresh CUDA context and
compile cache, the way the sweep runs trials), and the table is read from the trial JSON: tokens/s,
step-time p50, MFU against the spec-sheet peak and against the measured matmul ceiling, peak
memory, the attention kernel that ran, compile time. A failed trial (out of memory, a crash, a
timeout) is a row of the table, not a crash of this script. Without CUDA it says so and exits 0.
Exit code: 0 when every trial completed (or CUDA is absent), 1 when any failed.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# allow `python scripts/gpu_check.py` from the repo root without installing the package
sys.path.insert(0, str(REPO))

from table import format_table  # noqa: E402  (a sibling in scripts/, on sys.path when this runs)

from train.core.result import read_result  # noqa: E402  (torch-free)

log = logging.getLogger("gpu_check")

# Sequences per micro-batch by preset, safe on an 80 GB GPU in bf16 without activation
# checkpointing (estimates, not measurements): gpt2 (124M) fits 12 x 1024 on a 40 GB A100 in
# nanoGPT's config, so 16 has room on 80 GB. gpt2-xl (1.56B) holds ~25 GB of fp32 weights, grads
# and AdamW state; activations are ~34 x seq x n_embd bytes per layer and sequence (Korthikanti et
# al. 2022, with fused attention) = ~2.7 GB per 1024-token sequence over 48 layers, so 4 -> ~40 GB
# in all and 8 -> ~55 GB.
DEFAULT_MICRO_BATCH = {"gpt2": 16, "gpt2-xl": 4}
OTHER_MICRO_BATCH = 8  # any other preset (e.g. tiny for a CPU smoke run)


@dataclass(kw_only=True, frozen=True)
class Check:
    """One trial to run."""

    # Model preset (conf/model/<model>.yaml).
    model: str
    # runtime.compile mode, "none" for eager.
    compile: str
    # Sequences per forward/backward.
    micro_batch: int
    # Forward/backward passes per optimizer step.
    grad_accum: int
    # Sequence length of the preset.
    block_size: int

    @property
    def name(self) -> str:
        return f"{self.model}-{self.compile}"

    @property
    def tokens_per_step(self) -> int:
        return self.micro_batch * self.grad_accum * self.block_size


def cuda_available() -> tuple[bool, str]:
    """(is CUDA usable, a line saying what torch sees)."""
    import torch

    if not torch.cuda.is_available():
        return False, f"torch {torch.__version__} (CUDA build: {torch.version.cuda}) sees no GPU"
    return True, f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}"


def block_size_of(model: str) -> int:
    """The preset's block_size, read from its YAML (no torch or Hydra needed)."""
    from omegaconf import OmegaConf

    path = REPO / "conf" / "model" / f"{model}.yaml"
    if not path.is_file():
        raise SystemExit(f"unknown model preset {model!r}: no {path}")
    return int(OmegaConf.load(path).block_size)


def trial_command(check: Check, args: argparse.Namespace, out: Path, work: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "train.trial",
        f"model={check.model}",
        f"runtime.device={args.device}",
        f"runtime.dtype={args.dtype}",
        f"runtime.compile={check.compile}",
        f"runtime.activation_checkpointing={args.activation_checkpointing}",
        f"batch.tokens_per_step={check.tokens_per_step}",
        f"batch.micro_batch={check.micro_batch}",
        f"batch.grad_accum={check.grad_accum}",
        f"data.dir={args.data_dir}",
        f"checkpoint.dir={work}/ckpt",
        f"trial.warmup_steps={args.warmup_steps}",
        f"trial.max_steps={args.steps}",
        f"trial.min_steps={min(5, args.steps)}",
        f"trial.max_seconds={args.max_seconds}",
        f"trial.out={out}",
        f"hydra.run.dir={work}/hydra/{check.name}",
    ]


def run_check(check: Check, args: argparse.Namespace, work: Path) -> dict:
    """Run one trial process; return its result JSON, or a failed-result stand-in."""
    out = work / f"{check.name}.json"
    log_path = work / f"{check.name}.log"
    cmd = trial_command(check, args, out, work)
    log.info(
        "%s: %s tokens/step (micro %d x accum %d x block %d), log %s",
        check.name,
        f"{check.tokens_per_step:,}",
        check.micro_batch,
        check.grad_accum,
        check.block_size,
        log_path,
    )
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    started = time.perf_counter()
    try:
        with log_path.open("w") as sink:
            proc = subprocess.run(
                cmd,
                cwd=REPO,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                timeout=args.timeout,
                check=False,
            )
        code: int | str = proc.returncode
    except subprocess.TimeoutExpired:
        code = f"timeout after {args.timeout:.0f} s"
    wall = time.perf_counter() - started
    result = read_result(out)
    if result is None:  # killed before it could write (OS kill, timeout, segfault)
        tail = log_path.read_text().strip().splitlines()[-3:] if log_path.is_file() else []
        result = {
            "status": "failed",
            "failure": {"kind": "no_result", "message": f"exit {code}; " + " / ".join(tail)},
        }
    log.info("%s: %s in %.0f s (exit %s)", check.name, result["status"], wall, code)
    return result


def _num(x: float | None, fmt: str, scale: float = 1.0) -> str:
    return "n/a" if x is None else format(x * scale, fmt)


def result_row(check: Check, r: dict) -> list[str]:
    if r["status"] == "failed":
        f = r["failure"] or {}
        message = str(f.get("message", "")).splitlines()[0][:60] if f.get("message") else ""
        return [check.model, check.compile, f"FAILED ({f.get('kind')})", message, *[""] * 7]
    st, mfu = r["step_time_s"], r["mfu"]
    return [
        check.model,
        check.compile,
        r["status"],
        _num(r["tokens_per_s"], ",.0f"),
        _num(st["p50"], ".1f", 1e3),
        _num(mfu["spec"], ".1%"),
        _num(mfu["ceiling"], ".1%"),
        _num(r["peak_memory_gib"], ".2f"),
        str(r["attention_backend"]),
        _num(r["compile_s"], ".1f"),
        f"{check.tokens_per_step:,}",
    ]


HEADERS = [
    "model",
    "compile",
    "status",
    "tokens/s",
    "step p50 ms",
    "MFU spec",
    "MFU ceiling",
    "peak GiB",
    "attention",
    "compile s",
    "tokens/step",
]


def _flops(x: float) -> str:
    return f"{x / 1e12:.1f} TFLOP/s" if x >= 1e12 else f"{x / 1e9:.1f} GFLOP/s"


def device_lines(results: list[dict]) -> list[str]:
    """Where the numbers came from: the device, its spec peak and its measured ceiling."""
    for r in results:
        d = r.get("device")
        if r["status"] != "failed" and d:
            peak = "no spec peak known (MFU spec n/a)"
            if d["peak_flops"] is not None:
                peak = f"spec peak {_flops(d['peak_flops'])} ({d['peak_source']})"
            return [
                f"device: {d['name']} ({d['type']}, {d['dtype']}); {peak}",
                f"matmul ceiling: {_flops(d['ceiling_flops'])} ({d['ceiling_source']})",
            ]
    return []


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt2,gpt2-xl", help="comma-separated model presets")
    p.add_argument("--compile", default="none,default", help="comma-separated compile modes")
    p.add_argument("--dtype", default="bf16", help="runtime.dtype")
    p.add_argument("--device", default="cuda", help="runtime.device (cpu only for a smoke test)")
    p.add_argument(
        "--micro-batch",
        type=int,
        default=DEFAULT_MICRO_BATCH["gpt2"],
        help="gpt2 micro-batch (sequences of 1024)",
    )
    p.add_argument(
        "--xl-micro-batch",
        type=int,
        default=DEFAULT_MICRO_BATCH["gpt2-xl"],
        help="gpt2-xl micro-batch (est. ~40 GB at 4, ~55 GB at 8)",
    )
    p.add_argument("--grad-accum", type=int, default=4, help="micro-batches per optimizer step")
    p.add_argument("--activation-checkpointing", default="none", help="none | every | every_<k>")
    p.add_argument("--warmup-steps", type=int, default=3, help="untimed steps (compile is here)")
    p.add_argument("--steps", type=int, default=20, help="measured steps at most")
    p.add_argument("--max-seconds", type=float, default=60.0, help="measured window budget")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds before a trial is killed")
    p.add_argument("--data-dir", default=str(REPO / "data" / "synthetic"), help="token folder")
    p.add_argument("--out-dir", help="keep trial JSON and logs here (default: a temp folder)")
    return p.parse_args(argv)


def micro_batch_for(model: str, args: argparse.Namespace) -> int:
    if model == "gpt2":
        return args.micro_batch
    if model == "gpt2-xl":
        return args.xl_micro_batch
    return OTHER_MICRO_BATCH


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.device.startswith("cuda"):
        ok, seen = cuda_available()
        if not ok:
            print(f"CUDA is not available ({seen}): skipping the GPU check.")
            return 0
        log.info("%s", seen)
    checks = [
        Check(
            model=m,
            compile=c,
            micro_batch=micro_batch_for(m, args),
            grad_accum=args.grad_accum,
            block_size=block_size_of(m),
        )
        for m in args.models.split(",")
        for c in args.compile.split(",")
    ]
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(args.out_dir).resolve() if args.out_dir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        results = [run_check(c, args, work) for c in checks]
    print("\n".join([*device_lines(results), ""]))
    print(format_table(HEADERS, [result_row(c, r) for c, r in zip(checks, results, strict=True)]))
    failed = [c.name for c, r in zip(checks, results, strict=True) if r["status"] == "failed"]
    if failed:
        print(f"\n{len(failed)} of {len(checks)} trials failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
