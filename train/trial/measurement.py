"""A bounded, honest measurement of one configuration: `python -m train.trial <hydra overrides>`.

Warm-up steps first (compilation and allocator warm-up happen there and are reported separately),
then a measured window that ends after `trial.max_steps` steps or `trial.max_seconds`, whichever
comes first. The result is one JSON file (the schema is `train/trial/result.py`) that the sweeper,
MLflow logging and `explain` all read, plus a one-screen summary.
"""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from contextlib import nullcontext
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from train.config import Config
from train.measure import compile_stats
from train.measure.fingerprint import environment_fingerprint
from train.measure.memory_meter import measure_memory, predicted_gib
from train.measure.meters import (
    micro_batch_times,
    project_step,
    projects,
    short_step,
    summarize,
    time_fractions,
    window_rate,
)
from train.measure.nvml import NvmlSampler
from train.run import device as dev
from train.run.distributed import any_rank, current_rank, from_main
from train.run.loop import (
    Session,
    build_session,
    check_finite,
    close_session,
    device_peaks,
    make_phase_clock,
    run_step,
)
from train.run.paths import check_checkpoint_target, check_file_target
from train.run.torchrun import needs_launch, under_torchrun
from train.trial.failure import classify, plant_fault
from train.trial.launched import rank_out, run_launched
from train.trial.progress import Heartbeat, ProgressFile
from train.trial.pruning import Reporter
from train.trial.result import (
    Failure,
    Interval,
    Measurement,
    TrialResult,
    build_result,
    format_summary,
    write_result,
)

log = logging.getLogger(__name__)
PROJECT_DIR = Path(__file__).resolve().parents[2]


def make_reporter(cfg: Config) -> Reporter | None:
    t = cfg.trial
    if not t.study_storage:
        return None
    from train.trial.pruning import StudyReporter

    return StudyReporter(storage=t.study_storage, study_name=t.study_name, trial_id=t.trial_id)


