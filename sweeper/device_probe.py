"""What the machine offers, asked of a child process, so that the sweeper never imports torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]


def probe_device(timeout_s: float = 180.0) -> dict:
    """The device facts `python -m train.proc.probe` prints (its last line, JSON)."""
    out = subprocess.run(
        [sys.executable, "-m", "train.proc.probe"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=PROJECT_DIR,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"device probe failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def git_commit() -> str:
    """The checkout's commit, for the sweep's provenance; empty outside a git checkout."""
    out = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=PROJECT_DIR, capture_output=True, text=True, check=False
    )
    return out.stdout.strip() if out.returncode == 0 else ""
