"""The plain text table the benchmarks (through scripts/bench/harness.py), gpu_check and code_shape
print (imported as the sibling `table` by a script run as `python scripts/<name>.py`)."""

from __future__ import annotations


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain `|`-separated table, columns padded to their widest cell."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])
