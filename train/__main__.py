"""The production run: `python -m train <overrides>`, or `python -m train --config-path DIR
--config-name best` for a sweep's pinned winner.

Same session and step code as the trial, so a tuned configuration trains exactly as it was measured.
Cosine LR with warm-up, periodic validation loss, checkpoints, and resume from the newest checkpoint
after a kill: batch i of the run is a pure function of (seed, i), so nothing is lost or repeated.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from train.core.compile_cache import cache_failure
from train.core.config import Config
from train.core.config_checks import check_batch
from train.core.config_file import exit_on_bad_config_file
from train.core.flops import mfu
from train.core.keys import check_trainer_keys, exit_on_mistyped_keys, flat_keys
from train.core.paths import check_checkpoint_target
from train.core.rules import grad_accum_across_ranks, world_size
from train.core.schedule import scheduled_lr
from train.data.dataset import DataChanged
from train.run.checkpoint import (
    CheckpointDiskFull,
    CheckpointReadError,
    checkpoints_newest_first,
    load_checkpoint,
    newest_verified,
    read_header,
    restore_rng_state,
)
from train.run.distributed import current_rank
from train.run.finite import NonFiniteState, diverged, first_non_finite, state_tensors
from train.run.identity import check_resume, run_identity
from train.run.loop import (
    Session,
    build_session,
    check_data,
    close_session,
    device_peaks,
    eval_loss,
    make_phase_clock,
    run_step,
)
from train.run.torchrun import LAUNCH_CONFIG, launch, needs_launch, root_failure

log = logging.getLogger("train")


class RunStopped(Exception):
    """The run stopped before train.max_steps (an interrupt, the data changed under it)."""

    def __init__(self, *, step: int, why: str) -> None:
        super().__init__(why)
        self.step = step
        self.why = why


def _already_stopping(signum: int, frame: object) -> None:
    log.warning("already stopping: the checkpoint writer finishes first (Ctrl-\\ kills at once)")


def stopped_line(stop: RunStopped, *, checkpoint_dir: str) -> str:
    """One line: where the run stopped, the newest checkpoint that verifies, and how to resume."""
    kept = newest_verified(checkpoint_dir)
    if kept is None:
        resume = "no checkpoint was saved yet; the same command starts again from step 0"
        return f"stopped at step {stop.step} ({stop.why}); {resume}"
    saved = checkpoint_step(kept)
    resume = f"the newest checkpoint is {kept} (step {saved}); the same command resumes from it"
    # a stop during a step's save: the step and its checkpoint are done, the counter not yet
    return f"stopped at step {max(stop.step, saved)} ({stop.why}); {resume}"


def checkpoint_step(path: Path) -> int:
    """Completed steps recorded in a checkpoint's name (ckpt_<step>.pt), read without loading it."""
    match = re.search(r"(\d+)", path.stem)
    if match is None:
        raise ValueError(f"cannot read the step from checkpoint name {path}")
    return int(match.group(1))


def resume_from(cfg: Config) -> Path | None:
    """The checkpoint this run continues from, or None for a fresh start (train.resume=never,
    or no readable checkpoint in checkpoint.dir). The newest readable one is taken (an
    unreadable file is skipped with a warning) and must be this run's: another identity is
    refused with the keys that differ (ValueError) unless train.resume=force."""
    if cfg.train.resume == "never":
        return None
    current = run_identity(cfg)
    for path in checkpoints_newest_first(cfg.checkpoint.dir):
        try:
            header = read_header(path)
        except CheckpointReadError as exc:
            log.warning("skipping %s", exc)
            continue
        warning = check_resume(
            saved=header["identity"], current=current, path=path, mode=cfg.train.resume
        )
        if warning:
            log.warning("%s", warning)
        return path
    return None


