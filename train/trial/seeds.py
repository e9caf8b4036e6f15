"""More loss curves from one trial process: `trial.seeds` > 1 trains the same curve again from
each next seed, in the process that trained runtime.seed's.

A fresh process of runtime.seed=N would seed torch, draw GPT-2's initial weights, build a new
AdamW and read seed N's batches (train/data/dataset.py draws batch i from (seed, split, i)).
`reseed` does exactly that to a built session, in place where it can: the weights are drawn again
into the same parameters, so a compiled model (whole or block by block) runs the graphs it has,
and the device, the data files and the compile are not paid again. The numerics guard's reference
seeds (sweeper/verify/guard_runs.py) run this way: one set-up and one compile for all of them.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import torch

from train import device as dev
from train.core.progress import ProgressFile
from train.core.result import SeedCurve
from train.data.dataset import DevicePrefetcher, make_loader
from train.run.loop import Session, make_optimizer
from train.trial.window import measure

log = logging.getLogger(__name__)


def reseed(s: Session, seed: int) -> Session:
    """`s` as a fresh process of runtime.seed=`seed` would start it: torch seeded, the weights
    drawn again in place, a new optimizer and loss scaler, that seed's batches from the first."""
    cfg = dataclasses.replace(s.cfg, runtime=dataclasses.replace(s.cfg.runtime, seed=seed))
    torch.manual_seed(seed)
    s.raw_model.init_weights()
    optimizer, fused = make_optimizer(s.raw_model, cfg, s.device)
    s.batches.close()
    loader = make_loader(
        cfg, split="train", device_type=s.device.type, rank=s.rank.rank, world=s.rank.world
    )
    return dataclasses.replace(
        s,
        cfg=cfg,
        optimizer=optimizer,
        fused_optimizer=fused,
        scaler=dev.grad_scaler(s.device, s.dtype),
        batches=DevicePrefetcher(loader, s.device),
    )


def more_seed_curves(s: Session, *, progress: ProgressFile) -> tuple[Session, list[SeedCurve]]:
    """The curves of the seeds after runtime.seed, `trial.seeds - 1` of them, each trained as
    the first was (its warm-up and window). A seed whose loss goes non-finite records why and the
    next one trains; any other failure is recorded and ends the seeds (the session may be
    broken), the first seed's result kept. Returns the session last used (to close)."""
    curves: list[SeedCurve] = []
    first = s.cfg.runtime.seed
    for seed in range(first + 1, first + s.cfg.trial.seeds):
        start = time.perf_counter()
        s = reseed(s, seed)
        log.info("seed %d: training its loss curve in this process (weights drawn again)", seed)
        try:
            raw = measure(s, reporter=None, progress=progress)
        except FloatingPointError as exc:  # the curve went non-finite: this seed's result
            log.warning("seed %d: %s", seed, exc)
            curves.append({"seed": seed, "failed": str(exc), "wall_s": _since(start)})
            continue
        except Exception as exc:  # the first seed's curve stands: said, not raised
            log.error("seed %d: its curve run failed, no later seed trains: %r", seed, exc)
            curves.append({"seed": seed, "failed": repr(exc), "wall_s": _since(start)})
            break
        curves.append(
            {
                "seed": seed,
                "steps": raw["losses"],
                "lr": raw["lrs"],
                "wall_s": _since(start),
                # 0 where the graphs were reused, as they should be
                "frames_compiled": int(raw["warmup_compile"]["frames_compiled"])
                + int(raw["window_compile"]["frames_compiled"]),
            }
        )
    return s, curves


def _since(start: float) -> float:
    return round(time.perf_counter() - start, 3)
