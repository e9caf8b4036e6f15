"""Where each figure that prices a GPU plan comes from (sweeper/plan/price_sources.py): measured on
that kind of GPU, measured elsewhere, or assumed, each measured one traced to a file."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

import sweeper.plan.price_sources as price_sources_module
from sweeper.forecast import costs
from sweeper.forecast.costs import H200_STEP_CV
from sweeper.plan.price_sources import BASES, price_sources

H200, H100, A100 = "NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"


def _by_what(device: str) -> dict:
    return {s.what: s for s in price_sources(device_name=device, device_type="cuda", n_layer=48)}


@pytest.mark.parametrize(
    ("device", "what", "value", "basis"),
    [
        (H200, "trial set-up", 26.6, "measured"),
        (H200, "cold compile, bf16 model", 62.9, "measured"),
        (H200, "float8 compile factor", 163.2 / 62.9, "measured"),
        (H200, "compiled step MFU", 0.5, "measured"),
        (H200, "eager step MFU", 0.3, "measured elsewhere"),
        (H200, "step-time CV", 0.0049, "measured"),
        (H100, "step-time CV", 0.0049, "measured elsewhere"),
        # the H100's own set-up and compile (2026-11-23) left no raw file: the H200's price it
        (H100, "trial set-up", 26.6, "measured elsewhere"),
        (H100, "cold compile, bf16 model", 62.9, "measured elsewhere"),
        (H100, "cached compile, bf16 model", 5.2, "measured elsewhere"),
        (H100, "float8 compile factor", 163.2 / 62.9, "measured elsewhere"),
        (H100, "compiled step MFU", 0.5, "measured elsewhere"),
        (H100, "eager step MFU", 0.3, "measured"),
        (A100, "trial set-up", 26.6, "measured elsewhere"),
        (A100, "autotune factor", 3.0, "assumed"),
    ],
)
def test_each_figure_and_its_basis(device, what, value, basis) -> None:
    source = _by_what(device)[what]
    assert source.value == pytest.approx(value, rel=1e-3)
    assert source.basis == basis


@pytest.mark.parametrize("device", [H200, H100, A100])
def test_every_measured_figure_names_its_file(device) -> None:
    sources = list(_by_what(device).values())
    assert {s.basis for s in sources} <= set(BASES)
    for s in sources:
        if s.basis != "assumed":
            assert re.search(r"docs/|DESIGN\.md", s.source), s


@pytest.mark.parametrize("device", [H200, H100, A100])
def test_a_gpu_trials_costs_rest_on_raw_files(device) -> None:
    """Set-up and compile price most of a GPU plan: on every GPU they come from a run whose raw
    files are kept (docs/gpu/), never from a figure recorded without one."""
    for what in ("trial set-up", "cold compile, bf16 model", "cached compile, bf16 model"):
        source = _by_what(device)[what].source
        assert "docs/gpu/" in source and "no raw file" not in source, (what, source)


def test_the_h200s_compile_figures_scale_with_depth() -> None:
    half = price_sources(device_name=H200, device_type="cuda", n_layer=24)
    cold = next(s for s in half if s.what == "cold compile, bf16 model")
    assert cold.value == pytest.approx(62.9 / 2)


def test_a_cpu_plan_lists_none() -> None:
    assert price_sources(device_name="cpu", device_type="cpu", n_layer=2) == []


def test_the_gpu_step_cv_is_the_largest_the_h200_run_measured() -> None:
    # traced to its raw files: each result's step_time_s.cv (2-3 steps of gpt2-xl each)
    run = Path(__file__).resolve().parents[2] / "docs" / "gpu" / "2026-11-26-h200"
    cvs = [json.loads(p.read_text())["step_time_s"]["cv"] for p in sorted(run.glob("*.json"))]
    assert len(cvs) == 5
    assert max(cvs) == pytest.approx(H200_STEP_CV, abs=5e-5)


def test_the_quoted_measurements_are_the_costs_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cached-compile and float8 sources quote what the device's costs say was measured (the
    H200's runs), and nothing for costs that hold no such detail: never another GPU's literals."""
    h200 = _by_what(H200)
    assert h200["cached compile, bf16 model"].source.endswith("(5.2 s, 5.2 s), scaled by depth")
    assert h200["float8 compile factor"].source.endswith("(163.2 s against 62.9 s)")
    bare = dataclasses.replace(costs.H200, warm_detail="", float8_detail="")
    monkeypatch.setattr(price_sources_module, "costs_for", lambda name: bare)
    sources = {
        s.what: s.source for s in price_sources(device_name=H200, device_type="cuda", n_layer=48)
    }
    assert "(" not in sources["cached compile, bf16 model"]
    assert "(" not in sources["float8 compile factor"]


def test_the_measured_table_is_keyed_by_each_costs_own_chip() -> None:
    assert costs.MEASURED and all(k == c.measured_on for k, c in costs.MEASURED.items())
