"""What the user sees during and after a sweep: a progress line per trial and the final table.

Plain lines rather than a live widget, so the output reads the same in a terminal, a CI log and a
Slurm output file, interleaved with Hydra's logging.
"""

from __future__ import annotations

import math
import sys

from rich.console import Console
from rich.table import Table

# Logs and CI have no terminal width: keep the final table readable there too.
console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)


def _bar(done: int, total: int, width: int = 20) -> str:
    if total <= 0:
        return ""
    filled = min(width, round(width * done / total))
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = max(0, int(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


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
    eta_s: float | None,
) -> None:
    """One line per finished trial: knobs, tokens/s, MFU, state; then the progress with
    best-so-far."""
    if result and result.get("tokens_per_s"):
        mfu = result.get("mfu") or {}
        measured = (
            f"{result['tokens_per_s']:>10,.0f} tok/s  mfu spec {fmt_pct(mfu.get('spec'))} "
            f"ceiling {fmt_pct(mfu.get('ceiling'))}"
        )
    else:
        measured = f"{'-':>10}"
    why = f"  ({reason.splitlines()[0][:120]})" if reason and state != "complete" else ""
    console.print(f"trial {number:>3} {state:<14} {measured}  {knobs_text(params)}{why}")
    best_text = "-" if best is None else f"{best:,.1f}"
    console.print(f"  {_bar(done, total)}  best {best_text}  eta {fmt_duration(eta_s)}")


def search_run_text(row: dict) -> str:
    """The search's own tokens/s for a verified row, marked when projected from short steps."""
    tps = row.get("search_tokens_per_s")
    if tps is None:
        return "n/a"
    return f"{tps:,.0f}{' (projected)' if row.get('search_projected') else ''}"


def final_table(rows: list[dict], *, title: str) -> Table:
    """The verified configurations (real full steps): median tokens/s beside the search run's
    (projected or real), step time, MFU, data wait, CV; `*` marks the winner, `start` the
    starting config."""
    table = Table(title=title)
    for col in (
        "rank",
        "tokens/s",
        "search run",
        "step p50",
        "MFU spec",
        "MFU ceiling",
        "data wait",
        "CV",
        "n",
        "knobs",
    ):
        table.add_column(col, justify="right" if col not in ("knobs",) else "left")
    for i, r in enumerate(rows, 1):
        table.add_row(
            f"{i}{' *' if r.get('winner') else ''}{' start' if r.get('start') else ''}",
            f"{r['tokens_per_s']:,.0f}",
            search_run_text(r),
            f"{1e3 * r['step_time_s']:.1f} ms",
            fmt_pct(r.get("mfu_spec")),
            fmt_pct(r.get("mfu_ceiling")),
            fmt_pct(r.get("data_wait_frac")),
            fmt_pct(r.get("cv")),
            str(r.get("n", "")),
            knobs_text(r["params"]),
        )
    return table
