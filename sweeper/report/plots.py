"""Sweep plots: Optuna's interactive HTML views of the study, and one static PNG summary.

HTML: each file embeds plotly.js (`include_plotlyjs=True`, ~4.7 MB per file), so it opens offline,
from any copy of the sweep dir, and inside MLflow's artifact viewer (an iframe where a relative
`plotly.min.js` from `include_plotlyjs="directory"` would not load). The CDN mode needs a network.

PNG: matplotlib through the Agg canvas of a `Figure` object, never pyplot, so no global backend or
figure state is touched in the sweep process.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from train.measure.flops import floor_step_time_s

log = logging.getLogger(__name__)

# The time-breakdown segments, in stacking order, with fixed colours so every plot reads alike.
SEGMENTS = (
    ("compute", "compute", "#4c72b0"),
    ("data_wait", "data wait", "#dd8452"),
    ("optimizer", "optimizer", "#55a868"),
    ("checkpoint", "checkpoint", "#c44e52"),
    ("other", "other", "#8c8c8c"),
)
MAX_GROUPS_PER_KNOB = 8  # a numeric knob with more distinct values is binned into ranges
NUM_BINS = 5


def optuna_html(study: Any, out_dir: Path, *, include_plotlyjs: bool | str = True) -> list[Path]:
    """Write optimization history, param importances, parallel coordinate and slice views of
    `study` as self-contained HTML files in `out_dir`; a view that cannot be drawn is skipped."""
    from optuna import visualization as vis

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    views: dict[str, Callable[[Any], Any]] = {
        "optimization_history": vis.plot_optimization_history,
        "param_importances": vis.plot_param_importances,
        "parallel_coordinate": vis.plot_parallel_coordinate,
        "slice": vis.plot_slice,
    }
    n_complete = sum(1 for t in study.trials if t.state.name == "COMPLETE")
    written = []
    for name, plot in views.items():
        if name == "param_importances" and n_complete < 2:
            log.info("skipping param importances: %d complete trial(s), needs 2", n_complete)
            continue
        try:
            fig = plot(study)
        except Exception as e:  # too few complete trials, a single-valued param, ...
            log.info("skipping the %s plot: %s: %s", name, type(e).__name__, e)
            continue
        path = out_dir / f"{name}.html"
        fig.write_html(path, include_plotlyjs=include_plotlyjs, full_html=True)
        written.append(path)
    return written


def _group_label(knob: str, value: Any) -> str:
    return f"{knob} = {value}"


def knob_groups(trials: list[dict]) -> list[tuple[str, list[float], list[float]]]:
    """(label, complete tokens/s, pruned tokens/s) per (knob, value); numeric knobs with many values
    are binned into ranges. Knobs appear in first-seen order, values sorted."""
    knobs: list[str] = []
    for t in trials:
        knobs += [k for k in t.get("params", {}) if k not in knobs]
    groups = []
    for knob in knobs:
        pts = [
            (t["params"][knob], t["tokens_per_s"], t.get("state"))
            for t in trials
            if knob in t.get("params", {}) and t.get("tokens_per_s") is not None
        ]
        values = sorted({v for v, _, _ in pts}, key=lambda v: (isinstance(v, str), str(v)))
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        if numeric:
            values.sort()
        if numeric and len(values) > MAX_GROUPS_PER_KNOB:
            lo, hi = values[0], values[-1]
            width = (hi - lo) / NUM_BINS
            edges = [lo + i * width for i in range(NUM_BINS + 1)]

            def bin_of(v: float, edges: list[float] = edges, width: float = width) -> str:
                i = min(int((v - edges[0]) / width), NUM_BINS - 1)
                return f"[{edges[i]:.3g}, {edges[i + 1]:.3g}]"

            keyed = [(bin_of(v), tps, st) for v, tps, st in pts]
            labels = list(dict.fromkeys(bin_of(v) for v in values))
        else:
            keyed = [(str(v), tps, st) for v, tps, st in pts]
            labels = [str(v) for v in values]
        for label in labels:
            done = [tps for k, tps, st in keyed if k == label and st in (None, "complete")]
            pruned = [tps for k, tps, st in keyed if k == label and st == "pruned"]
            groups.append((_group_label(knob, label), done, pruned))
    return groups


def summary_figure(rows: list[dict], trials: list[dict]) -> Any:
    """Left: tokens/s of the trials grouped by each searched knob's value. Right: each top config's
    step time split into compute / data wait / optimizer / checkpoint / other, next to its
    100%-MFU floor (the step time at the device's spec peak)."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    groups = knob_groups(trials)
    height = max(4.0, 0.32 * max(len(groups), 2 * len(rows)) + 1.5)
    fig = Figure(figsize=(14, height), layout="constrained")
    ax_knobs, ax_time = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.2, 1]})

    # -- left: a strip plot per (knob, value), median as a vertical tick ------------------------
    for y, (_, done, pruned) in enumerate(groups):
        jitter = [((i * 0.37) % 1 - 0.5) * 0.4 for i in range(len(done) + len(pruned))]
        ax_knobs.scatter(done, [y + j for j in jitter[: len(done)]], s=18, color="#4c72b0")
        ax_knobs.scatter(
            pruned,
            [y + j for j in jitter[len(done) :]],
            s=18,
            facecolors="none",
            edgecolors="#8c8c8c",
        )
        if done:
            ax_knobs.plot([statistics.median(done)] * 2, [y - 0.3, y + 0.3], color="black", lw=2)
    ax_knobs.set_yticks(range(len(groups)), [g[0] for g in groups])
    ax_knobs.invert_yaxis()
    ax_knobs.set_xlabel("tokens/s")
    ax_knobs.set_title("tokens/s by knob value (bar = median of complete trials)")
    ax_knobs.grid(axis="x", alpha=0.3)
    ax_knobs.legend(
        handles=[
            Line2D([], [], ls="", marker="o", color="#4c72b0", label="complete"),
            Line2D([], [], ls="", marker="o", mfc="none", color="#8c8c8c", label="pruned"),
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12),
        ncol=2,
        fontsize="small",
        frameon=False,
    )
    if not groups:
        ax_knobs.text(
            0.5, 0.5, "no trial measured tokens/s", ha="center", transform=ax_knobs.transAxes
        )

    # -- right: stacked seconds of a step per config, with its floor ---------------------------
    labels = [r["label"] for r in rows]
    for y, r in enumerate(rows):
        left = 0.0
        for key, _, colour in SEGMENTS:
            width = r["step_time_s"] * (r.get("time_frac") or {}).get(key, 0.0)
            ax_time.barh(y, width, left=left, color=colour, height=0.6)
            left += width
        if r.get("floor_step_s") is not None:
            ax_time.plot([r["floor_step_s"]] * 2, [y - 0.4, y + 0.4], color="black", lw=2.5)
    ax_time.set_yticks(range(len(rows)), labels)
    ax_time.invert_yaxis()
    ax_time.set_xlabel("seconds per optimizer step")
    ax_time.set_title("where a step's time goes (top configs)")
    ax_time.grid(axis="x", alpha=0.3)
    handles: list[Any] = [Patch(color=c, label=name) for _, name, c in SEGMENTS]
    floors = [r.get("floor_step_s") for r in rows]
    if any(f is not None for f in floors):
        handles.append(Line2D([], [], color="black", lw=2.5, label="100%-MFU floor"))
    if any(f is None for f in floors):
        handles.append(Line2D([], [], ls="", label="100%-MFU floor: no spec peak"))
    # Below the axes, so it never hides a bar.
    ax_time.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12),
        ncol=3,
        fontsize="small",
        frameon=False,
    )
    return fig


