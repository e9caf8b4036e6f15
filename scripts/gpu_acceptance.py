"""GPU evidence in one command per stage: gpt2-xl planned, swept to a verified best.yaml and
trained from it on one H100/H200, each stage under ten minutes, state handed through one file.

    python3 scripts/gpu_acceptance.py --stage 1 --out $OUT                       # plan
    python3 scripts/gpu_acceptance.py --stage 2 --state state.tar.gz --out $OUT  # sweep
    python3 scripts/gpu_acceptance.py --stage 3 --state state.tar.gz --out $OUT  # sweep, resumed
    python3 scripts/gpu_acceptance.py --stage 4 --state state.tar.gz --out $OUT  # production
    python3 scripts/gpu_acceptance.py --stage 5 --state state.tar.gz --out $OUT  # ddp (>= 2 GPUs)
    python3 scripts/gpu_acceptance.py --table docs/gpu-acceptance-h100.json      # README table
    python3 scripts/gpu_acceptance.py --kit-size                                 # what travels
    python3 scripts/gpu_acceptance.py --dry-run --stage plan --out /tmp/out      # tiny, on a CPU

One 15-minute lease instead (the main command at most 9 minutes, the second at most 3):

    python3 scripts/gpu_acceptance.py --lease --plan --device "NVIDIA H200"      # fits? any machine
    python3 scripts/gpu_acceptance.py --lease --out $OUT                         # main: best.yaml
    python3 scripts/gpu_acceptance.py --lease --stage production \
        --state $OUT/state.tar.gz --out $OUT2   # second: trains from it, docs/gpu/<date>-<dev>/

Each stage writes state.tar.gz, evidence.json and its logs to --out. Exit code: 0 when the next
stage can go on (done, cut by its deadline, stopped before a race round that could not fit,
skipped: `ddp` on a host with one GPU), 1 when the stage failed (its state is packed all the
same: run it again), 2 for a usage error. The logic lives in scripts/acceptance/.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# `python scripts/gpu_acceptance.py` from the repo root, without installing the package
sys.path.insert(0, str(REPO))

from acceptance import (  # noqa: E402  (scripts/ is on sys.path: a sibling package)
    NUMBERED,
    kit_size,
    profile_named,
    readme_section,
    run_stage,
    stage_named,
)
from acceptance.evidence import load_evidence  # noqa: E402
from acceptance.lease import lease_plan  # noqa: E402
from acceptance.run import GOES_ON  # noqa: E402

log = logging.getLogger("gpu_acceptance")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--stage", help=f"plan | sweep | production | ddp | lease, or 1-{len(NUMBERED)}"
    )
    what.add_argument(
        "--table",
        type=Path,
        metavar="EVIDENCE",
        help="print the README's GPU section (markdown) from an evidence file",
    )
    what.add_argument(
        "--kit-size",
        action="store_true",
        help="print the size of the tracked code + .whl/ (+ --state) against 64 MiB",
    )
    p.add_argument("--state", type=Path, help="state.tar.gz written by the previous stage")
    p.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("OUT", "acceptance-out")),
        help="folder for state.tar.gz, evidence.json and logs (default: $OUT)",
    )
    p.add_argument(
        "--work",
        type=Path,
        default=None,
        help="work folder of a new run (default /tmp/gpu-acceptance-<profile>); a "
        "state unpacks to the folder it was packed from",
    )
    p.add_argument("--profile", default="xl", help="xl (gpt2-xl on a GPU) | tiny")
    p.add_argument("--dry-run", action="store_true", help="--profile tiny: the stages on a CPU")
    p.add_argument(
        "--sweep-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra override of every sweep stage (given at the first stage, kept after)",
    )
    p.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="this stage's time budget in seconds (default: the profile's)",
    )
    p.add_argument(
        "--lease",
        action="store_true",
        help="one 15-minute GPU lease: the main command (9 min) alone, then "
        "--stage production (3 min); with --dry-run the tiny model on a CPU",
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="with --lease: print whether the lease fits --device, run nothing",
    )
    p.add_argument(
        "--device",
        default="NVIDIA H200",
        help="with --lease --plan: the GPU to plan for (a plan_device name)",
    )
    args = p.parse_args(argv)
    if not (args.stage or args.table or args.kit_size or args.lease):
        p.error("one of --stage, --table, --kit-size or --lease is required")
    if args.plan and not args.lease:
        p.error("--plan goes with --lease")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        if args.table:
            print(readme_section(load_evidence(args.table)), end="")
            return 0
        if args.kit_size:
            extra = (args.state,) if args.state else ()
            print("\n".join(kit_size(REPO, kit_dir=REPO / ".whl", extra=extra).lines()))
            return 0
        if args.lease and args.plan:
            print("\n".join(lease_plan(args.device).lines()))
            return 0
        if args.lease:
            profile = profile_named("lease-tiny" if args.dry_run else "lease")
        else:
            profile = profile_named("tiny" if args.dry_run else args.profile)
        stage = stage_named(args.stage or "lease")
        if stage not in profile.stages and stage != "ddp":
            raise ValueError(
                f"--stage {stage} is not a stage of the {profile.name} profile "
                f"({', '.join(profile.stages)})"
            )
        work = args.work or Path(f"/tmp/gpu-acceptance-{profile.name}")
        report = run_stage(
            stage,
            profile=profile,
            state=args.state,
            work=work,
            out=args.out.resolve(),
            deadline_s=args.deadline_s,
            sweep_overrides=args.sweep_override,
        )
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    print(
        f"stage {report.stage} (run {report.run}): {report.outcome} in {report.wall_s:.0f} s "
        f"of {report.deadline_s:.0f} s{': ' + report.note if report.note else ''}"
    )
    print(f"state {report.state} ({report.state_bytes / 1024:.0f} KiB), evidence {report.evidence}")
    return 0 if report.outcome in GOES_ON else 1


if __name__ == "__main__":
    raise SystemExit(main())