def measure(
    s: Session,
    *,
    reporter: Reporter | None,
    progress: ProgressFile,
    heartbeat: Heartbeat | None = None,
) -> Measurement:
    """Warm up, then measure. Returns the raw measurements that `build_result` turns into the JSON.

    Every step is `run_step`'s: the step, its checkpoint save when one is due, one synchronize,
    then the phase times (CUDA events on a GPU), exactly as in the production run. Warm-up steps
    are short (at most `trial.project_micro_steps` micro-batches: compile and allocator growth do
    not depend on the accumulation count); the last one sizes a full step. When a full step would
    take longer than `trial.project_above_s`, the window measures short steps too and projects
    each to the full step (`project_step`): grad_accum x the measured micro-batch phases + the
    step's optimizer, checkpoint and overhead, once.
    """
    cfg, t = s.cfg, s.cfg.trial
    accum = cfg.batch.grad_accum
    short = short_step(accum, t.project_micro_steps)
    clock = make_phase_clock(s.device)
    lr = cfg.optim.lr
    heartbeat = heartbeat or Heartbeat(progress, interval_s=0)  # not started: phase lines only

    # -- warm-up: compile, autotune, allocator growth; timed, never part of the measured numbers
    heartbeat.phase("warmup")
    before_warmup = compile_stats.snapshot()
    warm_start = time.perf_counter()
    first_loss = float("nan")
    losses: list[float] = []  # every step's mean loss over the global batch, warm-up first
    wall_s, phases = 0.0, clock.take()
    for i in range(t.warmup_steps):
        step_start = time.perf_counter()
        loss_t, phases, _ = run_step(s, lr=lr, clock=clock, micro_batches=short)
        wall_s = time.perf_counter() - step_start
        loss = loss_t.item()
        losses.append(loss)
        check_finite(loss, i)
        if i == 0:
            first_loss = loss
    warmup_s = time.perf_counter() - warm_start
    after_warmup = compile_stats.snapshot()
    full_estimate_s, _ = project_step(
        wall_s, phases, micro_s=micro_batch_times(clock.last_spans), grad_accum=accum
    )
    # ranks decide from rank 0's clock: a projected window on one rank and full steps on
    # another would wait on each other's all-reduces forever
    full_estimate_s = from_main(full_estimate_s, s.rank, s.device)
    projected = projects(
        grad_accum=accum,
        project_micro_steps=t.project_micro_steps,
        above_s=t.project_above_s,
        full_step_s=full_estimate_s,
    )
    micro = short if projected else accum
    heartbeat.stop()
    progress.write(
        event="warmup_done",
        warmup_s=warmup_s,
        full_step_estimate_s=full_estimate_s,
        projected=projected,
    )
    if projected:
        log.info(
            "a full step (%d micro-batches) would take ~%.1f s > trial.project_above_s=%g: "
            "measuring steps of %d micro-batches and projecting",
            accum, full_estimate_s, t.project_above_s, micro,
        )  # fmt: skip
    dev.reset_peak_memory(s.device)

    # -- measured window
    step_times: list[float] = []  # full optimizer steps: measured, or projected from short ones
    short_times: list[float] = []  # the short steps a projection was made from
    all_phases: list[dict[str, float]] = []
    checkpoint_s: list[float] = []
    intervals: list[Interval] = []
    pruned = False
    last_loss = first_loss
    sampler = NvmlSampler(device_index=s.device.index or 0) if s.device.type == "cuda" else None
    with sampler if sampler is not None else nullcontext():
        window_start = time.perf_counter()
        prev = window_start
        while len(step_times) < t.max_steps:
            step = len(step_times) + 1
            if step == 1 and t.fault != "none" and s.rank.rank == t.fault_rank % s.rank.world:
                plant_fault(t.fault, s)
            loss_t, phases, stall = run_step(
                s,
                lr=lr,
                clock=clock,
                micro_batches=micro,
                checkpoint_step=step if s.checkpointer.due(step) else None,
            )
            if stall is not None:
                checkpoint_s.append(stall)
            now = time.perf_counter()
            if projected:
                short_times.append(now - prev)
                full_s, phases = project_step(
                    now - prev,
                    phases,
                    micro_s=micro_batch_times(clock.last_spans),
                    grad_accum=accum,
                )
                step_times.append(full_s)
            else:
                step_times.append(now - prev)
            all_phases.append(phases)
            prev = now
            last_loss = loss_t.item()
            losses.append(last_loss)
            check_finite(last_loss, t.warmup_steps + step)
            if step % t.report_every == 0:
                report_start = time.perf_counter()
                recent = step_times[-t.report_every :]
                fracs = time_fractions(all_phases[-t.report_every :], recent)
                interval: Interval = {
                    "step": step,
                    "tokens_per_s": window_rate(s.tokens_per_step * len(recent), sum(recent)),
                    "step_time_s": sorted(recent)[len(recent) // 2],
                    "data_wait_frac": fracs["data_wait"],
                }
                intervals.append(interval)
                running = window_rate(s.tokens_per_step * step, sum(step_times))
                progress.write(event="interval", running_tokens_per_s=running, **interval)
                prune = reporter is not None and reporter.report(step=step, value=running)
                if any_rank(prune, s.rank, s.device):
                    pruned = True
                    log.info("pruned at measured step %d (running %.0f tokens/s)", step, running)
                    break
                # reporting to the study (a database round trip) is the sweep's bookkeeping, not
                # training: the next step's clock starts after it
                prev += time.perf_counter() - report_start
            agree_start = time.perf_counter()
            if any_rank(now - window_start >= t.max_seconds and step >= t.min_steps, s.rank,
                        s.device):  # fmt: skip
                break
            prev += time.perf_counter() - agree_start  # the ranks' agreement is not training
    after_window = compile_stats.snapshot()
    s.checkpointer.wait()
    return {
        "step_times": step_times,
        "phases": all_phases,
        "checkpoint_s": checkpoint_s,
        "intervals": intervals,
        "warmup_s": warmup_s,
        "warmup_compile": compile_stats.delta(before_warmup, after_warmup),
        "window_compile": compile_stats.delta(after_warmup, after_window),
        "loss_first": first_loss,
        "loss_last": last_loss,
        "losses": losses,
        "pruned": pruned,
        "device_samples": sampler.summary() if sampler is not None else None,
        "checkpoint_bytes": getattr(s.checkpointer, "bytes_written", None),
        "projection": {
            "micro_batches_per_step": micro,
            "grad_accum": accum,
            "short_step_s": summarize(short_times),
        }
        if projected
        else None,
        "full_step_estimate_s": full_estimate_s,
    }


def profile_steps(s: Session, out_dir: Path) -> Path:
    """A torch.profiler trace of a few extra steps, taken after the window so it never skews it."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if s.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    clock = make_phase_clock(s.device)
    with profile(activities=activities, record_shapes=False) as prof:
        for _ in range(s.cfg.trial.profile_steps):
            run_step(s, lr=s.cfg.optim.lr, clock=clock)
    path = out_dir / "trace.json"
    prof.export_chrome_trace(str(path))
    return path


def run_trial(cfg: Config, *, out_path: Path) -> TrialResult:
    """Run one bounded trial and write its result; failures are results too, never lost."""
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
        s = build_session(cfg, checkpoint_dir=str(scratch) if scratch else None)
        fingerprint = environment_fingerprint(
            device=s.device, seed=cfg.runtime.seed, threads=s.threads, project_dir=PROJECT_DIR
        )
        name, peak, ceiling = device_peaks(s)
        raw = measure(s, reporter=make_reporter(cfg), progress=progress, heartbeat=heartbeat)
        memory_report = measure_memory(s)  # CPU: one extra step, after the timed window
        trace = profile_steps(s, out_path.parent) if cfg.trial.profile else None
        memory = dev.peak_memory_gib(s.device)
        result = build_result(
            cfg=cfg,
            session=s,
            raw=raw,
            device_name=name,
            peak=peak,
            ceiling=ceiling,
            memory=memory,
            memory_report=memory_report,
            fingerprint=fingerprint,
            trace=trace,
            wall_s=time.time() - started,
        )
        if rank.main:  # another rank's result would only repeat rank 0's
            write_result(result, out_path)
        finished = True
    except Exception as exc:
        failure: Failure = classify(exc, during_setup=s is None)
        log.error("trial failed (%s): %s", failure["kind"], failure["message"])
        result = build_result(
            cfg=cfg,
            session=None,
            raw=None,
            failure=failure,
            memory_report={"predicted_gib": predicted_gib(s)} if s is not None else None,
            fingerprint=fingerprint,
            wall_s=time.time() - started,
        )
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
