"""train/measure/nvml.py: the sampler against a fake pynvml module and the real one (no GPU)."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import pytest

from train.measure import nvml as nvml_mod
from train.measure.nvml import NvmlSampler, nvml_target


class FakeNVMLError(Exception):
    pass


class FakeNvml:
    """Just enough of pynvml: each metric call pops its next value; an exhausted list raises."""

    NVMLError = FakeNVMLError
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(
        self,
        *,
        util: list[float] | None = None,
        fail_init: bool = False,
        unsupported: tuple[str, ...] = (),
    ) -> None:
        # None = constant values forever; a list = those values, then an error (GPU "lost").
        self.util = util
        self.fail_init = fail_init
        self.unsupported = unsupported
        self.calls: list[str] = []
        self.handle_index: int | None = None

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.fail_init:
            raise FakeNVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        self.handle_index = index
        return f"handle{index}"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        raise FakeNVMLError(f"no device {uuid}")

    def _check(self, name: str) -> None:
        if name in self.unsupported:
            raise FakeNVMLError("Not Supported")

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> SimpleNamespace:
        self._check("util")
        if self.util is None:
            return SimpleNamespace(gpu=80, memory=30)
        if not self.util:
            raise FakeNVMLError("GPU is lost")
        return SimpleNamespace(gpu=self.util.pop(0), memory=0)

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:
        assert clock == self.NVML_CLOCK_SM
        return 1980

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        self._check("power")
        return 350_000  # mW

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> SimpleNamespace:
        return SimpleNamespace(used=3 * 2**30, total=80 * 2**30, free=77 * 2**30)

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        return 65


def _wait_for(predicate, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the sampler"
        time.sleep(0.005)


def test_samples_are_collected_and_summarised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake = FakeNvml()
    with NvmlSampler(device_index=0, interval_s=0.005, nvml=fake) as sampler:
        _wait_for(lambda: len(sampler.samples) >= 3)
        assert sampler.running
    assert not sampler.running  # the thread is joined on exit
    summary = sampler.summary()
    assert summary is not None and summary["n"] >= 3
    assert summary["sm_util_pct"] == {"mean": 80.0, "p50": 80.0, "min": 80.0, "max": 80.0}
    assert summary["sm_clock_mhz"]["p50"] == 1980.0
    assert summary["power_w"]["mean"] == pytest.approx(350.0)
    assert summary["mem_used_gib"] == {"max": 3.0}
    assert summary["temp_c"] == {"max": 65.0}
    assert fake.calls == ["init", "shutdown"]
    n_at_exit = summary["n"]
    time.sleep(0.03)
    assert len(sampler.samples) == n_at_exit  # nothing sampled after exit


def test_error_mid_sampling_stops_gracefully(caplog: pytest.LogCaptureFixture) -> None:
    # The first value is consumed by the start-up probe; the thread then sees 20, 30, 40, error.
    fake = FakeNvml(util=[10, 20, 30, 40])
    with (
        caplog.at_level(logging.INFO, logger="train.measure.nvml"),
        NvmlSampler(interval_s=0.001, nvml=fake) as sampler,
    ):
        _wait_for(lambda: not sampler.running)
    summary = sampler.summary()
    assert summary is not None and summary["n"] == 3
    assert summary["sm_util_pct"] == {"mean": 30.0, "p50": 30.0, "min": 20.0, "max": 40.0}
    assert any("stopped after 3 samples" in r.getMessage() for r in caplog.records)
    assert fake.calls == ["init", "shutdown"]


def test_nvml_error_at_init_gives_none_and_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml(fail_init=True)
    with (
        caplog.at_level(logging.INFO, logger="train.measure.nvml"),
        NvmlSampler(nvml=fake) as sampler,
    ):
        pass
    assert sampler.summary() is None
    records = [r for r in caplog.records if r.name == "train.measure.nvml"]
    assert len(records) == 1 and records[0].levelno == logging.INFO
    assert "NVML Shared Library Not Found" in records[0].getMessage()
    assert "shutdown" not in fake.calls  # init failed, so nothing to release


def test_unsupported_metric_is_dropped_not_fatal() -> None:
    fake = FakeNvml(unsupported=("power",))
    with NvmlSampler(interval_s=0.005, nvml=fake) as sampler:
        _wait_for(lambda: len(sampler.samples) >= 1)
    summary = sampler.summary()
    assert summary is not None and "power_w" not in summary and "sm_util_pct" in summary


def test_import_error_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(nvml_mod, "_import_pynvml", missing)
    with NvmlSampler() as sampler:
        pass
    assert sampler.summary() is None
    assert sampler.unavailable_reason is not None and "pynvml" in sampler.unavailable_reason


@pytest.mark.parametrize(
    ("cuda_index", "visible", "expected"),
    [
        (0, None, 0),
        (1, "", 1),
        (0, "3,1", 3),
        (1, "3, 1", 1),
        (0, "GPU-8f3a2c1e-0000-1111-2222-333344445555", "GPU-8f3a2c1e-0000-1111-2222-333344445555"),
    ],
)
def test_nvml_target(cuda_index: int, visible: str | None, expected: int | str) -> None:
    assert nvml_target(cuda_index, visible) == expected


def test_nvml_target_out_of_range() -> None:
    with pytest.raises(ValueError, match=r"CUDA device 2 is not in CUDA_VISIBLE_DEVICES='0,1'"):
        nvml_target(2, "0,1")


def test_visible_devices_remap_the_handle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    fake = FakeNvml()
    with NvmlSampler(device_index=1, interval_s=0.01, nvml=fake):
        pass
    assert fake.handle_index == 5


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"interval_s": 0}, "interval_s must be > 0"),
        ({"device_index": -1}, "device_index must be >= 0"),
    ],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        NvmlSampler(**kwargs)


def test_real_pynvml_without_gpu_is_silent_none() -> None:
    pytest.importorskip("pynvml")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; the no-GPU path is what is tested here")
    with NvmlSampler(device_index=0, interval_s=0.01) as sampler:
        time.sleep(0.02)
    assert sampler.summary() is None
    assert not sampler.running
