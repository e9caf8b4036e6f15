"""The README's GPU section, as markdown, from an evidence file (pure: a dict in, text out)."""

from __future__ import annotations

from typing import Any

from acceptance.profiles import MULTI_GPU_STAGES


def _num(x: float | None, fmt: str, scale: float = 1.0) -> str:
    return "n/a" if x is None else format(x * scale, fmt)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    return [_row(headers), _row(["---"] * len(headers)), *(_row(r) for r in rows)]


def _knobs(knobs: dict[str, Any]) -> str:
    short = {
        "batch.micro_batch": "mb",
        "runtime.compile": "compile",
        "runtime.activation_checkpointing": "AC",
        "runtime.attention": "attn",
        "data.num_workers": "workers",
    }
    return ", ".join(f"{short.get(k, k)} {v}" for k, v in sorted(knobs.items()))


def device_line(ev: dict[str, Any]) -> str:
    d = ev.get("device") or {}
    pk = d.get("packages") or {}
    versions = ", ".join(f"{k} {v}" for k, v in sorted(pk.items()) if v)
    return (
        f"{d.get('name', 'unknown device')} ({_num(d.get('memory_gib'), '.1f')} GiB), driver "
        f"{d.get('driver') or 'n/a'}, torch {d.get('torch')} (CUDA {d.get('cuda') or 'n/a'}), "
        f"Python {d.get('python') or 'n/a'}; {versions}. Spec peak "
        f"{_num(d.get('spec_peak_flops'), '.1f', 1e-12)} TFLOP/s, measured matmul ceiling "
        f"{_num(d.get('ceiling_flops'), '.1f', 1e-12)} TFLOP/s."
    )


def stages_table(ev: dict[str, Any]) -> list[str]:
    rows = [
        [
            f"{s['stage']} ({s['run']})",
            s["outcome"],
            f"{s['wall_s']:.0f}",
            f"{s['deadline_s']:.0f}",
            s.get("note") or "",
        ]
        for s in ev.get("stages", [])
    ]
    return _table(["stage", "outcome", "wall s", "budget s", "note"], rows)


def memory_table(ev: dict[str, Any]) -> list[str]:
    rows = []
    for m in ev.get("memory", []):
        pred, meas = (
            m.get("memory_predicted_gib") or m.get("predicted_gib"),
            m.get("memory_measured_gib"),
        )
        err = f"{meas / pred - 1:+.1%}" if pred and meas else "n/a"
        status = m.get("status") or "n/a"
        if m.get("failure"):
            status = f"{status} ({m['failure']})"
        rows.append(
            [
                f"mb {m['micro_batch']}, compile {m['compile']}, "
                f"AC {m['activation_checkpointing']}",
                status,
                _num(pred, ".2f"),
                _num(meas, ".2f"),
                err,
                _num(m.get("tokens_per_s"), ",.0f"),
                _num(m.get("compile_s"), ".1f"),
            ]
        )
    return _table(
        ["point", "status", "predicted GiB", "measured GiB", "error", "tokens/s", "compile s"], rows
    )


def trials_table(ev: dict[str, Any]) -> list[str]:
    rows = []
    for t in (ev.get("sweep") or {}).get("trials", []):
        tps = _num(t.get("tokens_per_s"), ",.0f")
        if t.get("projected"):
            tps += " (projected)"
        rows.append(
            [
                f"{t['number']}{' (start)' if t.get('start') else ''}",
                _knobs(t.get("knobs") or {}),
                t.get("outcome", ""),
                tps,
                _num(t.get("mfu_spec"), ".1%"),
                _num(t.get("mfu_ceiling"), ".1%"),
                f"{_num(t.get('memory_predicted_gib'), '.1f')} / "
                f"{_num(t.get('memory_measured_gib'), '.1f')}",
                _num(t.get("compile_s"), ".0f"),
                _num(t.get("wall_s"), ".0f"),
            ]
        )
    return _table(
        [
            "trial",
            "knobs",
            "outcome",
            "tokens/s",
            "MFU spec",
            "MFU ceiling",
            "GiB pred / meas",
            "compile s",
            "wall s",
        ],
        rows,
    )


def race_table(ev: dict[str, Any]) -> list[str]:
    rows = [
        [
            str(p["trial"]),
            _num(p.get("search_tokens_per_s"), ",.0f")
            + (" (projected)" if p.get("search_projected") else ""),
            _num(p.get("real_tokens_per_s"), ",.0f"),
            _num(p.get("error"), "+.1%"),
        ]
        for p in (ev.get("sweep") or {}).get("projection", [])
    ]
    return _table(
        [
            "contender",
            "search tokens/s",
            "race tokens/s (real full steps, median)",
            "search vs real",
        ],
        rows,
    )


