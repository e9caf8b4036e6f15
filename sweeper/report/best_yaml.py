"""best.yaml: the winning trainer config, pinned, with the evidence for it.

The document is a Hydra primary config: `defaults: [train_schema, _self_]` types it with the trainer
schema (train/core/config.py), the trainer sections follow as resolved values, and `provenance`
(which the trainer carries and ignores) records the measured metrics, the machine fingerprint, the
command and the sweep it came from.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import logging
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeper.masking import mask_secrets
from train.core.config_file import DEFAULTS

if TYPE_CHECKING:
    from sweeper.verify.stage import Winner
    from train.core.handoff.interval import CheckpointPlan

log = logging.getLogger(__name__)

# The trainer's sections in schema order (train/core/config.py: Config).
TRAINER_SECTIONS = (
    "model",
    "data",
    "batch",
    "optim",
    "checkpoint",
    "runtime",
    "ddp",
    "trial",
    "train",
)
# Top-level keys of a composed config that are not trainer settings and are dropped on export
# (hooks: a test's planted faults, train/core/hooks.py, never part of a config to train).
_DROPPED_KEYS = ("defaults", "hydra", "provenance", "pinned_sections", "hooks")
# What a best.yaml says it pins, written above the sections so that a file cut short still says
# what it lacks (train/core/config_file.py refuses it); provenance, written last, marks the end.
PINNED_SECTIONS = (*TRAINER_SECTIONS, "provenance")
# trial.* keys that only make sense inside a sweep, reset to the TrialConfig defaults
# (train/core/config.py; duplicated here because sweeper/ must not import train/, which imports
# torch).
SWEEP_ONLY_TRIAL_DEFAULTS: dict[str, Any] = {
    "study_storage": "",
    "study_name": "",
    "trial_id": -1,
    "progress_file": "",
    "out": "trial.json",
    "compile_record": "",
    "save_record": "",
}


def best_config_document(
    *,
    trainer_config: Mapping[str, Any],
    metrics: Mapping[str, Any],
    fingerprint: Mapping[str, Any],
    command: str,
    sweep: Mapping[str, Any],
    base_dir: Path | None = None,
    checkpoint_dir: str | None = None,
) -> dict[str, Any]:
    """A plain dict ready for YAML: defaults, pinned_sections, the trainer sections, provenance.

    `trainer_config` is the resolved trainer config (e.g. a trial result's "config"); its
    `defaults`, `hydra`, `pinned_sections`, `provenance` and `hooks` keys are dropped, any other
    unknown key is refused.
    data.dir is made absolute (relative paths against `base_dir`, default the current dir, the
    same rule the trainer uses) so the file trains the same data from any folder. `sweep` holds
    {study, storage, trials, when}; a password in the storage URL is masked and a missing `when`
    is set to now (UTC, ISO 8601). `checkpoint_dir`, when given, replaces checkpoint.dir (the
    run's own folder, `own_checkpoint_dir`).
    """
    missing = [s for s in TRAINER_SECTIONS if s not in trainer_config]
    if missing:
        raise ValueError(
            f"trainer_config lacks section(s) {missing}; pass the full resolved trainer config "
            f"(a trial result's 'config') so best.yaml pins every value"
        )
    unknown = sorted(set(trainer_config) - set(TRAINER_SECTIONS) - set(_DROPPED_KEYS))
    if unknown:
        raise ValueError(
            f"trainer_config has key(s) {unknown} that are not trainer sections "
            f"{list(TRAINER_SECTIONS)}; the trainer schema would reject them"
        )
    doc: dict[str, Any] = {"defaults": list(DEFAULTS), "pinned_sections": list(PINNED_SECTIONS)}
    for section in TRAINER_SECTIONS:
        doc[section] = _plain(trainer_config[section])

    data = doc["data"]
    if "dir" in data:
        data_dir = Path(str(data["dir"])).expanduser()
        if not data_dir.is_absolute():
            data_dir = (base_dir or Path.cwd()) / data_dir
        data["dir"] = str(data_dir.resolve())
    if checkpoint_dir is not None:
        doc["checkpoint"]["dir"] = checkpoint_dir
    # written out even where the trial's file lacks them (a trial now gets its study on the
    # command line): best.yaml says plainly that it attaches to no study
    doc["trial"].update(SWEEP_ONLY_TRIAL_DEFAULTS)
    # runtime.compile_cache: the sweep's cache folder, which the production run compiles from
    # (train/core/compile_cache.py); a sweep that ran with it off leaves torch's default
    if doc["runtime"].get("compile_cache") == "off":
        doc["runtime"]["compile_cache"] = ""

    sweep_doc = _plain(sweep)
    if "storage" in sweep_doc:
        sweep_doc["storage"] = mask_secrets(str(sweep_doc["storage"]))
    sweep_doc.setdefault("when", dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    doc["provenance"] = {
        "metrics": _plain(metrics),
        "fingerprint": _plain(fingerprint),
        "command": command,
        "sweep": sweep_doc,
    }
    return doc


def precision_record(results: list[dict], row: Mapping[str, Any]) -> dict[str, Any]:
    """best.yaml's provenance.precision: the dtype its runs computed in, the float8 matmuls that
    ran (None: none), and what the exported MFU is measured against (a float8 winner's is
    bf16-equivalent: its model FLOPs against the bf16 dense peak)."""
    last = results[-1] if results else {}
    return {
        "dtype": (last.get("device") or {}).get("dtype"),
        "float8": _plain(row.get("float8")),
        "mfu_basis": (last.get("mfu") or {}).get("basis"),
    }


def own_checkpoint_dir(measured_dir: str, *, study: str, trial: int, base_dir: Path) -> str:
    """The winner's own checkpoint folder: `<measured dir>/<study>/trial-<n>`, absolute.

    The trial measured its saves on `measured_dir` (a searched disk, or the shared default
    `checkpoints`), so production keeps that disk; the sub-folder is this study's winner's alone,
    so training another sweep's best.yaml never resumes this one's weights (and the trainer
    refuses a checkpoint of another identity anyway, train/run/identity.py).
    """
    root = Path(measured_dir).expanduser()
    if not root.is_absolute():
        root = base_dir / root
    safe_study = re.sub(r"[^\w.-]+", "_", study) or "study"
    return str((root / safe_study / f"trial-{trial}").resolve())


def best_header(*, best_path: Path, median_tokens_per_s: float, cv: float | None, n: int) -> str:
    """The comment block of best.yaml: how to train with it and what it measured."""
    spread = f" ± {100 * cv:.1f}% (CV over {n} runs)" if cv is not None and n >= 2 else f" (n={n})"
    return (
        "Winning trainer config of a throughput sweep (values pinned; see provenance).\n"
        f"Train with it:  {train_command(best_path)}\n"
        f"Measured: {median_tokens_per_s:,.0f} tokens/s median{spread}"
    )


def write_best_yaml(path: Path, doc: Mapping[str, Any], *, header: str) -> Path:
    """Write `doc` as YAML (via OmegaConf) under a `# ` comment header, atomically; return path."""
    from omegaconf import OmegaConf  # light, but only needed here

    body = OmegaConf.to_yaml(OmegaConf.create(_escape_interpolations(_plain(doc))))
    comment = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(comment + body)
    os.replace(tmp, path)  # a reader never sees half a file
    log.info("wrote %s", path)
    return path


def train_command(best_path: Path) -> str:
    """The production command for an exported file (absolute config dir, name = file stem)."""
    best_path = Path(best_path).expanduser().resolve()
    return (
        f"python -m train --config-path {shlex.quote(str(best_path.parent))} "
        f"--config-name {shlex.quote(best_path.stem)}"
    )


def pin_measured_threads(pinned: dict, results: list[dict]) -> dict[str, Any]:
    """Set runtime.threads in `pinned` (in place) to the torch threads the winner's verification
    runs measured with (their fingerprint's torch_threads), and say so: a launcher's cap (joblib
    gives each worker cpus // n_jobs threads through OMP_NUM_THREADS) or torch's default (0)
    becomes the number the verified tokens/s was measured at, so training from best.yaml runs
    as the race did. Unchanged, and said, where no run recorded its threads."""
    rt = pinned["runtime"]
    seen = sorted(
        {
            int(r["fingerprint"]["torch_threads"])
            for r in results
            if r and (r.get("fingerprint") or {}).get("torch_threads")
        }
    )
    requested = int(rt.get("threads") or 0)
    if len(seen) != 1:
        return {
            "threads": requested,
            "source": "the trial's setting (the race recorded "
            + ("no thread count)" if not seen else f"several: {seen})"),
        }
    if seen[0] != requested:
        log.info(
            "best.yaml pins runtime.threads=%d: the torch threads the race measured with "
            "(the trial asked for %d)",
            seen[0],
            requested,
        )
    rt["threads"] = seen[0]
    # the race set runtime.threads itself where a launcher capped its jobs (launch/threads.py)
    uncapped = requested == 0 and all(
        int(((r.get("config") or {}).get("runtime") or {}).get("threads") or 0) == seen[0]
        for r in results
        if r
    )
    return {
        "threads": seen[0],
        "requested": requested,
        "uncapped": uncapped,
        "source": (
            "the race, uncapped: one config at a time at the production run's torch threads "
            "(torch's default in a fresh process, set for the race instead of the launcher's cap)"
            if uncapped
            else "the race: one config at a time, as its runs recorded (torch_threads)"
        ),
    }


def winner_runs(winner: Winner, race: Mapping[str, Any] | None, *, sweep_dir: Path) -> list[str]:
    """The job folders of the winner's search run and verification runs, relative to `sweep_dir`
    where they lie inside it (absolute otherwise), in the order they ran."""
    dirs = [winner.trial.user_attrs.get("job_dir")]
    for stored in (race or {}).get("rounds", []):
        dirs.append((stored.get(str(winner.number)) or {}).get("job_dir"))
    root = Path(sweep_dir).resolve()
    runs = []
    for d in dirs:
        if d:
            p = Path(d).resolve()
            runs.append(str(p.relative_to(root)) if p.is_relative_to(root) else str(p))
    return runs


def _plain(value: Any) -> Any:
    """A deep copy made of dict/list/str/int/float/bool/None only, which YAML round-trips."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return copy.copy(value)
    return str(value)  # Path, enum, datetime: their text is what a reader needs


def _escape_interpolations(value: Any) -> Any:
    """Resolved values are literal: escape `${` so Hydra never tries to interpolate them."""
    if isinstance(value, dict):
        return {k: _escape_interpolations(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escape_interpolations(v) for v in value]
    if isinstance(value, str):
        return value.replace("${", "\\${")
    return value


def _pin_production_interval(
    pinned: dict, *, planned: int, checkpoint: CheckpointPlan | None
) -> None:
    """The trial saved every few steps to see a save in its window; production saves at the
    interval chosen from the measured stall (`checkpoint`), else at the planned one."""
    measured = pinned["checkpoint"]["every_steps"]
    if checkpoint is not None:
        log.info(
            "best.yaml saves every %d steps (%s; the trial saved every %d)",
            checkpoint.every_steps,
            checkpoint.rule,
            measured,
        )
        pinned["checkpoint"]["every_steps"] = checkpoint.every_steps
    elif planned > 0 and measured != planned:
        log.info(
            "best.yaml saves every %d steps (hydra.sweeper.cost.planned_checkpoint_every; "
            "the trial saved every %d)",
            planned,
            measured,
        )
        pinned["checkpoint"]["every_steps"] = planned


def _race_record(winner: Winner) -> dict[str, Any]:
    """How the verification race ended, and the paired lead over the starting config."""
    lead = winner.lead_over_start
    return {
        "outcome": winner.outcome,
        "rounds": winner.rounds,
        "lead_over_start": None if lead is None else _plain(dataclasses.asdict(lead)),
    }


def export_winner(
    winner: Winner,
    rows: list[dict],
    *,
    sweep_dir: Path,
    study_name: str,
    storage: str,
    planned_checkpoint_every: int,
    cost: Mapping[str, Any] | None = None,
    compared: Mapping[str, Any] | None = None,
    checkpoint: CheckpointPlan | None = None,
    race: Mapping[str, Any] | None = None,
) -> Path:
    """Write the verified winner's pinned trainer config to <sweep_dir>/best.yaml; its path.
    `cost` (sweeper/report/time_to_train.py sweep_costs) becomes provenance.cost when given;
    `compared` ({trials, workers, raced}: the study's completed trials, how many workers ran them,
    and the contenders verified) becomes provenance.sweep.compared. `checkpoint` (the production
    interval from the winner's measured save stall, sweeper/report/handoff.py) replaces the trial's
    checkpoint.every_steps and becomes provenance.checkpoint. `race` (the study's race record,
    train/core/evidence.py RACE_ATTR) names the winner's verification runs: with its
    search run they become provenance.sweep.runs, the job folders `python -m train.explain
    --result` explains. runtime.threads is pinned as the race ran it (provenance.measured_as)."""
    from omegaconf import OmegaConf  # light, but only needed here

    from sweeper.report.verdict_text import winner_text  # the race's modules import scipy

    job_dir = Path(winner.trial.user_attrs["job_dir"])
    pinned = OmegaConf.to_container(OmegaConf.load(job_dir / "trial_config.yaml"))
    pinned.pop("defaults", None)
    _pin_production_interval(pinned, planned=planned_checkpoint_every, checkpoint=checkpoint)
    measured_as = pin_measured_threads(pinned, winner.results)
    row = next(r for r in rows if r["trial"] == winner.number)
    path = sweep_dir / "best.yaml"
    ckpt_dir = own_checkpoint_dir(
        str(pinned["checkpoint"]["dir"]), study=study_name, trial=winner.number, base_dir=Path.cwd()
    )
    doc = best_config_document(
        trainer_config=pinned,
        checkpoint_dir=ckpt_dir,
        metrics={k: v for k, v in row.items() if k not in ("params", "float8")},
        fingerprint=winner.results[-1].get("fingerprint", {}),
        command=train_command(path),
        sweep={
            "study": study_name,
            "storage": mask_secrets(storage),
            "trial": winner.number,
            # the job folders (relative to the sweep dir) that measured trial `trial`
            "runs": winner_runs(winner, race, sweep_dir=sweep_dir),
            "verdict": winner_text(winner),
            "decisive": winner.verdict.decisive,
            # how the verification race ended, and the paired lead over the starting config
            "race": _race_record(winner),
        },
    )
    if cost is not None:  # time to train the planned tokens and $ per 1B, start and winner
        doc["provenance"]["cost"] = _plain(cost)
    doc["provenance"]["checkpoint"] = (  # the interval, its saving overhead, work lost
        checkpoint.as_dict()
        if checkpoint is not None
        else {"every_steps": pinned["checkpoint"]["every_steps"], "rule": "no save measured"}
    )
    doc["provenance"]["measured_as"] = measured_as  # the conditions the race measured it in
    # what its matmuls ran in, and what its MFU is measured against (train/core/result.py)
    doc["provenance"]["precision"] = precision_record(winner.results, row)
    # the numerics guard's check of its math against the starting config's (sweeper/verify/guard.py)
    guard = getattr(winner, "numerics_guard", None)
    doc["provenance"]["numerics_guard"] = _plain(guard or {"verdict": "off"})
    if compared is not None:  # which trials this file's winner was chosen from
        doc["provenance"]["sweep"]["compared"] = _plain(compared)
    header = _winner_header(row, study_name=study_name, trial=winner.number, best_path=path)
    return write_best_yaml(path, doc, header=header)


def _winner_header(row: Mapping[str, Any], *, study_name: str, trial: int, best_path: Path) -> str:
    """best.yaml's opening comment: the study and trial it came from, the winner's median and
    spread, the command that trains with it, and what its float8 matmuls ran in."""
    header = (
        f"Tuned by the throughput sweep (study {study_name}, trial {trial}): "
        f"{row['tokens_per_s']:,.0f} tokens/s median of {row['n']} fresh runs"
        # a spread only where it rests on more than one run (one run has none, not 0.0%)
        + (f", CV {100 * row['cv']:.1f}%" if row["n"] >= 2 and row.get("cv") is not None else "")
        + f".\nTrain with it: {train_command(best_path)}"
    )
    if row.get("float8"):
        f8 = row["float8"]
        header += (
            f"\nfloat8 {f8['recipe']} matmuls ran{' (emulated)' if f8.get('emulated') else ''} in "
            f"{f8['linears_converted']} of {f8['linears_total']} linears: MFU is bf16-equivalent"
        )
    return header
