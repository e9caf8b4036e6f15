"""Sweep plots: the PNG summary (content and file) and Optuna's views of a small study as PNGs."""

from __future__ import annotations

import logging
from pathlib import Path

import matplotlib.image
import optuna
import pytest

from sweeper.report.plots import (
    knob_groups,
    optuna_pngs,
    row_label,
    summary_figure,
    summary_png,
)

FRACS = {"compute": 0.7, "data_wait": 0.15, "optimizer": 0.1, "checkpoint": 0.0, "other": 0.05}


def rows(floor: float | None) -> list[dict]:
    """Verified configs in the race's order: trial 3 won, trial 0 is the starting config."""
    return [
        {
            "trial": 3,
            "winner": True,
            "start": False,
            "tokens_per_s": 4000.0,
            "n": 3,
            "search_tokens_per_s": 4600.0,
            "search_projected": True,
            "step_time_s": 0.5,
            "time_frac": FRACS,
            "floor_step_s": floor,
        },
        {
            "trial": 0,
            "winner": False,
            "start": True,
            "tokens_per_s": 3400.0,
            "n": 3,
            "search_tokens_per_s": 3500.0,
            "search_projected": False,
            "step_time_s": 0.6,
            "time_frac": FRACS,
            "floor_step_s": floor,
        },
    ]


def trials() -> list[dict]:
    out = []
    for i in range(12):
        out.append(
            {
                "number": i,
                "params": {
                    "data.num_workers": i % 3,
                    "runtime.compile": ["none", "default"][i % 2],
                    "optim.lr": 1e-4 * (i + 1),
                },
                "tokens_per_s": 1000.0 + 100 * i if i != 11 else None,
                "state": "pruned" if i == 5 else ("failed" if i == 11 else "complete"),
                "start": i == 0,
            }
        )
    return out


def test_knob_groups_group_by_value_and_bin_many_numeric_values() -> None:
    groups = {label: (done, pruned) for label, done, pruned, _ in knob_groups(trials())}
    assert groups["data.num_workers = 0"] == ([1000.0, 1300.0, 1600.0, 1900.0], [])
    assert groups["data.num_workers = 2"] == ([1200.0, 1800.0], [1500.0])  # 11 failed: no tokens/s
    assert "runtime.compile = none" in groups
    lr_groups = [g for g in groups if g.startswith("optim.lr")]
    assert len(lr_groups) == 5  # 11 distinct learning rates > 8, binned into 5 ranges
    assert sum(len(groups[g][0]) + len(groups[g][1]) for g in lr_groups) == 11  # failed one out
    starts = {label: start for label, _, _, start in knob_groups(trials()) if start}
    assert starts == {
        "data.num_workers = 0": [1000.0],
        "runtime.compile = none": [1000.0],
        "optim.lr = [0.0001, 0.0003]": [1000.0],
    }


def legend_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


@pytest.mark.parametrize(
    ("floor", "legend_has", "legend_lacks"),
    [
        (0.2, "100%-MFU floor", "no spec peak"),
        (None, "100%-MFU floor: no spec peak", None),
    ],
)
def test_summary_figure_legend_states_the_floor(floor, legend_has, legend_lacks) -> None:
    fig = summary_figure(rows(floor), trials())
    ax_time = fig.axes[2]
    texts = legend_texts(ax_time)
    assert legend_has in texts
    assert "data wait" in texts
    if legend_lacks:
        assert not any(legend_lacks in t for t in texts)
    # stacked bars: 5 segments per config; the compute segment of the first row is 0.7 * 0.5 s
    bars = ax_time.patches
    assert len(bars) == 5 * 2
    assert bars[0].get_width() == pytest.approx(0.35)
    assert bars[1].get_x() == pytest.approx(0.35)


def test_every_axis_starts_at_zero() -> None:
    # search runs at 1,000-2,000 tokens/s: an axis from the lowest value would make 2x look like 20x
    for ax in summary_figure(rows(0.2), trials()).axes:
        assert ax.get_xlim()[0] == 0, ax.get_title()