def run(cfg: Config) -> dict:
    """Train to `train.max_steps`; returns a summary (also written as train_summary.json)."""
    latest = resume_from(cfg)
    start = checkpoint_step(latest) if latest is not None else 0
    s = build_session(cfg, start_step=start)
    s.checkpointer.identity = run_identity(cfg)  # each checkpoint says whose it is
    if not s.rank.main:  # rank 0 says it; the others only warn
        log.setLevel(logging.WARNING)
    try:
        summary = _train(cfg, s, latest=latest, start=start)
    except BaseException:
        close_session(s)  # also on a failed step: an in-flight async write completes
        raise
    close_session(s, finished=True)
    return summary


def _train(cfg: Config, s: Session, *, latest: Path | None, start: int) -> dict:
    """Resume when there is a checkpoint, then train to `train.max_steps`: log every
    `train.log_every` steps (stopping on a non-finite loss), validate every `train.eval_every`."""
    tc = cfg.train
    if latest is not None:
        _resume(cfg, s, latest=latest, start=start)
    name, peak, ceiling = device_peaks(s)
    _announce(cfg, s, device_name=name, start=start)

    clock = make_phase_clock(s.device)  # the trial's clock: same step, same one sync per step
    data_wait_s = 0.0
    history: list[dict] = []
    step = start
    mark_time, mark_step = time.perf_counter(), step
    try:
        while step < tc.max_steps:
            # -- the step: cosine lr, forward/backward/update, and its checkpoint when one is due
            lr = scheduled_lr(cfg, step)
            done = step + 1
            save = s.checkpointer.due(done) or (
                done == tc.max_steps and cfg.checkpoint.every_steps > 0
            )
            loss_t, phases, _ = run_step(
                s, lr=lr, clock=clock, checkpoint_step=done if save else None, save_rng=True
            )
            data_wait_s += phases["data_wait"]
            step = done
            # -- the log line: the rate since the last one; a non-finite loss stops the run
            if step % tc.log_every == 0 or step == tc.max_steps:
                now = time.perf_counter()  # run_step synchronised: the device's work is done
                record = _progress_record(
                    s,
                    step=step,
                    loss=loss_t.item(),
                    lr=lr,
                    seconds=now - mark_time,
                    steps=step - mark_step,
                    data_wait_s=data_wait_s,
                    peak=peak,
                    ceiling=ceiling,
                )
                history.append(record)
                mark_time, mark_step, data_wait_s = time.perf_counter(), step, 0.0
            # -- validation
            if tc.eval_every and (step % tc.eval_every == 0 or step == tc.max_steps):
                val = eval_loss(s, num_batches=tc.eval_batches)
                log.info("step %d | val loss %.4f", step, val)
                history.append({"step": step, "val_loss": val})
                mark_time = time.perf_counter()  # evaluation is not training throughput
    except KeyboardInterrupt:  # Ctrl-C
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, _already_stopping)  # a second one cannot cut the line
        raise RunStopped(step=step, why="interrupted") from None
    except RuntimeError as exc:  # the data file changed under the run (maybe in a loader worker)
        changed = DataChanged.line(exc)
        if changed is None:
            raise
        raise RunStopped(step=step, why=changed) from None
    return {"start_step": start, "end_step": step, "history": history}


def _resume(cfg: Config, s: Session, *, latest: Path, start: int) -> None:
    """Load `latest` into the session; refuse a checkpoint that does not fit this model or holds
    non-finite values (ValueError naming the file and the fix)."""
    try:
        state = load_checkpoint(
            latest, model=s.raw_model, optimizer=s.optimizer, map_location=s.device
        )
    except RuntimeError as exc:  # load_state_dict: shapes or keys do not fit this model
        raise ValueError(
            f"checkpoint {latest} does not fit this model ({_first_mismatch(exc)}); "
            f"use a fresh checkpoint.dir for this run"
        ) from exc
    bad = first_non_finite(state_tensors(s.raw_model, s.optimizer))
    if bad is not None:
        raise ValueError(
            f"checkpoint {latest} holds non-finite values ({bad}): it cannot be resumed; "
            f"move it out of {cfg.checkpoint.dir} to resume from an earlier one, or use a "
            f"fresh checkpoint.dir"
        )
    s.checkpointer.last_saved = latest
    log.info("resumed from %s at step %d", latest, start)
    if "rng" in state["extra"]:
        restore_rng_state(state["extra"]["rng"], s.device)


