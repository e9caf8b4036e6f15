"""python -m train.export --to nanogpt|llmc <best.yaml>: hand a sweep's winner to nanoGPT or llm.c.

Writes best_nanogpt.py (a nanoGPT configurator file) or best_llmc.sh (the train_gpt2cu command)
beside best.yaml, or into --out; prints the file's path and what the target cannot express, with
what the sweep measured it to be worth (from the study best.yaml's provenance names, when it can
be read). A winner the target cannot train with the same science is refused in one line naming the
key and the best measured config it can express (exit 2, nothing written). The sweep writes both
files itself (sweeper/report/handoff.py); this is for an existing best.yaml. Torch-free.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from train.core.config_file import read_pinned_config
from train.core.evidence import SearchRun
from train.core.handoff.files import TARGETS, handoff
from train.core.handoff.gaps import measured_trials
from train.core.handoff.nanogpt import read_data_folder

log = logging.getLogger(__name__)


def study_evidence(doc: dict[str, Any]) -> tuple[list[SearchRun] | None, str]:
    """The study's measured trials, or None and why they could not be read."""
    from train.core.pruning import sweep_study

    try:
        trials, _ = sweep_study(doc)
    except ValueError as exc:
        return None, str(exc)
    return measured_trials(trials), ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m train.export", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--to", required=True, choices=sorted(TARGETS), help="the target trainer")
    parser.add_argument("best", type=Path, help="a sweep's best.yaml")
    parser.add_argument("--out", type=Path, default=None, help="folder (default: best.yaml's)")
    args = parser.parse_args(argv)
    logging.basicConfig(format="[%(levelname)s] %(message)s")
    try:
        doc = read_pinned_config(args.best)
        trials, why = study_evidence(doc)
        folder = read_data_folder(doc["data"]["dir"])
        made = handoff(doc, args.to, trials=trials, reachable=why, folder=folder)
    except (ValueError, KeyError) as exc:
        log.error("%s", exc if not isinstance(exc, KeyError) else f"{args.best} lacks {exc}")
        return 2
    if made.refused is not None:
        log.error("%s", "; ".join(made.lines))
        return 2
    path = (args.out or args.best.parent) / made.file_name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(made.text)
    if args.to == "llmc":
        path.chmod(0o755)
    print(f"wrote {path}")
    for line in made.lines or ["nothing it cannot express"]:
        print(f"  cannot express: {line}" if made.lines else f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