def test_rows_are_labelled_by_rank_and_trial_with_winner_and_start() -> None:
    ax_speed = summary_figure(rows(0.2), trials()).axes[1]
    labels = [t.get_text().replace("\n", " ") for t in ax_speed.get_yticklabels()]
    assert labels == ["rank 1 · trial #3 · winner", "rank 2 · trial #0 · start"]
    assert row_label(1, {"trial": 5, "winner": True, "start": True}) == (
        "rank 1 · trial #5 · winner · start"
    )


def test_search_and_verified_figures_are_drawn_apart_with_a_legend() -> None:
    fig = summary_figure(rows(0.2), trials())
    ax_search, ax_speed = fig.axes[:2]
    assert "search runs" in ax_search.get_title()
    texts = legend_texts(ax_speed)
    assert "search run (some projected)" in texts
    assert "verified median (3 real full-step runs)" in texts
    # per row: the search run hatched, the verified median solid, each as long as its figure
    bars = [p for p in ax_speed.patches if p.get_height() == pytest.approx(0.38)]
    assert [(b.get_width(), bool(b.get_hatch())) for b in bars] == [
        (4600.0, True),
        (4000.0, False),
        (3500.0, True),
        (3400.0, False),
    ]


def test_the_starting_config_is_marked() -> None:
    fig = summary_figure(rows(0.2), trials())
    ax_search, ax_speed = fig.axes[:2]
    assert "starting config (trial #0)" in legend_texts(ax_search)
    assert "starting config" in legend_texts(ax_speed)
    # trial 0 (1,000 tokens/s) starred in each knob's group it belongs to: 3 knobs
    stars = [c for c in ax_search.collections if c.get_sizes().tolist() == [160.0]]
    assert [c.get_offsets().tolist()[0][0] for c in stars] == [1000.0] * 3
    # the starting config's row (the second) is shaded in the verified panel
    shaded = [p for p in ax_speed.patches if p.get_alpha() == pytest.approx(0.08)]
    assert len(shaded) == 1 and shaded[0].get_y() == pytest.approx(1 - 0.45)


def test_no_label_is_clipped() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    long_trials = [
        {
            **t,
            "params": {
                "a.very_long_knob_name.that_goes_on_and_on": f"some-long-value-{t['number']}",
                **t["params"],
            },
        }
        for t in trials()
    ]
    fig = summary_figure(rows(0.2), long_trials)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    page = fig.bbox
    texts = []
    for ax in fig.axes:
        lo, hi = ax.get_xlim()  # the locator also returns ticks past the limits, never drawn
        shown = [
            lab
            for x, lab in zip(ax.get_xticks(), ax.get_xticklabels(), strict=True)
            if lo <= x <= hi
        ]
        texts += [
            *shown,
            *ax.get_yticklabels(),
            ax.title,
            ax.xaxis.label,
            *ax.get_legend().get_texts(),
        ]
    assert len(texts) > 20
    for t in texts:
        box = t.get_window_extent(canvas.get_renderer())
        assert page.x0 <= box.x0 and box.x1 <= page.x1 + 0.5, t.get_text()
        assert page.y0 <= box.y0 and box.y1 <= page.y1 + 0.5, t.get_text()


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


# An artifact store holds every sweep's plots: Optuna's four views stay small (the Plotly HTML they
# replace embedded 4.8 MB of plotly.js in each file)
MAX_VIEW_BYTES = 300_000


def test_optuna_pngs_are_small_static_images(small_study: optuna.Study, tmp_path: Path) -> None:
    paths = optuna_pngs(small_study, tmp_path / "png")
    assert [p.name for p in paths] == [
        "optimization_history.png",
        "param_importances.png",
        "parallel_coordinate.png",
        "slice.png",
    ]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert 5_000 < p.stat().st_size < MAX_VIEW_BYTES, (p.name, p.stat().st_size)
        height, width, _ = matplotlib.image.imread(p).shape
        assert width >= 300 and height >= 200  # a drawn view, not an empty canvas
    # Optuna's style sheet stays inside the views: the summary is drawn in matplotlib's defaults
    assert matplotlib.rcParams["axes.facecolor"] == "white"


def test_optuna_pngs_skip_importances_without_enough_trials(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="sweeper.report.plots")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study()
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    names = [p.name for p in optuna_pngs(study, tmp_path)]
    assert "param_importances.png" not in names
    assert "optimization_history.png" in names
    assert "skipping param importances" in caplog.text
