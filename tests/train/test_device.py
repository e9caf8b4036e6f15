"""train/device.py and train/measure/ceiling.py: device choice, autocast, TF32,
scaler, memory, threads, matmul ceiling (on a CPU machine; GPU-only cases are marked)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from train import device as dev
from train.measure import ceiling

HAS_CUDA = torch.cuda.is_available()


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend two CUDA devices are visible so the resolution logic runs without a GPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


@pytest.mark.parametrize(
    ("requested", "expected"),
    [("cpu", torch.device("cpu")), ("auto", torch.device("cuda" if HAS_CUDA else "cpu"))],
)
def test_resolve_device_real(requested: str, expected: torch.device) -> None:
    assert dev.resolve_device(requested).type == expected.type


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-CUDA error")
@pytest.mark.parametrize("requested", ["cuda", "cuda:0", "cuda:3"])
def test_resolve_device_cuda_without_cuda_raises(requested: str) -> None:
    with pytest.raises(ValueError, match=r"torch.cuda.is_available\(\) is False.*auto or cpu"):
        dev.resolve_device(requested)


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        ("auto", torch.device("cuda", 0)),
        ("cuda", torch.device("cuda", 0)),
        ("cuda:1", torch.device("cuda", 1)),
        ("cpu", torch.device("cpu")),
    ],
)
def test_resolve_device_with_fake_cuda(fake_cuda: None, requested: str, expected) -> None:
    assert dev.resolve_device(requested) == expected


@pytest.mark.parametrize(
    ("requested", "match"),
    [
        ("cuda:2", r"only 2 CUDA device\(s\).*0\.\.1"),
        ("gpu", "must be one of 'auto', 'cpu', 'cuda' or 'cuda:N'"),
        ("cuda:x", "must be one of"),
        ("", "must be one of"),
    ],
)
def test_resolve_device_bad_requests(fake_cuda: None, requested: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dev.resolve_device(requested)


def test_device_name_cpu_is_nonempty_and_matches_cpu_model() -> None:
    name = dev.device_name(torch.device("cpu"))
    assert name and name == dev.cpu_model_name()


def test_sync_on_cpu_is_a_noop() -> None:
    assert dev.sync(torch.device("cpu")) is None


@pytest.mark.parametrize(("dtype", "expected"), [("bf16", torch.bfloat16), ("fp32", torch.float32)])
def test_autocast_cpu_output_dtype(dtype: str, expected: torch.dtype) -> None:
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with dev.autocast(torch.device("cpu"), dtype):
        out = a @ b
    assert out.dtype == expected


@pytest.mark.parametrize(
    ("dtype", "match"),
    [("fp16", "not supported on CPU; use bf16 or fp32"), ("fp8", "runtime.dtype must be one of")],
)
def test_autocast_cpu_rejects(dtype: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dev.autocast(torch.device("cpu"), dtype)


def test_autocast_bf16_on_cuda_without_bf16_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    # The check runs before any CUDA call that would need a real GPU.
    monkeypatch.setattr(dev, "_cuda_bf16_supported", lambda device: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100")
    with pytest.raises(ValueError, match=r"Tesla V100 has no native bf16.*use fp16 or fp32"):
        dev.autocast(torch.device("cuda", 0), "bf16")


NEW_TF32_API = hasattr(torch.backends, "fp32_precision")  # torch >= 2.9


@pytest.mark.skipif(not NEW_TF32_API, reason="torch < 2.9 has no fp32_precision API")
@pytest.mark.parametrize("enabled", [True, False])
def test_set_tf32_new_api_round_trip_keeps_every_reader_answering(enabled: bool) -> None:
    """torch >= 2.9: the per-backend precisions are set, and the legacy readers Inductor still
    uses answer (torch.compile(mode="max-autotune") raised "mix of the legacy and new APIs" on an
    H100 with torch 2.11 when only torch.backends.cuda.matmul.fp32_precision was written)."""
    before = dev.tf32_state()
    onednn_before = torch.backends.mkldnn.matmul.fp32_precision
    previous = dev.set_tf32(enabled)
    try:
        assert previous == before
        assert dev.tf32_state() == dev.Tf32State(matmul=enabled, cudnn=enabled)
        precision = "tf32" if enabled else "ieee"
        assert torch.backends.cuda.matmul.fp32_precision == precision
        assert torch.backends.cudnn.conv.fp32_precision == precision
        assert torch.backends.cudnn.rnn.fp32_precision == precision
        assert torch.get_float32_matmul_precision() == ("high" if enabled else "highest")
        assert torch.backends.cuda.matmul.allow_tf32 is enabled
        assert torch.backends.mkldnn.matmul.fp32_precision == onednn_before  # CPU untouched
    finally:
        dev.set_tf32(previous)
    assert dev.tf32_state() == before


def test_set_tf32_old_torch_uses_the_allow_tf32_switches_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch < 2.9 (faked): the two allow_tf32 switches, and nothing of the newer API."""
    matmul = SimpleNamespace(allow_tf32=False)
    cudnn = SimpleNamespace(allow_tf32=True)
    monkeypatch.setattr(dev, "_has_fp32_precision_api", lambda: False)
    monkeypatch.setattr(torch.backends.cuda, "matmul", matmul)
    monkeypatch.setattr(torch.backends, "cudnn", cudnn)
    monkeypatch.setattr(torch, "set_float32_matmul_precision", _must_not_be_called)
    previous = dev.set_tf32(True)
    assert previous == dev.Tf32State(matmul=False, cudnn=True)
    assert matmul.allow_tf32 is True and cudnn.allow_tf32 is True
    assert dev.set_tf32(dev.Tf32State(matmul=False, cudnn=False)) == dev.Tf32State(
        matmul=True, cudnn=True
    )
    assert matmul.allow_tf32 is False and cudnn.allow_tf32 is False


