"""A bounded, honest measurement of one configuration: `python -m train.trial <hydra overrides>`.

Warm-up steps first (compilation and allocator warm-up happen there and are reported separately),
then a measured window that ends after `trial.max_steps` steps or `trial.max_seconds`, whichever
comes first (`measure`, train/trial/window.py). The result is one JSON file (the schema is
`train/core/result.py`) that the sweeper, MLflow logging and `explain` all read, plus a
one-screen summary.
"""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from functools import partial
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from train import device as dev
from train.core.config import Config
from train.core.paths import PROJECT_DIR, check_checkpoint_target, check_file_target
from train.core.progress import Heartbeat, ProgressFile
from train.core.pruning import Reporter
from train.core.result import Failure, TrialResult, write_result
from train.core.result_build import Measurement, build_result
from train.core.rules import resolve_storage
from train.core.schedule import scheduled_lr
from train.measure.ceiling import is_stale, measure_matmul_ceiling
from train.measure.fingerprint import environment_fingerprint
from train.measure.memory_meter import measure_memory, predicted_gib
from train.run.distributed import current_rank
from train.run.loop import (
    Session,
    build_session,
    close_session,
    device_peaks,
    make_phase_clock,
    run_step,
    untimed_step,
)
from train.run.torchrun import needs_launch, under_torchrun
from train.trial.compile_charge import add_compile_charge
from train.trial.failure import classify
from train.trial.launched import rank_out, run_launched
from train.trial.save_price import checkpoint_save, recorded_save
from train.trial.seeds import more_seed_curves
from train.trial.setup_clock import SetupClock, setup_line
from train.trial.summary import format_summary
from train.trial.window import measure

log = logging.getLogger(__name__)


def make_reporter(cfg: Config) -> Reporter | None:
    t = cfg.trial
    if not t.study_storage:
        return None
    from train.core.pruning import StudyReporter

    return StudyReporter(
        storage=resolve_storage(t.study_storage), study_name=t.study_name, trial_id=t.trial_id
    )


def profile_steps(s: Session, out_dir: Path, *, first_step: int) -> Path:
    """A torch.profiler trace of a few extra steps, taken after the window so it never skews it;
    they continue the schedule from step `first_step`."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if s.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    clock = make_phase_clock(s.device)
    with profile(activities=activities, record_shapes=False) as prof:
        for i in range(s.cfg.trial.profile_steps):
            run_step(s, lr=scheduled_lr(s.cfg, first_step + i), clock=clock)
    path = out_dir / "trace.json"
    prof.export_chrome_trace(str(path))
    return path


def run_trial(cfg: Config, *, out_path: Path) -> TrialResult:
    """Run one bounded trial and write its result; failures are results too, never lost."""
    setup = SetupClock()  # first: the time since the process began is the imports' and Hydra's
    out_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    s: Session | None = None
    scratch: Path | None = None
    fingerprint: dict = {}
    rank = current_rank()
    if not rank.main:  # rank 0 writes the result and the progress; the others their failures
        out_path = rank_out(out_path, rank.rank)
    progress = ProgressFile(cfg.trial.progress_file if rank.main else "")
    heartbeat = Heartbeat(progress).start()
    finished = False  # the measurement ran to its end on this rank
    try:
        # A private sub-directory of the checkpoint target, removed afterwards: the trial measures
        # the write, it does not keep multi-GB files.
        scratch = (
            Path(cfg.checkpoint.dir).expanduser() / f"trial-{uuid.uuid4().hex[:8]}"
            if rank.main
            else None  # rank 0 alone saves
        )
        # device, checks, model (and optimizer), attention probe, data: each its own phase
        s = build_session(cfg, checkpoint_dir=str(scratch) if scratch else None, phase=setup.phase)
        with setup.phase("fingerprint"):
            fingerprint = environment_fingerprint(
                device=s.device, seed=cfg.runtime.seed, threads=s.threads, project_dir=PROJECT_DIR
            )
        with setup.phase("device_peaks"):  # the spec peak, the matmul ceiling (cached per machine)
            name, peak, ceiling = device_peaks(s)
        # a sweep that searches no checkpoint knob saves once per target (train/trial/save_price.py)
        priced = bool(cfg.trial.save_record) and rank.main
        known = recorded_save(s) if priced else None
        raw = measure(
            s,
            reporter=make_reporter(cfg),
            progress=progress,
            heartbeat=heartbeat,
            saves=not cfg.trial.save_record,
        )
        result = measured_result(
            s,
            raw,
            out_dir=out_path.parent,
            peaks=(name, peak, ceiling),
            fingerprint=fingerprint,
            started=started,
        )
        if priced:
            result["checkpoint_save"] = checkpoint_save(
                s, known, step=len(raw["losses"]), measured_by=str(out_path.parent)
            )
        if cfg.trial.seeds > 1:  # more curves from this process: the guard's reference seeds
            s, result["loss"]["more_seeds"] = more_seed_curves(s, progress=progress)
        if rank.main:  # another rank's result would only repeat rank 0's
            # the graph's compile as the sweep charges it: the same for every trial of the graph
            add_compile_charge(
                result, record=cfg.trial.compile_record, measured_by=str(out_path.parent)
            )
            result["setup"] = setup.record()
            log.info("set-up %s", setup_line(result["setup"]))
            write_result(result, out_path)
        finished = True
    except Exception as exc:
        result = failed_result(exc, cfg, s, fingerprint=fingerprint, started=started)
        result["setup"] = setup.record()  # as far as it got
        # Written before the rank leaves the process group (close_session below): its peers then
        # fail too ("connection closed"), and the first record written names the rank that ended
        # a data-parallel trial (train/run/torchrun.py root_failure)
        write_result(result, out_path)
    finally:
        heartbeat.stop()
        if s is not None:
            try:
                close_session(s, finished=finished)
            except Exception as exc:
                log.warning("checkpoint writer closed with an error: %s", exc)
        if scratch is not None and scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
    return result


def measured_result(
    s: Session,
    raw: Measurement,
    *,
    out_dir: Path,
    peaks: tuple,
    fingerprint: dict,
    started: float,
) -> TrialResult:
    """The result of a measured window: the memory step and the profile after it, then the
    result against the device's `peaks` (name, spec peak, matmul ceiling), measuring the ceiling
    again when the cached one is below this trial's own rate."""
    name, peak, ceiling = peaks
    cfg = s.cfg
    # CPU: one extra step, after the timed window
    done = len(raw["losses"])  # the schedule goes on after the window's steps
    memory_report = measure_memory(s, step=partial(untimed_step, s, lr=scheduled_lr(cfg, done)))
    trace = profile_steps(s, out_dir, first_step=done + 1) if cfg.trial.profile else None
    memory = dev.peak_memory_gib(s.device)
    build = partial(
        build_result,
        cfg=cfg,
        session=s,
        raw=raw,
        device_name=name,
        peak=peak,
        memory=memory,
        memory_report=memory_report,
        fingerprint=fingerprint,
        trace=trace,
        wall_s=time.time() - started,
    )
    result = build(ceiling=ceiling)
    if is_stale(ceiling, result["mfu"]["ceiling"]):
        log.warning(
            "the cached matmul ceiling (%s) is below this trial's own rate: measuring it again",
            ceiling.source,
        )
        result = build(ceiling=measure_matmul_ceiling(s.device, s.dtype, refresh=True))
    return result


