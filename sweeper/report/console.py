"""What the user sees during and after a sweep: a progress line per trial and the final table.

Plain lines rather than a live widget, so the output reads the same in a terminal, a CI log and a
Slurm output file, interleaved with Hydra's logging.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sweeper.metrics import BY_ROW_KEY, column
from sweeper.numbers import fmt_duration, fmt_pct
from sweeper.report.export import train_command

# Logs and CI have no terminal width: keep the final table readable there too.
console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)


def _bar(done: int, total: int, width: int = 20) -> str:
    if total <= 0:
        return f"{done} trial(s)"
    filled = min(width, round(width * done / total))
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def knobs_text(params: dict) -> str:
    return " ".join(f"{k.split('.')[-1]}={v}" for k, v in sorted(params.items()))


def trial_line(
    *,
    number: int,
    state: str,
    params: dict,
    result: dict | None,
    reason: str | None,
    done: int,
    total: int,
    best: float | None,
    eta_s: float | None = None,
    eta: Any = None,
) -> None:
    """One line per finished trial, named by its trial number (its job folder is linked as
    trial-<n>: sweeper/launch/batch.py): knobs, tokens/s, MFU, state and wall; then the progress
    line with the best value so far and the ETA (`eta`, sweeper/study/eta.py: learned from the
    walls measured so far; a bare `eta_s` otherwise)."""
    if result and result.get("tokens_per_s"):
        mfu = result.get("mfu") or {}
        measured = (
            f"{result['tokens_per_s']:>10,.0f} tok/s  mfu spec {fmt_pct(mfu.get('spec'))} "
            f"ceiling {fmt_pct(mfu.get('ceiling'))}"
        )
    else:
        measured = f"{'-':>10}"
    wall = (result or {}).get("wall_s")
    took = f"  in {wall:.1f} s" if isinstance(wall, int | float) else ""
    why = f"  ({reason.splitlines()[0][:120]})" if reason and state != "complete" else ""
    # markup off: a knob value or a reason in [brackets] is text, not a rich style
    console.print(f"trial {number:>3} {state:<14} {measured}  {knobs_text(params)}{took}{why}",
                  markup=False)  # fmt: skip
    best_text = "-" if best is None else f"{best:,.1f}"
    eta_text = eta.text() if eta is not None else f"eta {fmt_duration(eta_s)}"
    console.print(f"  {_bar(done, total)}  best {best_text}  {eta_text}", markup=False)


def search_run_text(row: dict) -> str:
    """The search's own tokens/s for a verified row, marked when projected from short steps."""
    tps = row.get("search_tokens_per_s")
    if tps is None:
        return "n/a"
    return f"{tps:,.0f}{' (projected)' if row.get('search_projected') else ''}"


def _cell(row: dict, key: str) -> str:
    """A verified row's number as the final table prints it (by its unit in sweeper/metrics.py);
    a spread (CV) only where it rests on more than one run."""
    if key == "cv" and (row.get("n") or 0) < 2:
        return "-"
    unit = BY_ROW_KEY[key].unit
    if unit == "tokens/s":
        return f"{row[key]:,.0f}"
    if unit == "s":
        return f"{1e3 * row[key]:.1f} ms"
    if key == "mfu_spec" and row.get("float8") and row.get(key) is not None:
        return f"{fmt_pct(row[key])} f8"  # bf16-equivalent: see float8_note
    return fmt_pct(row.get(key))


def float8_note(rows: list[dict]) -> str | None:
    """The line under the table that says which rows ran float8 matmuls and what their MFU is."""
    ran = [(i, r["float8"]) for i, r in enumerate(rows, 1) if r.get("float8")]
    if not ran:
        return None
    which = ", ".join(
        f"{i} ({f8['recipe']}{', emulated' if f8.get('emulated') else ''}: "
        f"{f8['linears_converted']} of {f8['linears_total']} linears)" for i, f8 in ran
    )
    return (
        f"f8: float8 matmuls ran in rank {which}; their MFU spec is bf16-equivalent (the same "
        f"6N + 12LHQT FLOPs against the bf16 dense peak, not the float8 peak)"
    )


# The final table's columns: a verified row's number by its key, or a column of its own.
_METRIC_KEYS = ("tokens_per_s", "step_time_s", "mfu_spec", "mfu_ceiling", "data_wait_frac", "cv")


def final_table(rows: list[dict], *, title: str) -> Table:
    """The verified configurations (real full steps): median tokens/s beside the search run's
    (projected or real), step time, MFU, data wait, CV; `*` marks the winner, `start` the
    starting config."""
    table = Table(title=title)
    before, after = ("tokens_per_s",), _METRIC_KEYS[1:]
    for col in ("rank", *map(column, before), "search run", *map(column, after), "n", "knobs"):
        table.add_column(col, justify="right" if col not in ("knobs",) else "left")
    for i, r in enumerate(rows, 1):
        table.add_row(
            f"{i}{' *' if r.get('winner') else ''}{' start' if r.get('start') else ''}",
            *(_cell(r, key) for key in before),
            search_run_text(r),
            *(_cell(r, key) for key in after),
            str(r.get("n", "")),
            knobs_text(r["params"]),
        )
    return table


def trial_states(trials: Iterable[Any], duplicate_attr: str) -> str:
    """How the study's trials ended, counted by state (a re-proposed point is a duplicate)."""
    states: dict[str, int] = {}
    for t in trials:
        if duplicate_attr in t.user_attrs:
            name = "duplicate (not re-run)"
        else:
            name = t.user_attrs.get("failure_kind") or t.state.name.lower()
        states[name] = states.get(name, 0) + 1
    return "trials: " + ", ".join(f"{k} {v}" for k, v in sorted(states.items()))


def final_report(
    *,
    trials: Iterable[Any],
    duplicate_attr: str,
    rows: list[dict],
    best_path: Path | None,
    notes: Iterable[str] = (),
) -> None:
    """The end of a sweep: how its trials ended, `notes` (the budget that ended the search, a
    shared study's exporter), the verified table, and how to train the best."""
    console.print(trial_states(trials, duplicate_attr))
    for note in notes:
        console.print(note)
    if rows:
        console.print(final_table(rows, title="Verified top configurations"))
        if float8_note(rows):
            console.print(float8_note(rows), markup=False)
    if best_path is not None:
        console.print(f"best config: {best_path}")
        console.print(f"train with:  {train_command(best_path)}")
