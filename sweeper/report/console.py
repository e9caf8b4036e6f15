"""What the user sees during and after a sweep: the starting config, a progress line per trial and
the final table.

Plain lines rather than a live widget, so the output reads the same in a terminal, a CI log and a
Slurm output file, interleaved with Hydra's logging. A trial names only the knobs that differ from
the starting config (printed once, in full, before the first trial), and every line is wrapped to
the console's width, at most 160 characters (sweeper/launch/log_routing.py `console_width`). The log
file keeps each line whole, with every knob (`record`): so does MLflow.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sweeper.launch.log_routing import console_width, wrap_lines
from sweeper.metrics import BY_ROW_KEY, column
from sweeper.numbers import fmt_duration, fmt_pct
from sweeper.report.best_yaml import train_command

# Logs and CI have no terminal width: keep the final table readable there too ($COLUMNS, else 160).
console = Console(
    highlight=False,
    soft_wrap=True,
    emoji=False,
    width=None if sys.stdout.isatty() else console_width(),
)
# The report's lines in full, for the sweep's log file only (sweeper/launch/log_routing.py)
record = logging.getLogger("sweeper.report.record")
SAME_AS_START = "no knob changed"  # a trial at the starting config's knobs


def say(text: str, *, kept: str | None = None, wrap: bool = True) -> None:
    """A report line: `text` on the console, wrapped to its width (but a command, `wrap=False`:
    it is copied as one line); `kept` (else `text`) whole in the log file."""
    record.info(kept or text)
    lines = wrap_lines(text, min(console.width, console_width())) if wrap else [text]
    for line in lines:
        console.print(line, markup=False)  # a value in [brackets] is text, not a rich style


def _bar(done: int, total: int, width: int = 20) -> str:
    if total <= 0:
        return f"{done} trial(s)"
    filled = min(width, round(width * done / total))
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def _differs(value: Any, start: Any) -> bool:
    return value != start and str(value) != str(start)


def changed_knobs(params: Mapping[str, Any], start: Mapping[str, Any] | None) -> dict[str, Any]:
    """The knobs of `params` whose value differs from the starting config's (all of them when
    there is no start to compare with)."""
    if start is None:
        return dict(params)
    return {k: v for k, v in params.items() if k not in start or _differs(v, start[k])}


def knobs_text(params: Mapping[str, Any], start: Mapping[str, Any] | None = None) -> str:
    """`micro_batch=32 dtype=bf16`: the knobs that differ from `start` by their last name, or
    SAME_AS_START where none does."""
    changed = changed_knobs(params, start)
    if not changed and start is not None:
        return SAME_AS_START
    return " ".join(f"{k.split('.')[-1]}={v}" for k, v in sorted(changed.items()))


def full_knobs(params: Mapping[str, Any]) -> str:
    """Every knob by its full name, as an override: `batch.micro_batch=32 runtime.dtype=bf16`."""
    return " ".join(f"{k}={v}" for k, v in sorted(params.items()))


def start_knobs(searched: Iterable[str], base: Mapping[str, Any], baseline: Mapping | None) -> dict:
    """The starting config's value of each searched knob: its point in the space where the space
    holds it (sweeper/space/search_space.py `baseline_params`), else the composed config's
    values."""
    if baseline is not None:
        return dict(baseline)
    return {key: base.get(key) for key in searched}


def start_lines(start: Mapping[str, Any], *, in_space: bool) -> list[str]:
    """The starting config in full, once before the first trial: each trial line names only the
    knobs that differ from it."""
    where = "" if in_space else " (not a point of the search space: it is not run)"
    return [
        f"start{where}: each trial below names only the knobs that differ from it",
        f"  {full_knobs(start)}",
    ]


def print_start(start: Mapping[str, Any], *, in_space: bool) -> None:
    for line in start_lines(start, in_space=in_space):
        say(line)


def trial_text(
    *,
    number: int,
    state: str,
    params: Mapping[str, Any],
    result: dict | None,
    reason: str | None,
    start: Mapping[str, Any] | None,
) -> tuple[str, str]:
    """A finished trial as the console says it (its numbers, the knobs that differ from the
    start, the first line of its reason) and as the log file keeps it (every knob, the whole
    reason)."""
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
    failed = bool(reason) and state != "complete"
    why = f"  ({reason.splitlines()[0][:120]})" if failed else ""
    head = f"trial {number:>3} {state:<14} {measured}{took}"
    shown = f"{head}  {knobs_text(params, start)}{why}"
    kept = f"{head}  {full_knobs(params)}" + (f"  ({reason})" if failed else "")
    return shown, kept


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
    start: Mapping[str, Any] | None = None,
) -> None:
    """One line per finished trial (wrapped where it is longer than the console), named by its
    trial number (its job folder is linked as trial-<n>: sweeper/launch/batch.py): tokens/s, MFU,
    wall, the knobs that differ from `start`, and why it stopped; then the progress line with the
    best value so far and the ETA (`eta`, sweeper/study/eta.py: learned from the walls measured
    so far; a bare `eta_s` otherwise). The log file gets the line with every knob."""
    shown, kept = trial_text(
        number=number, state=state, params=params, result=result, reason=reason, start=start
    )
    say(shown, kept=kept)
    best_text = "-" if best is None else f"{best:,.1f}"
    eta_text = eta.text() if eta is not None else f"eta {fmt_duration(eta_s)}"
    say(f"  {_bar(done, total)}  best {best_text}  {eta_text}")


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
        f"{f8['linears_converted']} of {f8['linears_total']} linears)"
        for i, f8 in ran
    )
    return (
        f"f8: float8 matmuls ran in rank {which}; their MFU spec is bf16-equivalent (the same "
        f"6N + 12LHQT FLOPs against the bf16 dense peak, not the float8 peak)"
    )


# The final table's columns: a verified row's number by its key, or a column of its own.
_METRIC_KEYS = ("tokens_per_s", "step_time_s", "mfu_spec", "mfu_ceiling", "data_wait_frac", "cv")
TABLE_TITLE = "Verified top configurations"


def rank_text(rank: int, row: Mapping[str, Any]) -> str:
    """`1 *` for the winner, `2 start` for the starting config."""
    return f"{rank}{' *' if row.get('winner') else ''}{' start' if row.get('start') else ''}"


def _columns() -> list[str]:
    return ["rank", column("tokens_per_s"), "search run", *map(column, _METRIC_KEYS[1:]), "n"]


def _cells(rank: int, row: dict) -> list[str]:
    return [
        rank_text(rank, row),
        _cell(row, "tokens_per_s"),
        search_run_text(row),
        *(_cell(row, key) for key in _METRIC_KEYS[1:]),
        str(row.get("n", "")),
    ]


def final_table(rows: list[dict], *, title: str = TABLE_TITLE) -> Table:
    """The verified configurations (real full steps): median tokens/s beside the search run's
    (projected or real), step time, MFU, data wait, CV; `*` marks the winner, `start` the
    starting config. Numbers only, so it fits a 100-column terminal: each row's knobs are the
    lines under it (`knob_lines`)."""
    table = Table(title=title)
    for col in _columns():
        table.add_column(col, justify="right")
    for i, r in enumerate(rows, 1):
        table.add_row(*_cells(i, r))
    return table


def knob_lines(rows: list[dict], *, start: Mapping[str, Any] | None = None) -> list[str]:
    """Under the table, a line per row: its trial, rank and role, and the knobs that differ from
    the starting config (the start's row when it was verified, else `start`), e.g.
    `  trial 8 (rank 1, winner): micro_batch=32 dtype=bf16`."""
    reference = next((r["params"] for r in rows if r.get("start")), start)
    lines = ["knobs that differ from the starting config:" if reference is not None else "knobs:"]
    for i, r in enumerate(rows, 1):
        role = "".join(f", {name}" for name in ("winner", "start") if r.get(name))
        knobs = "the starting config" if r.get("start") else knobs_text(r["params"], reference)
        lines.append(f"  trial {r['trial']} (rank {i}{role}): {knobs}")
    return lines


def row_record(rank: int, row: dict) -> str:
    """A verified row whole, for the log file: every number and every knob."""
    numbers = ", ".join(
        f"{col} {cell}" for col, cell in zip(_columns()[1:], _cells(rank, row)[1:], strict=True)
    )
    return f"verified {rank_text(rank, row)}: trial {row['trial']}, {numbers}; " + full_knobs(
        row["params"]
    )


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
    start: Mapping[str, Any] | None = None,
) -> None:
    """The end of a sweep: how its trials ended, `notes` (the budget that ended the search, a
    shared study's exporter), the verified table with each row's knobs that differ from `start`,
    and how to train the best."""
    say(trial_states(trials, duplicate_attr))
    for note in notes:
        say(note)
    if rows:
        console.print(final_table(rows))
        for i, r in enumerate(rows, 1):
            record.info(row_record(i, r))
        for line in knob_lines(rows, start=start):
            say(line)
        if float8_note(rows):
            say(float8_note(rows))
    if best_path is not None:
        say(f"best config: {best_path}")
        say(f"train with:  {train_command(best_path)}", wrap=False)
