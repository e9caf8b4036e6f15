"""The CUDA path, on a real GPU (skipped without one): what the CPU tests can only show with fakes.

- the event clock agrees with a synchronised host clock on real kernels;
- a training step never synchronizes inside (torch's sync debug mode raises on any implicit
  host sync: `.item()`, a blocking copy, a data-dependent shape);
- a real CUDA trial: phase split, memory measured by the allocator and predicted, projection
  against real full steps on a GPU.
Run on a GPU host with `python -m pytest -q -m gpu tests/`.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_event_clock_matches_a_synchronised_host_clock() -> None:
    from train.core.meters import EventPhaseClock

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    clock = EventPhaseClock(new_event=lambda: torch.cuda.Event(enable_timing=True))
    for _ in range(3):  # warm-up: cuBLAS handles, clocks up
        a @ a
    torch.cuda.synchronize()
    host = []
    for _ in range(5):
        t0 = time.perf_counter()
        with clock.phase("compute"):
            for _ in range(50):
                a @ a
        torch.cuda.synchronize()
        host.append(time.perf_counter() - t0)
    device = clock.take()["compute"]
    assert device == pytest.approx(sum(host), rel=0.1), (device, host)


def test_a_training_step_never_synchronizes_inside(make_config) -> None:
    from train.run.loop import build_session, finish_step, make_phase_clock, train_step

    cfg = make_config("runtime.device=cuda", "runtime.dtype=bf16", "data.num_workers=1")
    s = build_session(cfg)
    try:
        clock = make_phase_clock(s.device)
        train_step(s, lr=1e-4, clock=clock)  # first step: lazy inits may sync, that is warm-up
        finish_step(s, clock)
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(3):
                train_step(s, lr=1e-4, clock=clock)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        phases = finish_step(s, clock)
    finally:
        s.batches.close()
    assert phases["compute"] > 0 and phases["optimizer"] > 0


def test_cuda_trial_splits_time_and_measures_memory(make_config, tmp_path: Path) -> None:
    from train.trial.measurement import run_trial

    cfg = make_config("runtime.device=cuda", "runtime.dtype=bf16", "trial.max_steps=6")
    result = run_trial(cfg, out_path=tmp_path / "r.json")
    assert result["status"] == "complete", result["failure"]
    fr = result["time_frac"]
    assert sum(fr.values()) == pytest.approx(1.0)
    assert fr["compute"] > 0.2, fr
    mem = result["memory"]
    assert mem["measured_by"].startswith("cuda")
    assert mem["measured_gib"] > 0 and mem["predicted_gib"] > 0


def test_projection_agrees_with_real_full_steps_on_the_gpu(make_config, tmp_path: Path) -> None:
    """gpt2-medium, micro-batch 8 x grad_accum 16: projected from 4-micro-batch steps vs real.

    A GPU-bound size: gpt2 (124M) at micro-batch 4 is launch-bound on an H100 (~20 ms a
    micro-batch for ~8 ms of math), and its per-micro-batch time then wanders by 30% from one
    step to the next with the host (seen on the H100, 2026-11-23), projected or not."""
    from train.trial.measurement import run_trial

    common = (
        "model=gpt2-medium",
        "runtime.device=cuda",
        "runtime.dtype=bf16",
        "batch.tokens_per_step=131072",
        "batch.micro_batch=8",
        "batch.grad_accum=16",
        "trial.warmup_steps=2",
        "trial.max_steps=4",
        "trial.min_steps=4",
    )
    proj = run_trial(make_config(*common, "trial.project_above_s=1e-9"), out_path=tmp_path / "p")
    real = run_trial(make_config(*common, "trial.project_above_s=0"), out_path=tmp_path / "f")
    assert proj["status"] == real["status"] == "complete"
    assert proj["projection"] is not None and real["projection"] is None
    ratio = proj["step_time_s"]["p50"] / real["step_time_s"]["p50"]
    assert ratio == pytest.approx(1.0, abs=0.08), (proj["step_time_s"], real["step_time_s"])
