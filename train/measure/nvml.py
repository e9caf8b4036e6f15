"""Background GPU telemetry via NVML: utilisation, SM clock, power, memory, temperature.

Sampling is best effort and must never break a training run: without NVML (a CPU machine, a
container without the driver library, a GPU that refuses a query) the sampler logs one line and
`summary()` returns None.

NVML index vs CUDA index: NVML numbers all GPUs of the machine in PCI bus order, while torch's
index counts only the GPUs in CUDA_VISIBLE_DEVICES, in CUDA_DEVICE_ORDER (FASTEST_FIRST by
default). We therefore first ask torch for the device's UUID and look that up in NVML, which
is exact. Failing that, plain integers in CUDA_VISIBLE_DEVICES map index i to entry i (exact only
with CUDA_DEVICE_ORDER=PCI_BUS_ID on mixed-GPU machines), and UUID entries are looked up as
given. Limitation: abbreviated UUID prefixes and MIG instances (which NVML reports no per-
instance utilisation for) are not resolved; the sampler then logs why and stays empty.
"""

from __future__ import annotations

import logging
import os
import statistics
import threading
from collections.abc import Callable
from types import ModuleType, TracebackType
from typing import Any

import torch

from train.core.units import GIB

log = logging.getLogger(__name__)


class NvmlSampler:
    """`with NvmlSampler(device_index=0) as s: train(); s.summary()`."""

    def __init__(
        self,
        device_index: int = 0,
        *,
        interval_s: float = 0.1,
        nvml: ModuleType | Any | None = None,
        uuid: str | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        if device_index < 0:
            raise ValueError(f"device_index must be >= 0, got {device_index}")
        # torch's CUDA index (what the trainer knows), not NVML's.
        self.device_index = device_index
        # Seconds between samples; NVML's own utilisation window is 1/6 s to 1 s depending on GPU.
        self.interval_s = interval_s
        self._nvml = nvml
        self._uuid = uuid
        self._samples: list[dict[str, float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._initialised = False
        self._readers: dict[str, Callable[[], float]] = {}
        # Why there are no samples (None while sampling works); for logs and tests.
        self.unavailable_reason: str | None = None

    # -- context manager -------------------------------------------------------------------

    def __enter__(self) -> NvmlSampler:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Open NVML and start the sampling thread; on any failure, log once and do nothing."""
        try:
            nvml = self._nvml if self._nvml is not None else _import_pynvml()
            self._nvml = nvml
            nvml.nvmlInit()
            self._initialised = True
            handle = self._open_handle(nvml)
            self._readers = self._probe_readers(nvml, handle)
        except Exception as err:  # NVMLError, ImportError, or anything odd: never into the trainer
            self._give_up(f"{type(err).__name__}: {err}")
            return
        if not self._readers:
            self._give_up("no NVML metric is supported on this device")
            return
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop and join the thread, then release NVML (init/shutdown are reference counted)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._initialised:
            self._initialised = False
            try:
                self._nvml.nvmlShutdown()
            except Exception as err:
                log.debug("nvmlShutdown failed: %s", err)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- results ---------------------------------------------------------------------------

    @property
    def samples(self) -> list[dict[str, float]]:
        """A copy of the raw samples, one dict per tick (metric name -> value)."""
        with self._lock:
            return [dict(s) for s in self._samples]

    def summary(self) -> dict[str, Any] | None:
        """Per-metric mean/p50/min/max (memory and temperature: max only), or None if empty."""
        samples = self.samples
        if not samples:
            return None
        out: dict[str, Any] = {"n": len(samples)}
        for name in self._readers:
            values = [s[name] for s in samples if name in s]
            if not values:
                continue
            if name in ("mem_used_gib", "temp_c"):
                out[name] = {"max": max(values)}
            else:
                out[name] = {
                    "mean": statistics.fmean(values),
                    "p50": statistics.median(values),
                    "min": min(values),
                    "max": max(values),
                }
        return out

    # -- internals -------------------------------------------------------------------------

    def _give_up(self, reason: str) -> None:
        self.unavailable_reason = reason
        log.info(
            "GPU telemetry off (NVML unavailable for CUDA device %d): %s", self.device_index, reason
        )
        self.stop()

    def _open_handle(self, nvml: Any) -> Any:
        uuid = self._uuid or _torch_uuid(self.device_index)
        if uuid is not None:
            try:
                return nvml.nvmlDeviceGetHandleByUUID(uuid)
            except nvml.NVMLError as err:
                log.debug("NVML lookup of %s failed (%s); falling back to index", uuid, err)
        target = nvml_target(self.device_index, os.environ.get("CUDA_VISIBLE_DEVICES"))
        if isinstance(target, int):
            return nvml.nvmlDeviceGetHandleByIndex(target)
        return nvml.nvmlDeviceGetHandleByUUID(target)

    def _probe_readers(self, nvml: Any, handle: Any) -> dict[str, Callable[[], float]]:
        """Keep the metrics this device answers; e.g. power is NotSupported on some boards."""
        candidates: dict[str, Callable[[], float]] = {
            # "gpu" utilisation: % of the window in which any kernel ran (not SM occupancy).
            "sm_util_pct": lambda: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
            "sm_clock_mhz": lambda: float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            "power_w": lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,  # NVML reports mW
            "mem_used_gib": lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used / GIB,
            "temp_c": lambda: float(
                nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
            ),
        }
        readers: dict[str, Callable[[], float]] = {}
        for name, read in candidates.items():
            try:
                read()
            except nvml.NVMLError as err:
                log.debug("NVML metric %s unsupported: %s", name, err)
                continue
            readers[name] = read
        return readers

    def _run(self) -> None:
        nvml = self._nvml
        while not self._stop.is_set():
            try:
                sample = {name: read() for name, read in self._readers.items()}
            except Exception as err:  # NVMLError mid-run (GPU lost, driver reset): stop quietly
                level = logging.INFO if isinstance(err, nvml.NVMLError) else logging.WARNING
                log.log(
                    level,
                    "GPU telemetry stopped after %d samples: %s: %s",
                    len(self._samples),
                    type(err).__name__,
                    err,
                )
                return
            with self._lock:
                self._samples.append(sample)
            self._stop.wait(self.interval_s)


def nvml_target(cuda_index: int, visible: str | None) -> int | str:
    """NVML index (or UUID string) for torch's CUDA index under CUDA_VISIBLE_DEVICES=`visible`."""
    if visible is None or not visible.strip():
        return cuda_index
    entries = [e.strip() for e in visible.split(",")]
    if cuda_index >= len(entries):
        raise ValueError(
            f"CUDA device {cuda_index} is not in CUDA_VISIBLE_DEVICES={visible!r} "
            f"({len(entries)} entries)"
        )
    entry = entries[cuda_index]
    return int(entry) if entry.isdigit() else entry


def _torch_uuid(cuda_index: int) -> str | None:
    """NVML-style UUID ("GPU-xxxxxxxx-...") of torch's CUDA device, or None if unknown."""
    try:
        if not torch.cuda.is_available() or torch.version.hip:
            return None
        raw = str(torch.cuda.get_device_properties(cuda_index).uuid)
    except Exception as err:  # old torch without .uuid, or a CUDA init error
        log.debug("no CUDA UUID from torch for device %d: %s", cuda_index, err)
        return None
    return raw if raw.startswith(("GPU-", "MIG-")) else f"GPU-{raw}"


def _import_pynvml() -> ModuleType:
    import pynvml  # from the nvidia-ml-py package

    return pynvml