def summary_lines(ev: dict[str, Any]) -> list[str]:
    sweep, prod = ev.get("sweep") or {}, ev.get("production") or {}
    verdict = (sweep.get("race") or {}).get("verdict") or {}
    best = sweep.get("best") or {}
    lines = []
    if verdict:
        lines.append(
            f"Race: {verdict.get('outcome')} after {verdict.get('rounds')} round(s); "
            f"{verdict.get('reason')}"
        )
    if best:
        lines.append(
            f"best.yaml: trial {best.get('trial')}, {_knobs(best.get('knobs') or {})}; verified "
            f"{_num(best.get('tokens_per_s'), ',.0f')} tokens/s, MFU spec "
            f"{_num(best.get('mfu_spec'), '.1%')} (the seed's 51.9%, llm.c's ~46.5%), ceiling "
            f"{_num(best.get('mfu_ceiling'), '.1%')}."
        )
    else:
        lines.append("best.yaml: none yet (the sweep has not finished its race).")
    if prod:
        lines.append(
            f"Production run (`{prod.get('command')}`): {_num(prod.get('tokens_per_s'), ',.0f')} "
            f"tokens/s (median of {prod.get('measured_steps')} steps after the first), MFU spec "
            f"{_num(prod.get('mfu_spec'), '.1%')}; the race measured "
            f"{_num(prod.get('race_tokens_per_s'), ',.0f')} tokens/s "
            f"(ratio {_num(prod.get('ratio_to_race'), '.3f')})."
        )
    return lines


def ddp_lines(ev: dict[str, Any]) -> list[str]:
    """The data-parallel stage: a row of its figures, or why it did not run ([] before it)."""
    d = ev.get("ddp") or {}
    if not d:
        return []
    if d.get("outcome") == "skipped":
        return [f"Data-parallel trial: {d.get('reason')} (it needs {d.get('nproc') or 2})."]
    n = d.get("nproc") or 2
    split = d.get("per_process_split") or {}
    row = [
        f"{d.get('config')}, {n} x {d.get('backend')}",
        f"mb {split.get('micro_batch')} x accum {split.get('grad_accum')}",
        d.get("status") or d.get("failure") or "n/a",
        _num(d.get("tokens_per_s"), ",.0f"),
        _num(d.get("mfu_spec"), ".1%"),
        _num(d.get("mfu_ceiling"), ".1%"),
        _num(d.get("comms_frac"), ".1%"),
        _num(d.get("single_gpu_tokens_per_s"), ",.0f"),
        _num(d.get("scaling_efficiency"), ".1%"),
    ]
    headers = [
        "config",
        "per process",
        "status",
        "tokens/s",
        "MFU spec",
        "MFU ceiling",
        "comms",
        "1-GPU tokens/s",
        "scaling",
    ]
    return [
        f"Data-parallel trial (`{d.get('command')}`), MFU against {n} devices, beside the "
        f"single-GPU figure ({d.get('single_gpu_source')}):",
        "",
        *_table(headers, [row]),
    ]


def readme_section(ev: dict[str, Any]) -> str:
    """The whole markdown block for the README's GPU section."""
    multi = [s["wall_s"] for s in ev.get("stages") or [] if s["stage"] in MULTI_GPU_STAGES]
    total = ev.get("wall_s_total")
    if total is not None:
        total -= sum(multi)  # the single-GPU stages' device time, against their budget
    extra = ""
    if multi:
        extra = (
            f"; the data-parallel stage, extra: {sum(multi):.0f} s of "
            f"{ev.get('multi_gpu_budget_s') or 0:.0f} s"
        )
    ddp = ddp_lines(ev)
    parts = [
        f"Profile `{ev.get('profile')}`: {ev.get('model')} at {ev.get('tokens_per_step', 0):,} "
        f"tokens per step; device time {_num(total, '.0f')} s of a "
        f"{ev.get('total_budget_s', 0):.0f} s budget{extra}.",
        "",
        device_line(ev),
        "",
        *stages_table(ev),
        "",
        "Memory model against measured peaks:",
        "",
        *memory_table(ev),
        "",
        "Sweep trials:",
        "",
        *trials_table(ev),
        "",
        "Race contenders, the search's figure against real full steps:",
        "",
        *race_table(ev),
        "",
        *summary_lines(ev),
        *(["", *ddp] if ddp else []),
    ]
    return "\n".join(parts) + "\n"
