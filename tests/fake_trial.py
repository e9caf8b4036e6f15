"""A stand-in for `python -m train.trial` that misbehaves on request (no torch; for test_runner.py).

Usage: fake_trial.py [--pinned FILE] key=value ...
Keys: trial.out, trial.progress_file (as train.trial.measurement takes them, Hydra-quoted values
allowed), fake.mode (or env FAKE_TRIAL_MODE), fake.steps (progress intervals written, default 3).
Modes: ok, pruned, oom_json, nan, invalid_config, crash, hang, busy, ignore_term,
hang_after_result, sigkill, exit0_nojson, slow_setup (2.4 s of heartbeat lines only, then ok).
Hanging modes write their pid to <out dir>/trial.pid
and hang/ignore_term also start a sleeping grandchild whose pid goes to <out dir>/grandchild.pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def parse_value(raw: str) -> str:
    """Hydra-quoted values are read back exactly as train.trial.measurement would read them."""
    if raw[:1] not in ("'", '"'):
        return raw
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    value = OverridesParser.create().parse_override(f"x={raw}").value()
    return OmegaConf.create({"x": value}).x


def parse_args(argv: list[str]) -> dict[str, str]:
    args: dict[str, str] = {}
    it = iter(argv)
    for arg in it:
        if arg in ("--config-path", "--config-name", "--pinned"):
            next(it)
            continue
        key, _, raw = arg.partition("=")
        args[key] = parse_value(raw)
    return args


def write_json(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)  # atomic, like train/core/result.py


def progress(path: Path, **event) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(event) + "\n")


def result(status: str, kind: str | None = None, message: str | None = None) -> dict:
    failure = {"kind": kind, "message": message} if kind else None
    return {"schema_version": 1, "status": status, "failure": failure, "tokens_per_s": 1234.5}


def sleep_forever() -> None:
    while True:
        time.sleep(60)


def main() -> int:
    args = parse_args(sys.argv[1:])
    mode = args.get("fake.mode") or os.environ.get("FAKE_TRIAL_MODE", "ok")
    out = Path(args["trial.out"])
    prog = Path(args["trial.progress_file"])
    steps = int(args.get("fake.steps", "3"))
    print(f"fake trial starting: mode={mode}")

    if mode in ("hang", "busy", "ignore_term", "hang_after_result"):
        (out.parent / "trial.pid").write_text(str(os.getpid()))
    if mode == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode in ("hang", "ignore_term"):
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        (out.parent / "grandchild.pid").write_text(str(grandchild.pid))

    if mode == "slow_setup":  # a long set-up or compile that sends only heartbeat lines
        for _ in range(12):
            time.sleep(0.2)
            progress(prog, event="heartbeat", phase="setup", elapsed_s=0.2)
        mode = "ok"
    progress(prog, event="warmup_done", warmup_s=0.01)
    if mode in ("hang", "ignore_term"):
        sleep_forever()
    if mode == "busy":
        step = 0
        while True:
            step += 1
            progress(prog, event="interval", step=step, tokens_per_s=100.0)
            time.sleep(0.1)
    for step in range(1, steps + 1):
        progress(prog, event="interval", step=step, tokens_per_s=100.0 * step)

    if mode in ("ok", "hang_after_result"):
        write_json(out, result("complete"))
        if mode == "hang_after_result":
            sleep_forever()
        return 0
    if mode == "pruned":
        write_json(out, result("pruned"))
        return 0
    if mode == "oom_json":
        write_json(out, result("failed", "oom", "OutOfMemoryError: CUDA out of memory"))
        return 3
    if mode == "nan":
        write_json(out, result("failed", "nan", "FloatingPointError: loss is nan at step 7"))
        return 3
    if mode == "invalid_config":
        write_json(out, result("failed", "invalid_config", "batch.micro_batch must be >= 1"))
        return 2
    if mode == "crash":
        raise RuntimeError("boom: simulated crash")
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "exit0_nojson":
        return 0
    raise SystemExit(f"unknown fake.mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main())
