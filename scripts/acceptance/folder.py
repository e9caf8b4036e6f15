"""A lease's evidence folder, laid out in the second command's output folder as the repository keeps
it: docs/gpu/<date>-<device>/ with every raw file the run wrote, so each figure the README quotes
has a file behind it.

    README.md        what ran and the README table (acceptance/readme_table.py)
    evidence.json    the run's evidence file (every number below is read from it)
    env.txt          device, driver and package versions, as the trials' fingerprints hold them
    best.yaml        the exported config
    result-<N>.json  each trial process's result: sweep/<N>/result.json (search, guard, race)
    sweep.log        the sweep's own log; production.log the production run's

Copy `<out>/docs` into the repository root to keep it.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from acceptance.readme_table import readme_section

if TYPE_CHECKING:
    from acceptance.stages import StageContext


def device_slug(name: str) -> str:
    """'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3' -> 'h100-80gb-hbm3', 'cpu' -> 'cpu'."""
    words = re.sub(r"[^a-z0-9]+", "-", name.lower().removeprefix("nvidia ")).strip("-")
    return words or "device"


def folder_name(evidence: dict, *, now: datetime | None = None) -> str:
    """<date>-<device>, the date of the run's first stage (UTC)."""
    stages = evidence.get("stages") or []
    when = stages[0]["started"][:10] if stages else (now or datetime.now(UTC)).date().isoformat()
    return f"{when}-{device_slug((evidence.get('device') or {}).get('name') or 'device')}"


def env_text(evidence: dict) -> str:
    """The device and software lines of env.txt."""
    d = evidence.get("device") or {}
    lines = [
        f"{k}: {d[k]}"
        for k in (
            "name",
            "type",
            "count",
            "memory_gib",
            "driver",
            "torch",
            "cuda",
            "cudnn",
            "python",
            "cpu",
            "git_commit",
        )
        if d.get(k) is not None
    ]
    lines += [f"package {k}: {v}" for k, v in sorted((d.get("packages") or {}).items()) if v]
    return "\n".join(lines) + "\n"


def write_evidence_folder(ctx: StageContext) -> Path:
    """Lay out docs/gpu/<date>-<device>/ under the stage's output folder; returns it."""
    folder = ctx.logs / "docs" / "gpu" / folder_name(ctx.evidence)
    folder.mkdir(parents=True, exist_ok=True)
    sweep = ctx.sweep_dir
    for result in sorted(sweep.glob("*/result.json"), key=lambda r: r.parent.name):
        if not result.parent.name.isdigit():  # trial-N: a link to its job folder, kept once
            continue
        shutil.copyfile(result, folder / f"result-{result.parent.name}.json")
    for src, name in (
        (sweep / "best.yaml", "best.yaml"),
        (sweep / "sweep.log", "sweep.log"),
        (ctx.logs / "production.log", "production.log"),
    ):
        if src.is_file():
            shutil.copyfile(src, folder / name)
    (folder / "env.txt").write_text(env_text(ctx.evidence))
    (folder / "evidence.json").write_text(json.dumps(ctx.evidence, indent=2, default=str) + "\n")
    title = folder.name.split("-", 3)
    header = (
        f"# GPU evidence: {ctx.evidence.get('model')} on one "
        f"{(ctx.evidence.get('device') or {}).get('name', 'device')}, "
        f"{'-'.join(title[:3])}\n\n"
        "Written by `python3 scripts/gpu_acceptance.py --lease` (the main command) and "
        "`--lease --stage production` (the second); every figure below is read from "
        "evidence.json, which is read from the raw files beside it.\n\n"
    )
    (folder / "README.md").write_text(header + readme_section(ctx.evidence))
    return folder