def _must_not_be_called(*args: object, **kwargs: object) -> None:
    raise AssertionError("called")


def test_use_device_makes_a_cuda_device_current(monkeypatch: pytest.MonkeyPatch) -> None:
    chosen: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    dev.use_device(torch.device("cuda", 1))
    dev.use_device(torch.device("cpu"))
    assert chosen == [torch.device("cuda", 1)]


@pytest.mark.parametrize(
    ("device", "dtype", "enabled"),
    [
        (torch.device("cpu"), "fp32", False),
        (torch.device("cpu"), "bf16", False),
        (torch.device("cuda", 0), "bf16", False),
        (torch.device("cuda", 0), "fp32", False),
        pytest.param(
            torch.device("cuda", 0),
            "fp16",
            True,
            marks=[pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")],
        ),
    ],
)
def test_grad_scaler_enabled_only_for_cuda_fp16(device, dtype: str, enabled: bool) -> None:
    assert dev.grad_scaler(device, dtype).is_enabled() is enabled


def test_grad_scaler_cuda_fp16_asks_for_scaling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a GPU, check the decision itself: GradScaler is constructed with enabled=True."""
    seen: dict = {}

    class Recorder:
        def __init__(self, device: str, *, enabled: bool) -> None:
            seen.update(device=device, enabled=enabled)

    monkeypatch.setattr(torch.amp, "GradScaler", Recorder)
    dev.grad_scaler(torch.device("cuda", 0), "fp16")
    assert seen == {"device": "cuda", "enabled": True}


def test_peak_memory_on_cpu_is_host_rss_and_grows() -> None:
    cpu = torch.device("cpu")
    dev.reset_peak_memory(cpu)
    before = dev.peak_memory_gib(cpu)
    assert before is not None and before.kind == "host_rss_peak" and before.gib > 0
    block = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched so it is resident
    after = dev.peak_memory_gib(cpu)
    del block
    assert after is not None
    # With a working reset (Linux VmHWM) the window starts near current RSS, so 64 MiB shows.
    assert after.gib >= before.gib + (0.0 if before.whole_process else 0.04)


def test_peak_memory_unknown_device_is_none() -> None:
    assert dev.peak_memory_gib(torch.device("meta")) is None


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
def test_peak_memory_cuda() -> None:
    cuda = torch.device("cuda", torch.cuda.current_device())
    dev.reset_peak_memory(cuda)
    block = torch.ones(2**28, device=cuda)  # 1 GiB of fp32
    reading = dev.peak_memory_gib(cuda)
    del block
    assert reading is not None and reading.kind == "cuda_allocated" and reading.gib >= 1.0


def test_set_threads() -> None:
    with dev.restored_threads():
        default = torch.get_num_threads()
        assert dev.set_threads(0) == default
        assert dev.set_threads(1) == 1 == torch.get_num_threads()
    assert torch.get_num_threads() == default


def test_set_threads_negative_raises() -> None:
    with pytest.raises(ValueError, match=r"runtime.threads must be >= 0.*got -1"):
        dev.set_threads(-1)


# -- train/measure/ceiling.py (the measured matmul ceiling) ------------------------------------


def _ceiling(path: Path, dtype: str = "fp32", **kwargs) -> ceiling.Ceiling:
    # A small fixed size keeps each measurement well under a second on 2 shared cores.
    kwargs.setdefault("size", 128)
    return ceiling.measure_matmul_ceiling(
        torch.device("cpu"), dtype, min_time_s=0.02, cache_path=path, **kwargs
    )


def test_ceiling_is_plausible_and_cached(tmp_path: Path) -> None:
    path = tmp_path / "ceiling.json"
    first = _ceiling(path)
    # A 2-core CPU does between ~0.01 and ~1000 GFLOP/s in fp32, whatever the load.
    assert not first.cached and 1e7 < first.flops < 1e12
    assert "linear 128^3 fp32" in first.source
    second = _ceiling(path)
    assert second == ceiling.Ceiling(flops=first.flops, source=first.source, cached=True)
    entries = json.loads(path.read_text())["entries"]
    assert len(entries) == 1 and "|fp32|" in next(iter(entries))


def test_ceiling_cache_key_separates_dtype_and_threads(tmp_path: Path) -> None:
    path = tmp_path / "ceiling.json"
    _ceiling(path, "fp32")
    assert not _ceiling(path, "bf16").cached
    with dev.restored_threads():
        torch.set_num_threads(1)
        assert not _ceiling(path, "fp32").cached
    assert len(json.loads(path.read_text())["entries"]) == 3


@pytest.mark.parametrize("content", ["{not json", '["a list"]', '{"version": 99, "entries": {}}'])
def test_ceiling_corrupt_cache_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str
) -> None:
    path = tmp_path / "ceiling.json"
    path.write_text(content)
    with caplog.at_level(logging.WARNING, logger="train.measure.ceiling"):
        result = _ceiling(path)
    assert not result.cached and result.flops > 0
    assert any("ignoring" in r.getMessage() for r in caplog.records)
    assert json.loads(path.read_text())["version"] == 1  # rewritten whole, not appended to


def test_ceiling_use_cache_false_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "ceiling.json"
    assert _ceiling(path, use_cache=False).flops > 0
    assert not path.exists()


def test_ceiling_auto_size_stays_fast(tmp_path: Path) -> None:
    result = _ceiling(tmp_path / "c.json", size=None)
    assert result.flops > 0 and "linear" in result.source


def test_ceiling_default_path_respects_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert ceiling.default_cache_path() == tmp_path / "throughput-sweep" / "ceiling.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert ceiling.default_cache_path() == Path.home() / ".cache/throughput-sweep/ceiling.json"


@pytest.mark.parametrize(
    ("dtype", "kwargs", "match"),
    [
        ("fp16", {}, "not supported on CPU; use bf16 or fp32"),
        ("int8", {}, "dtype must be one of"),
        ("fp32", {"size": 0}, "size must be >= 1"),
        ("fp32", {"min_time_s": 0.0}, "min_time_s must be > 0"),
    ],
)
def test_ceiling_rejects(tmp_path: Path, dtype: str, kwargs: dict, match: str) -> None:
    kwargs = {"size": 128, "min_time_s": 0.02, **kwargs}
    with pytest.raises(ValueError, match=match):
        ceiling.measure_matmul_ceiling(
            torch.device("cpu"), dtype, cache_path=tmp_path / "c.json", **kwargs
        )


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
def test_ceiling_cuda_bf16_is_teraflops(tmp_path: Path) -> None:
    result = ceiling.measure_matmul_ceiling(
        torch.device("cuda", 0), "bf16", cache_path=tmp_path / "c.json"
    )
    assert result.flops > 1e13  # any bf16-capable GPU does > 10 TFLOP/s on an 8192 matmul


def test_ceiling_refresh_measures_and_replaces_a_low_entry(tmp_path: Path) -> None:
    path = tmp_path / "ceiling.json"
    first = _ceiling(path)
    doc = json.loads(path.read_text())
    (key,) = doc["entries"]
    doc["entries"][key]["flops"] = 1.0  # a ceiling measured while the machine was busy
    path.write_text(json.dumps(doc))
    assert _ceiling(path).flops == 1.0  # the cache is trusted as it is
    fresh = _ceiling(path, refresh=True)
    assert not fresh.cached and fresh.flops > 1e6
    assert json.loads(path.read_text())["entries"][key]["flops"] == fresh.flops
    assert first.flops > 1e6


@pytest.mark.parametrize(
    ("cached", "mfu_ceiling", "stale"),
    [
        (True, 1.15, True),
        (True, 1.0, False),
        (True, 0.4, False),
        (False, 1.15, False),
        (True, None, False),
    ],
)
def test_a_cached_ceiling_the_step_beat_is_stale(cached: bool, mfu_ceiling, stale: bool) -> None:
    c = ceiling.Ceiling(flops=1e9, source="linear", cached=cached)
    assert ceiling.is_stale(c, mfu_ceiling) is stale
