"""Sweep plots, as static PNGs sized for an artifact store: Optuna's four views of the study and
one summary of the verified configs.

Optuna's views (history, importances, parallel coordinates, slice) are drawn by
`optuna.visualization.matplotlib`, 20-80 KB a file. They were Plotly HTML files that each embedded
plotly.js (4.8 MB a file, about 19 MB per sweep, stored in the sweep dir and again on the MLflow
run); a CDN-loaded page would need a network the user may not have. To browse a study
interactively, open its storage in `optuna-dashboard`.

The summary is drawn on a matplotlib `Figure` object (the Agg canvas), never pyplot, so no global
figure state is touched in the sweep process. Optuna's functions do use pyplot: they run under the
Agg backend and inside `rc_context` (they set a style sheet), and each figure is closed.
"""

from __future__ import annotations

import logging
import statistics
import textwrap
from pathlib import Path
from typing import Any

from train.core.flops import floor_step_time_s

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


OPTUNA_VIEWS = ("optimization_history", "param_importances", "parallel_coordinate", "slice")
PNG_DPI = 90  # Optuna's 6.4 x 4.8 in views at 576 x 432 px: readable, tens of KB


def optuna_pngs(study: Any, out_dir: Path) -> list[Path]:
    """Write Optuna's optimization history, param importances, parallel coordinate and slice
    views of `study` as PNGs in `out_dir`; a view that cannot be drawn is skipped."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")  # the sweep is a batch process: never a window, whatever $DISPLAY says
    import matplotlib.pyplot as plt
    from optuna.exceptions import ExperimentalWarning
    from optuna.visualization import matplotlib as vis

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    n_complete = sum(1 for t in study.trials if t.state.name == "COMPLETE")
    written = []
    for name in OPTUNA_VIEWS:
        if name == "param_importances" and n_complete < 2:
            log.info("skipping param importances: %d complete trial(s), needs 2", n_complete)
            continue
        path = out_dir / f"{name}.png"
        with matplotlib.rc_context(), warnings.catch_warnings():
            # the matplotlib views are marked experimental; we pin optuna and test them
            warnings.simplefilter("ignore", ExperimentalWarning)
            # a knob with one value so far: matplotlib widens its axis itself, and says so
            warnings.filterwarnings("ignore", message="Attempting to set identical")
            try:
                drawn = getattr(vis, f"plot_{name}")(study)
                fig = (drawn.flat[0] if hasattr(drawn, "flat") else drawn).figure
            except Exception as e:  # too few complete trials, a single-valued param, ...
                log.info("skipping the %s plot: %s: %s", name, type(e).__name__, e)
                plt.close("all")
                continue
            fig.savefig(path, dpi=PNG_DPI, bbox_inches="tight")
            plt.close(fig)
        written.append(path)
    return written


def _group_label(knob: str, value: Any) -> str:
    return f"{knob} = {value}"


def knob_groups(trials: list[dict]) -> list[tuple[str, list[float], list[float], list[float]]]:
    """(label, complete tokens/s, pruned tokens/s, the starting config's tokens/s) per (knob,
    value); numeric knobs with many values are binned into ranges. Knobs appear in first-seen
    order, values sorted."""
    knobs: list[str] = []
    for t in trials:
        knobs += [k for k in t.get("params", {}) if k not in knobs]
    groups = []
    for knob in knobs:
        pts = [
            (t["params"][knob], t["tokens_per_s"], t.get("state"), bool(t.get("start")))
            for t in trials
            if knob in t.get("params", {}) and t.get("tokens_per_s") is not None
        ]
        values = sorted({v for v, *_ in pts}, key=lambda v: (isinstance(v, str), str(v)))
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

            keyed = [(bin_of(v), *rest) for v, *rest in pts]
            labels = list(dict.fromkeys(bin_of(v) for v in values))
        else:
            keyed = [(str(v), *rest) for v, *rest in pts]
            labels = [str(v) for v in values]
        for label in labels:
            done = [tps for k, tps, st, _ in keyed if k == label and st in (None, "complete")]
            pruned = [tps for k, tps, st, _ in keyed if k == label and st == "pruned"]
            start = [
                tps
                for k, tps, st, s in keyed
                if k == label and s and st in (None, "complete", "pruned")
            ]
            groups.append((_group_label(knob, label), done, pruned, start))
    return groups


# Search and verified figures told apart by fill: a search run hatched, a verified median solid.
SEARCH_STYLE = {"facecolor": "white", "edgecolor": "#4c72b0", "hatch": "///"}
VERIFIED_STYLE = {"facecolor": "#4c72b0", "edgecolor": "#4c72b0"}
START_COLOUR = "#d62728"
LABEL_WIDTH = 30  # characters: longer tick labels wrap instead of clipping


def _wrap(label: str) -> str:
    return textwrap.fill(label, LABEL_WIDTH, break_on_hyphens=False)


def row_label(rank: int, row: dict) -> str:
    """A verified config's tick label: its rank in the race's order and its search trial, so a
    trial number never reads as a rank ("rank 1 · trial #5 · winner")."""
    tags = [t for t, on in (("winner", row.get("winner")), ("start", row.get("start"))) if on]
    return " · ".join([f"rank {rank}", f"trial #{row['trial']}", *tags])


def _below(ax: Any, handles: list[Any], ncol: int) -> None:
    """The legend under the axes, so it never hides a mark."""
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncol=ncol,
        fontsize="small",
        frameon=False,
    )


def _draw_search(ax: Any, trials: list[dict]) -> None:
    """Each search run's tokens/s grouped by knob value, the starting config's runs starred."""
    from matplotlib.lines import Line2D

    groups = knob_groups(trials)
    start = [t for t in trials if t.get("start") and t.get("tokens_per_s") is not None]
    for y, (_, done, pruned, start_tps) in enumerate(groups):
        jitter = [((i * 0.37) % 1 - 0.5) * 0.4 for i in range(len(done) + len(pruned))]
        ax.scatter(done, [y + j for j in jitter[: len(done)]], s=18, color="#4c72b0")
        ax.scatter(
            pruned,
            [y + j for j in jitter[len(done) :]],
            s=18,
            facecolors="none",
            edgecolors="#8c8c8c",
        )
        if done:
            ax.plot([statistics.median(done)] * 2, [y - 0.3, y + 0.3], color="black", lw=2)
        for tps in start_tps:  # the starting config's own dot, drawn over as a star
            i = done.index(tps) if tps in done else len(done) + pruned.index(tps)
            ax.scatter([tps], [y + jitter[i]], s=160, marker="*", color=START_COLOUR, zorder=3)
    ax.set_yticks(range(len(groups)), [_wrap(g[0]) for g in groups])
    ax.invert_yaxis()
    ax.set_xlim(left=0)  # from zero: a 15% gap looks like 15%
    ax.set_xlabel("tokens/s (search runs: one short run each)")
    ax.set_title("search runs: tokens/s by knob value\n(bar = median of complete runs)")
    ax.grid(axis="x", alpha=0.3)
    handles: list[Any] = [
        Line2D([], [], ls="", marker="o", color="#4c72b0", label="complete search run")
    ]
    if any(g[2] for g in groups):
        handles.append(
            Line2D(
                [],
                [],
                ls="",
                marker="o",
                mfc="none",
                color="#8c8c8c",
                label="pruned (running figure)",
            )
        )
    if start:
        handles.append(
            Line2D(
                [],
                [],
                ls="",
                marker="*",
                ms=11,
                color=START_COLOUR,
                label=f"starting config (trial #{start[0]['number']})",
            )
        )
    _below(ax, handles, ncol=len(handles))
    if not groups:
        ax.text(0.5, 0.5, "no trial measured tokens/s", ha="center", transform=ax.transAxes)


def _draw_speed(ax: Any, rows: list[dict], labels: list[str]) -> None:
    """Each verified config's search run (hatched) beside its verified median (solid)."""
    from matplotlib.patches import Patch

    for y, r in enumerate(rows):
        bars = [
            (y - 0.2, r.get("search_tokens_per_s"), SEARCH_STYLE),
            (y + 0.2, r.get("tokens_per_s"), VERIFIED_STYLE),
        ]
        for pos, value, style in bars:
            if value is None:
                continue
            ax.barh(pos, value, height=0.38, **style, lw=1.2)
            ax.annotate(f" {value:,.0f}", (value, pos), va="center", fontsize="small")
        if r.get("start"):  # the starting config's bars framed in its colour
            ax.axhspan(y - 0.45, y + 0.45, color=START_COLOUR, alpha=0.08, lw=0)
    ax.set_yticks(range(len(rows)), labels)
    ax.invert_yaxis()
    top = max(
        [v for r in rows for v in (r.get("search_tokens_per_s"), r.get("tokens_per_s")) if v]
        or [1.0]
    )
    ax.set_xlim(0, top * 1.15)  # from zero, with room for the value printed at a bar's end
    ax.set_xlabel("tokens/s")
    ax.set_title("verified configs: search run vs verified median")
    ax.grid(axis="x", alpha=0.3)
    projected = any(r.get("search_projected") for r in rows)
    n = sorted({r["n"] for r in rows if r.get("n")})
    runs = "/".join(str(k) for k in n) if n else "?"
    _below(
        ax,
        [
            Patch(**SEARCH_STYLE, label="search run" + (" (some projected)" if projected else "")),
            Patch(**VERIFIED_STYLE, label=f"verified median ({runs} real full-step runs)"),
            Patch(color=START_COLOUR, alpha=0.15, label="starting config"),
        ],
        ncol=1,
    )