def _announce(cfg: Config, s: Session, *, device_name: str, start: int) -> None:
    world = s.rank.world
    log.info(
        "training %s on %s%s (%s): %d tokens/step, %.3g FLOP/token, steps %d -> %d",
        cfg.model.name,
        device_name,
        f" x {world} processes" if world > 1 else "",
        s.dtype,
        s.tokens_per_step,
        s.flops_per_token,
        start,
        cfg.train.max_steps,
    )


def _progress_record(
    s: Session,
    *,
    step: int,
    loss: float,
    lr: float,
    seconds: float,
    steps: int,
    data_wait_s: float,
    peak,
    ceiling,
) -> dict:
    """The history record and log line of `steps` steps that took `seconds` (`data_wait_s` of
    them waiting for data); a non-finite loss raises NonFiniteState instead."""
    if not math.isfinite(loss):  # a save would have stopped it; log_every got there first
        raise diverged(step=step, loss=loss, last_good=s.checkpointer.last_saved)
    world = s.rank.world  # MFU: the global rate against every process's device
    tps = s.tokens_per_step * steps / seconds
    wait_frac = data_wait_s / seconds
    record = {
        "step": step,
        "loss": loss,
        "lr": lr,
        "tokens_per_s": tps,
        "data_wait_frac": wait_frac,
    }
    record["mfu_spec"] = (
        mfu(
            tokens_per_s=tps,
            flops_per_token=s.flops_per_token,
            peak_flops=peak.flops * world,
        )
        if peak
        else None
    )
    record["mfu_ceiling"] = mfu(
        tokens_per_s=tps,
        flops_per_token=s.flops_per_token,
        peak_flops=ceiling.flops * world,
    )
    log.info(
        "step %d | loss %.4f | lr %.2e | %.0f tokens/s | data wait %.1f%% | mfu spec %s "
        "ceiling %.1f%%",
        step,
        loss,
        lr,
        tps,
        100 * wait_frac,
        "n/a" if record["mfu_spec"] is None else f"{100 * record['mfu_spec']:.1f}%",
        100 * record["mfu_ceiling"],
    )
    return record


def _first_mismatch(exc: RuntimeError) -> str:
    """The first size-mismatch or missing-key line of load_state_dict's many-line error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    picked = [line for line in lines if line.startswith(("size mismatch", "Missing key"))]
    return (picked or lines or ["no detail"])[0].rstrip(".")


def spread_grad_accum(dcfg: DictConfig, *, given: bool) -> None:
    """Several ranks on a split made for another number of them (a best.yaml swept on one process,
    `runtime.nproc=2`): the micro-batch is the tuned per-device knob and the tokens per step are
    pinned, so the gradient accumulation is divided across the ranks, said in one line. A
    batch.grad_accum the command line gives (`given`) is the user's, and check_batch judges it."""
    b, nproc = dcfg.batch, dcfg.runtime.nproc
    values = (b.tokens_per_step, b.micro_batch, b.grad_accum, dcfg.model.block_size, nproc)
    if given or not all(isinstance(v, int) and v > 0 for v in values):
        return  # a bad value is the schema's to refuse, in its own words
    world = world_size(nproc)
    per_rank = grad_accum_across_ranks(
        tokens_per_step=b.tokens_per_step,
        micro_batch=b.micro_batch,
        grad_accum=b.grad_accum,
        block_size=dcfg.model.block_size,
        world=world,
    )
    if per_rank is None:
        return
    if os.environ.get("RANK", "0") == "0":
        log.info(
            "%d processes: batch.grad_accum %d -> %d per process, keeping batch.micro_batch "
            "%d and batch.tokens_per_step %d (%d x %d x block %d x %d processes)",
            world,
            b.grad_accum,
            per_rank,
            b.micro_batch,
            b.tokens_per_step,
            b.micro_batch,
            per_rank,
            dcfg.model.block_size,
            world,
        )
    dcfg.batch.grad_accum = per_rank


