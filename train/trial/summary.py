"""The one-screen summary a trial prints when it ends (`python -m train.trial`)."""

from __future__ import annotations

from pathlib import Path

from train.core.result import TrialResult


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _float8_lines(result: TrialResult) -> list[str]:
    """The summary's float8 line: which matmuls ran float8 and what the MFU above means."""
    f8 = result.get("float8")
    if not f8:
        return []
    return [
        f"  float8     {f8['recipe']}{' (emulated)' if f8['emulated'] else ''}: "
        f"{f8['linears_converted']} of {f8['linears_total']} linears ran float8 matmuls; "
        f"MFU is {result['mfu'].get('basis')}"
    ]


def format_summary(result: TrialResult, path: Path) -> str:
    """The one-screen human summary printed at the end of a trial."""
    if result["status"] == "failed":
        f = result["failure"]
        assert f is not None  # a failed result always carries its failure
        return f"trial FAILED ({f['kind']}): {f['message'].splitlines()[0]}\nresult: {path}"
    st, fr, d = result["step_time_s"], result["time_frac"], result["device"]
    assert st is not None and fr is not None and d is not None and result["compile"] is not None
    lines = [
        f"trial {result['status']}: {result['tokens_per_s']:,.0f} tokens/s on {d['name']} "
        f"({d['type']}, {d['dtype']}, attention={result['attention_backend']})",
        f"  step time  p50 {st['p50'] * 1e3:.1f} ms  p90 {st['p90'] * 1e3:.1f} ms  "
        f"cv {_pct(st['cv'])}  n={st['n']}",
        f"  warm-up    {result['warmup_s']:.2f} s (compile {result['compile_s']:.2f} s)",
        f"  time split compute {_pct(fr['compute'])}  data wait {_pct(fr['data_wait'])}  "
        f"optimizer {_pct(fr['optimizer'])}  checkpoint {_pct(fr['checkpoint'])}  "
        + (f"comms {_pct(fr['comms'])}  " if "comms" in fr else "")
        + f"other {_pct(fr['other'])}"
        + (f"  ({result['world_size']} processes)" if (result.get("world_size") or 1) > 1 else ""),
        f"  MFU        spec {_pct(result['mfu']['spec'])} "
        f"(peak {d['peak_source'] or 'none for this device'})  "
        f"ceiling {_pct(result['mfu']['ceiling'])} (measured matmul)",
        *_float8_lines(result),
        f"  loss       {result['loss']['first']:.3f} -> {result['loss']['last']:.3f}",
    ]
    proj = result.get("projection")
    if proj:
        lines.append(
            f"  projected  full steps of {proj['grad_accum']} micro-batches from "
            f"{proj['short_step_s']['n']} measured steps of {proj['micro_batches_per_step']} "
            f"(p50 {proj['short_step_s']['p50'] * 1e3:.1f} ms)"
        )
    if result["compile"]["recompiled_in_window"]:
        lines.append("  WARNING: torch.compile recompiled inside the measured window")
    lines.append(f"result: {path}")
    return "\n".join(lines)
