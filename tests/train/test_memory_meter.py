"""The tensor-peak meter (train/measure/memory_meter.py) and the trial result's `memory` entry."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from train.measure.memory_meter import CPU_METHOD, PeakMemory, measure_memory
from train.trial.measurement import run_trial

MIB = 2**20


def _mib(n: int) -> torch.Tensor:
    return torch.empty(n * MIB, dtype=torch.uint8)


def test_cpu_peak_counts_storages_once_and_frees_them() -> None:
    before = _mib(1)  # alive before the window: registered, not seen by the dispatcher
    meter = PeakMemory(torch.device("cpu"))
    meter.track([before, before[: MIB // 2]])  # a view of it adds nothing
    with meter:
        big = _mib(2)
        view = big.view(2, MIB)  # same storage
        del big, view  # freed: the live count drops again
        small = torch.zeros(MIB, dtype=torch.uint8)
        small.add_(1)  # in place: no new storage
    assert meter.measured_by == CPU_METHOD
    assert meter.measured_gib == pytest.approx(3 * MIB / 2**30)  # 1 + 2 at the peak
    assert small.sum().item() == MIB


def test_peak_restarts_at_the_live_bytes() -> None:
    meter = PeakMemory(torch.device("cpu"))
    with meter:
        kept = _mib(2)
        temp = _mib(4)
        del temp
    with meter:  # a new window: the earlier 6 MiB peak is gone, the 2 MiB kept are not
        other = _mib(1)
    assert meter.measured_gib == pytest.approx(3 * MIB / 2**30)
    assert kept.numel() + other.numel() == 3 * MIB


def test_start_and_stop_in_the_wrong_order_raise() -> None:
    meter = PeakMemory(torch.device("cpu"))
    with pytest.raises(RuntimeError, match="before start"):
        meter.stop()
    meter.start()
    with pytest.raises(RuntimeError, match="twice"):
        meter.start()
    meter.stop()


def test_other_devices_are_not_measured() -> None:
    meter = PeakMemory(torch.device("meta"))
    with meter:
        torch.empty(10, device="meta")
    assert meter.measured_gib is None and meter.measured_by is None


def test_trial_result_carries_predicted_and_measured_memory(make_config, tmp_path: Path) -> None:
    cfg = make_config("runtime.device=cpu", "runtime.dtype=fp32")
    result = run_trial(cfg, out_path=tmp_path / "trial.json")
    assert result["status"] == "complete", result["failure"]
    memory = result["memory"]
    assert set(memory) == {"predicted_gib", "measured_gib", "measured_by"}
    assert memory["measured_by"] == CPU_METHOD
    assert memory["predicted_gib"] == pytest.approx(memory["measured_gib"], rel=0.15)
    assert result["peak_memory_gib"] is not None  # the older key stays


def test_failed_trial_keeps_the_prediction(make_config, tmp_path: Path) -> None:
    cfg = make_config("runtime.device=cpu", "hooks.fault=crash")
    result = run_trial(cfg, out_path=tmp_path / "trial.json")
    assert result["status"] == "failed"
    memory = result["memory"]
    assert memory["predicted_gib"] > 0
    assert memory["measured_gib"] is None and memory["measured_by"] is None


def test_compiled_cpu_model_is_not_measured(make_config) -> None:
    from train.run.loop import build_session

    s = build_session(make_config("runtime.device=cpu"))
    steps: list[int] = []
    try:
        # under a dispatch mode Dynamo would run the model eagerly: an eager number under a
        # compiled label, so none is reported (the session itself stays eager here: no compile)
        s.cfg.runtime.compile = "default"
        memory = measure_memory(s, step=steps.append)
    finally:
        s.batches.close()
        s.checkpointer.close()
    assert memory["predicted_gib"] > 0
    assert memory["measured_gib"] is None and memory["measured_by"] is None
    assert steps == []  # and no extra step was taken


def test_cpu_meter_counts_the_callers_step_of_two_micro_batches_at_most(make_config) -> None:
    """The meter runs the caller's step (it never imports the training loop), with
    min(2, grad_accum) micro-batches: two reach a step's peak."""
    from train.run.loop import build_session

    s = build_session(make_config("runtime.device=cpu", "runtime.dtype=fp32"))
    steps: list[int] = []
    try:
        memory = measure_memory(s, step=lambda n: (steps.append(n), _mib(3)))
    finally:
        s.batches.close()
        s.checkpointer.close()
    assert steps == [min(2, s.cfg.batch.grad_accum)]
    assert memory["measured_by"] == CPU_METHOD
    assert memory["measured_gib"] >= 3 * MIB / 2**30  # the step's 3 MiB, freed inside it