def _draw_time(ax: Any, rows: list[dict]) -> None:
    """Each verified config's step time split by phase, next to its 100%-MFU floor."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    for y, r in enumerate(rows):
        left = 0.0
        for key, _, colour in SEGMENTS:
            width = r["step_time_s"] * (r.get("time_frac") or {}).get(key, 0.0)
            ax.barh(y, width, left=left, color=colour, height=0.6)
            left += width
        if r.get("floor_step_s") is not None:
            ax.plot([r["floor_step_s"]] * 2, [y - 0.4, y + 0.4], color="black", lw=2.5)
    ax.set_yticks(range(len(rows)), [])  # the middle panel names the rows
    ax.invert_yaxis()
    ax.set_xlim(left=0)
    ax.set_xlabel("seconds per optimizer step (verified median)")
    ax.set_title("verified configs: where a step's time goes")
    ax.grid(axis="x", alpha=0.3)
    handles: list[Any] = [Patch(color=c, label=name) for _, name, c in SEGMENTS]
    floors = [r.get("floor_step_s") for r in rows]
    if any(f is not None for f in floors):
        handles.append(Line2D([], [], color="black", lw=2.5, label="100%-MFU floor"))
    if any(f is None for f in floors):
        handles.append(Line2D([], [], ls="", label="100%-MFU floor: no spec peak"))
    _below(ax, handles, ncol=3)


def summary_figure(rows: list[dict], trials: list[dict]) -> Any:
    """Three panels, every axis from zero. Left: the search runs' tokens/s grouped by each
    searched knob's value, the starting config starred. Middle: each verified config (labelled
    by rank and trial) with its search run hatched beside its verified median. Right: its step
    time split into compute / data wait / optimizer / checkpoint / other, next to its 100%-MFU
    floor (the step time at the device's spec peak). `rows` come in the race's order, winner
    first (`plot_rows`)."""
    from matplotlib.figure import Figure

    n_groups = len(knob_groups(trials))
    height = max(4.5, 0.4 * max(n_groups, 2 * len(rows)) + 2.5)
    fig = Figure(figsize=(18, height), layout="constrained")
    ax_search, ax_speed, ax_time = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.2, 1, 1]})
    _draw_search(ax_search, trials)
    labels = [_wrap(row_label(rank, r)) for rank, r in enumerate(rows, start=1)]
    _draw_speed(ax_speed, rows, labels)
    _draw_time(ax_time, rows)
    return fig


def summary_png(rows: list[dict], trials: list[dict], out_path: Path) -> Path:
    """Render `summary_figure` to a PNG at `out_path`."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    summary_figure(rows, trials).savefig(out_path, dpi=110)
    return out_path


def plot_rows(rows: list[dict], results: dict[int, list[dict]]) -> list[dict]:
    """Each verified config, in the race's order (winner first): its trial, whether it is the
    winner or the starting config, its search run and verified median tokens/s, its step-time
    breakdown and its 100%-MFU floor, for the summary PNG."""
    out = []
    for r in rows:
        res = results[r["trial"]][-1]
        peak = (res.get("device") or {}).get("peak_flops")
        floor = None
        if peak:
            floor = floor_step_time_s(
                tokens_per_step=res["tokens_per_step"],
                flops_per_token=res["flops_per_token"],
                peak_flops=peak,
            )
        out.append(
            {
                "trial": r["trial"],
                "winner": r["winner"],
                "start": r.get("start", False),
                "tokens_per_s": r["tokens_per_s"],
                "n": r.get("n"),
                "search_tokens_per_s": r.get("search_tokens_per_s"),
                "search_projected": r.get("search_projected", False),
                "step_time_s": r["step_time_s"],
                "time_frac": res["time_frac"],
                "floor_step_s": floor,
            }
        )
    return out


def sweep_plots(
    study: Any, sweep_dir: Path, rows: list[dict], results: dict[int, list[dict]]
) -> list[Path]:
    """Optuna's views and the summary under <sweep_dir>/plots, as PNGs; the files drawn. A plot
    that cannot be drawn is a warning, never a failed sweep."""
    artifacts: list[Path] = []
    try:
        artifacts += optuna_pngs(study, sweep_dir / "plots")
        trials = [
            {
                "number": t.number,
                "params": t.params,
                "tokens_per_s": (t.user_attrs.get("metrics") or {}).get("tokens_per_s"),
                "state": t.state.name.lower(),
                "start": bool(t.user_attrs.get("baseline")),
            }
            for t in study.get_trials(deepcopy=False)
        ]
        artifacts.append(
            summary_png(plot_rows(rows, results), trials, sweep_dir / "plots" / "summary.png")
        )
    except Exception as exc:
        log.warning("could not draw the sweep plots: %s", exc)
    return artifacts