def failed_result(
    exc: Exception, cfg: Config, s: Session | None, *, fingerprint: dict, started: float
) -> TrialResult:
    """The result of a trial that raised `exc`, its failure classified (`s`: None when it failed
    before its session was built)."""
    failure: Failure = classify(
        exc, during_setup=s is None, compile_cache=cfg.runtime.compile_cache
    )
    log.error("trial failed (%s): %s", failure["kind"], failure["message"])
    return build_result(
        cfg=cfg,
        session=None,
        raw=None,
        failure=failure,
        memory_report={"predicted_gib": predicted_gib(s)} if s is not None else None,
        fingerprint=fingerprint,
        wall_s=time.time() - started,
    )


def resolve_out(out_setting: str, base_dir: Path) -> Path:
    """`trial.out` as a path: absolute as given, else relative to `base_dir` (the run dir)."""
    out = Path(out_setting).expanduser()
    return out if out.is_absolute() else base_dir / out


def writable_out(out: Path) -> bool:
    """Whether the result can be written at `out`; says why not in one line (there is nowhere to
    put a failed result either)."""
    try:
        check_file_target("trial.out", out, example_name="trial.json")
    except ValueError as exc:
        log.error("%s", exc)
        return False
    return True


def exit_code(result: TrialResult) -> int:
    """0 complete or pruned, 2 invalid config, 3 any other failure (the JSON exists in all)."""
    if result["status"] != "failed":
        return 0
    return 2 if result["failure"]["kind"] == "invalid_config" else 3


def invalid_config(message: str, *, out: Path, resolved: dict | None) -> int:
    """Field validation failed before anything was built: still leave a result behind."""
    result = build_result(
        cfg=None,
        session=None,
        raw=None,
        failure=Failure(kind="invalid_config", message=message),
        fingerprint={},
        wall_s=0.0,
        resolved_config=resolved,
    )
    write_result(result, out)
    log.error("invalid config: %s", message)
    return 2


def run_composed(dcfg: DictConfig, *, base_dir: Path) -> int:
    """Validate a composed config, run the trial and print its summary; returns the exit code."""
    out = resolve_out(dcfg.trial.out, base_dir)
    if not writable_out(out):
        return 2
    try:
        cfg: Config = OmegaConf.to_object(dcfg)
        check_checkpoint_target(every_steps=cfg.checkpoint.every_steps, folder=cfg.checkpoint.dir)
    except ValueError as exc:
        return invalid_config(
            str(exc), out=out, resolved=OmegaConf.to_container(dcfg, resolve=True)
        )
    if needs_launch(cfg.runtime.nproc):
        result = run_launched(cfg, dcfg, out=out)
    else:
        result = run_trial(cfg, out_path=out)
    if not under_torchrun():  # the launching process prints it, not rank 0 again
        print(format_summary(result, out))
    return exit_code(result)
