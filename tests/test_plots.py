"""Sweep plots: the PNG summary (content and file) and Optuna's HTML views of a small study."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import matplotlib.image
import optuna
import pytest

from sweeper.report.plots import knob_groups, optuna_html, summary_figure, summary_png

FRACS = {"compute": 0.7, "data_wait": 0.15, "optimizer": 0.1, "checkpoint": 0.0, "other": 0.05}


def rows(floor: float | None) -> list[dict]:
    return [
        {"label": "#3 mb=8", "step_time_s": 0.5, "time_frac": FRACS, "floor_step_s": floor},
        {"label": "#7 mb=4", "step_time_s": 0.6, "time_frac": FRACS, "floor_step_s": floor},
    ]


def trials() -> list[dict]:
    out = []
    for i in range(12):
        out.append(
            {
                "params": {
                    "data.num_workers": i % 3,
                    "runtime.compile": ["none", "default"][i % 2],
                    "optim.lr": 1e-4 * (i + 1),
                },
                "tokens_per_s": 1000.0 + 100 * i if i != 11 else None,
                "state": "pruned" if i == 5 else ("failed" if i == 11 else "complete"),
            }
        )
    return out


def test_knob_groups_group_by_value_and_bin_many_numeric_values() -> None:
    groups = {label: (done, pruned) for label, done, pruned in knob_groups(trials())}
    assert groups["data.num_workers = 0"] == ([1000.0, 1300.0, 1600.0, 1900.0], [])
    assert groups["data.num_workers = 2"] == ([1200.0, 1800.0], [1500.0])  # 11 failed: no tokens/s
    assert "runtime.compile = none" in groups
    lr_groups = [g for g in groups if g.startswith("optim.lr")]
    assert len(lr_groups) == 5  # 11 distinct learning rates > 8, binned into 5 ranges
    assert sum(len(groups[g][0]) + len(groups[g][1]) for g in lr_groups) == 11  # failed one out


@pytest.mark.parametrize(
    ("floor", "legend_has", "legend_lacks"),
    [
        (0.2, "100%-MFU floor", "no spec peak"),
        (None, "100%-MFU floor: no spec peak", None),
    ],
)
def test_summary_figure_legend_states_the_floor(floor, legend_has, legend_lacks) -> None:
    fig = summary_figure(rows(floor), trials())
    _, ax_time = fig.axes[:2]
    texts = [t.get_text() for t in ax_time.get_legend().get_texts()]
    assert legend_has in texts
    assert "data wait" in texts
    if legend_lacks:
        assert not any(legend_lacks in t for t in texts)
    # stacked bars: 5 segments per config; the compute segment of the first row is 0.7 * 0.5 s
    bars = ax_time.patches
    assert len(bars) == 5 * 2
    assert bars[0].get_width() == pytest.approx(0.35)
    assert bars[1].get_x() == pytest.approx(0.35)


def test_summary_png_is_written_and_readable(tmp_path: Path) -> None:
    path = summary_png(rows(0.2), trials(), tmp_path / "plots" / "summary.png")
    assert path.is_file()
    assert path.stat().st_size > 20_000
    img = matplotlib.image.imread(path)
    height, width, channels = img.shape
    assert width > 1000 and height > 300 and channels in (3, 4)
    assert img.std() > 0.05  # not a blank canvas


def test_summary_png_with_nothing_measured(tmp_path: Path) -> None:
    path = summary_png([], [], tmp_path / "empty.png")
    assert matplotlib.image.imread(path).shape[0] > 100


@pytest.fixture
def small_study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))

    def objective(trial: optuna.Trial) -> float:
        workers = trial.suggest_categorical("data.num_workers", [0, 1, 2])
        micro = trial.suggest_int("batch.micro_batch", 1, 8, log=True)
        return 1000.0 + 50 * workers + 30 * micro

    study.optimize(objective, n_trials=6)
    return study


def test_optuna_html_writes_offline_files(small_study: optuna.Study, tmp_path: Path) -> None:
    paths = optuna_html(small_study, tmp_path / "html")
    assert [p.name for p in paths] == [
        "optimization_history.html",
        "param_importances.html",
        "parallel_coordinate.html",
        "slice.html",
    ]
    for p in paths:
        text = p.read_text()
        assert not re.search(r"<script[^>]*\bsrc=", text)  # nothing fetched: opens offline
        assert "plotly.js v" in text  # the library's own banner: it is embedded
        assert len(text) > 1_000_000


def test_optuna_html_skips_importances_without_enough_trials(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="sweeper.report.plots")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study()
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    names = [p.name for p in optuna_html(study, tmp_path)]
    assert "param_importances.html" not in names
    assert "optimization_history.html" in names
    assert "skipping param importances" in caplog.text
