"""The trial forecast (sweeper/forecast/) against a GPU run's own trial results.

    python -m scripts.bench.forecast [--run docs/gpu/2026-11-26-h200] [--device "NVIDIA H200"]

For every trial result.json in the folder: the forecast wall from the trial's config alone (the
step from the FLOP arithmetic, compile cold or from the cache as the result says it was), beside
the wall the trial measured, and their difference. The H200 figures are in-sample: its set-up and
compile costs were fitted to these very files (sweeper/forecast/costs.py), so this checks the
model's shape (phases, per-graph compile, float8's own cost), not a prediction of new runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from scripts.bench.harness import REPO, bench_parser
from sweeper.forecast import trial_time
from sweeper.space.limits import predict_step
from train.core.compile_graphs import flat


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__)
    p.add_argument("--run", type=Path, default=REPO / "docs" / "gpu" / "2026-11-26-h200")
    p.add_argument("--device", default="NVIDIA H200")
    args = p.parse_args(argv)
    rows = []
    for path in sorted(args.run.glob("*.json")):
        result = json.loads(path.read_text())
        if result.get("status") != "complete" or "config" not in result:
            continue
        cfg = flat(result["config"])
        step = predict_step(cfg, device_name=args.device, device_type="cuda", bf16_supported=True)
        warm = (result.get("compile") or {}).get("cache", {}).get("state") == "hit"
        t = trial_time(
            cfg,
            step.predicted_s,
            device_type="cuda",
            device_name=args.device,
            num_params=step.num_params,
            warm=warm,
        )
        rows.append((path.name, t.total_s, result["wall_s"], warm))
    if not rows:
        print(f"no complete trial result with a config in {args.run}")
        return 1
    print(f"forecast vs measured trial wall, {args.device}, {args.run}:")
    for name, predicted, measured, warm in rows:
        print(
            f"  {name:<20} forecast {predicted:7.1f} s  measured {measured:7.1f} s  "
            f"{100 * (predicted / measured - 1):+6.1f}%  ({'cache hit' if warm else 'cold'})"
        )
    worst = max(abs(p / m - 1) for _, p, m, _ in rows)
    print(f"largest difference: {100 * worst:.1f}% over {len(rows)} trials")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