def command_line_keys() -> set[str]:
    """The config keys this run's command line sets (Hydra's task overrides)."""
    from hydra.core.hydra_config import HydraConfig

    overrides = HydraConfig.get().overrides.task
    return {o.split("=", 1)[0].lstrip("+~") for o in overrides}


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(dcfg: DictConfig) -> None:
    try:
        check_trainer_keys(flat_keys(OmegaConf.to_container(dcfg, resolve=False)))
        spread_grad_accum(dcfg, given="batch.grad_accum" in command_line_keys())
        cfg: Config = OmegaConf.to_object(dcfg)
        # a batch that does not split across runtime.nproc ranks: refused before any rank starts
        check_batch(cfg.batch, block_size=cfg.model.block_size, world=world_size(cfg.runtime.nproc))
        check_checkpoint_target(every_steps=cfg.checkpoint.every_steps, folder=cfg.checkpoint.dir)
    except ValueError as exc:
        log.error("invalid config: %s", exc)
        raise SystemExit(2) from exc
    from hydra.core.hydra_config import HydraConfig

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    if needs_launch(cfg.runtime.nproc):
        raise SystemExit(run_ranks(cfg, dcfg, out_dir))
    try:
        summary = run(cfg)
    except ValueError as exc:  # a user error found while building: say it, no traceback
        log.error("%s", exc)
        raise SystemExit(2) from exc
    except (CheckpointDiskFull, NonFiniteState) as exc:  # one line: what happened, the fix
        log.error("%s", exc)
        raise SystemExit(1) from exc
    except RunStopped as exc:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a late Ctrl-C cannot cut the exit short
        log.error("%s", stopped_line(exc, checkpoint_dir=cfg.checkpoint.dir))
        raise SystemExit(130 if exc.why == "interrupted" else 1) from None
    except Exception as exc:  # a damaged compile cache: one line naming it and how to clear it
        damaged = cache_failure(exc, cfg.runtime.compile_cache)
        if damaged is None:
            raise
        log.error("%s", damaged)
        raise SystemExit(1) from None
    if not current_rank().main:
        return
    out = out_dir / "train_summary.json"
    out.write_text(json.dumps(summary, indent=2))
    log.info("summary written to %s", out)


def run_ranks(cfg: Config, dcfg: DictConfig, out_dir: Path) -> int:
    """runtime.nproc > 1: train as that many DDP ranks under torch's launcher; each rank writes
    its Hydra folder under `out_dir` (rank_0, rank_1, ...), and rank 0's summary is copied up.
    Returns the exit code: 0, or the failed rank's."""
    check_data(cfg)  # made once here, not by every rank at once
    doc = OmegaConf.to_container(dcfg, resolve=True)
    config = out_dir / f"{LAUNCH_CONFIG}.yaml"
    OmegaConf.save(OmegaConf.create({"defaults": ["train_schema", "_self_"], **doc}), config)
    argv = [
        "-m",
        "train",
        "--config-path",
        str(out_dir),
        "--config-name",
        LAUNCH_CONFIG,
        f"hydra.run.dir={out_dir}/rank_${{oc.env:RANK}}",
    ]
    failures = launch(nproc=cfg.runtime.nproc, argv=argv, run_name="train")
    if failures:
        root = root_failure(failures, {})
        log.error("%s; its log is in %s/rank_%d", root.text(cfg.runtime.nproc), out_dir, root.rank)
        return 1 if root.exitcode < 0 else root.exitcode
    summary = out_dir / "rank_0" / "train_summary.json"
    if summary.is_file():
        shutil.copyfile(summary, out_dir / "train_summary.json")
        log.info("summary written to %s", out_dir / "train_summary.json")
    return 0


if __name__ == "__main__":
    exit_on_mistyped_keys(sys.argv[1:])  # one line with the nearest schema key, before Hydra
    sys.argv[1:] = exit_on_bad_config_file(sys.argv[1:])  # a broken best.yaml: one line, too
    main()