def summary_png(rows: list[dict], trials: list[dict], out_path: Path) -> Path:
    """Render `summary_figure` to a PNG at `out_path`."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    summary_figure(rows, trials).savefig(out_path, dpi=110)
    return out_path


def plot_rows(rows: list[dict], results: dict[int, list[dict]]) -> list[dict]:
    """Each verified config's step-time breakdown and its 100%-MFU floor, for the summary PNG."""
    out = []
    for r in rows:
        res = results[r["trial"]][-1]
        peak = (res.get("device") or {}).get("peak_flops")
        out.append(
            {
                "label": f"#{r['trial']}" + (" (winner)" if r["winner"] else ""),
                "step_time_s": r["step_time_s"],
                "time_frac": res["time_frac"],
                "floor_step_s": floor_step_time_s(
                    tokens_per_step=res["tokens_per_step"],
                    flops_per_token=res["flops_per_token"],
                    peak_flops=peak,
                )
                if peak
                else None,
            }
        )
    return out


def sweep_plots(
    study: Any, sweep_dir: Path, rows: list[dict], results: dict[int, list[dict]]
) -> list[Path]:
    """Optuna's HTML views and the PNG summary under <sweep_dir>/plots; the files drawn. A plot
    that cannot be drawn is a warning, never a failed sweep."""
    artifacts: list[Path] = []
    try:
        artifacts += optuna_html(study, sweep_dir / "plots")
        trials = [
            {
                "params": t.params,
                "tokens_per_s": (t.user_attrs.get("metrics") or {}).get("tokens_per_s"),
                "state": t.state.name.lower(),
            }
            for t in study.get_trials(deepcopy=False)
        ]
        artifacts.append(
            summary_png(plot_rows(rows, results), trials, sweep_dir / "plots" / "summary.png")
        )
    except Exception as exc:
        log.warning("could not draw the sweep plots: %s", exc)
    return artifacts
