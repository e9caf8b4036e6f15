"""The numerics guard in a real CPU sweep (issue 22, must-show 3): Optuna and MLflow on SQLite,
trials in child processes. The starting config trains in bf16; the grid searches fp32 and the
test-only precision loss hooks.fault=coarse_weights. fp32 against bf16 passes the guard and races;
the planted loss is caught, not raced and not exported; the report prints the tolerance's
derivation and both curves; MLflow holds the curves by step; best.yaml's provenance records the
check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.sweep_helpers import finished_sweep, sweep_dirs

STEPS = 12
CONF = Path(__file__).parents[1] / "conf"  # search/guard_demo.yaml: the grid below


@pytest.mark.slow  # 4 search trials, 4 curve runs and a race: ~2 min on a loaded 2-core CPU
def test_the_guard_catches_the_planted_loss_and_passes_fp32_against_bf16(tmp_path: Path) -> None:
    proc, study = finished_sweep(
        tmp_path,
        "guard",
        f"hydra.searchpath=[file://{CONF}]",
        "search=guard_demo",
        # the starting config: bf16 (fp32 is the candidate), several times slower than fp32 on
        # this CPU (no bf16 matrix units), so both fp32 points race whatever the noise
        "runtime.dtype=bf16",
        "runtime.threads=1",
        "data.num_workers=0",
        f"hydra.sweeper.guard.steps={STEPS}",
        # not the CPU cap: a busy machine must not skip the guard
        "hydra.sweeper.budget.max_wall_s=1800",
        # both fp32 points race whatever the load: on a busy CPU one once measured 71% of the
        # other, out of the default 80% (the bf16 points stay several times slower)
        "hydra.sweeper.verify.within=0.5",
    )
    params = {t.number: t.params for t in study.trials}
    fp32 = next(
        n for n, p in params.items() if p == {"runtime.dtype": "fp32", "hooks.fault": "none"}
    )
    planted = {n for n, p in params.items() if p["hooks.fault"] == "coarse_weights"}
    guard = study.user_attrs["numerics_guard"]
    assert guard["candidates"], proc.stdout[-5000:]  # a planted point within 20% of the best
    verdicts = {int(n): rec["verdict"] for n, rec in guard["candidates"].items()}
    assert verdicts.get(fp32) == "passed", guard
    caught = [n for n in planted if verdicts.get(n) == "failed"]
    assert caught, f"no planted trial was guarded: {verdicts}"
    assert set(study.user_attrs["race"]["contenders"]).isdisjoint(planted)  # never raced
    assert study.user_attrs["verdict"]["winner_trial"] not in planted
    for n in caught:
        rec = guard["candidates"][str(n)]
        assert rec["divergence"] > guard["tolerance"]["value"]
        assert len(rec["curve"]) == len(rec["reference_curve"]) == STEPS
    assert [len(c) for c in guard["reference_curves"].values()] == [STEPS, STEPS]

    out = proc.stdout
    assert "numerics guard: tolerance" in out and "x seed spread" in out  # the derivation
    assert "loss by step, starting config (seed 1337):" in out
    assert "FAILED: not raced, never exported" in out
    assert f"loss by step, trial {caught[0]} (seed 1337, same batches):" in out

    (sweep_dir,) = sweep_dirs(tmp_path)
    # the reference's two seeds trained in one process: one result holds both curves
    results = [json.loads(p.read_text()) for p in sweep_dir.rglob("result.json")]
    (ref,) = [r for r in results if r["config"]["trial"]["seeds"] == 2]
    (more,) = ref["loss"]["more_seeds"]
    assert guard["reference_curves"] == {"1337": ref["loss"]["steps"], "1338": more["steps"]}
    best = yaml.safe_load((sweep_dir / "best.yaml").read_text())
    assert "hooks" not in best  # a test hook is never exported
    check = best["provenance"]["numerics_guard"]
    if best["runtime"]["dtype"] == "fp32":
        assert check["verdict"] == "passed" and "runtime.dtype bf16 -> fp32" in check["changes"]
        assert "seed spread" in check["tolerance"]["derivation"]
    else:  # the starting config won the race: its math needed no check
        assert check["verdict"] == "not needed"

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (exp,) = [e for e in client.search_experiments() if e.name.startswith("guard")]
    runs = client.search_runs([exp.experiment_id], filter_string="tags.kind = 'guard'")
    by_role = {}
    for r in runs:
        by_role.setdefault(r.data.tags["guard.role"], []).append(r)
        history = client.get_metric_history(r.info.run_id, "guard/loss")
        assert [m.step for m in sorted(history, key=lambda m: m.step)] == list(range(STEPS))
    assert len(by_role["reference"]) == 2
    failed = [r for r in by_role["candidate"] if r.data.tags["guard.verdict"] == "failed"]
    assert failed
    assert len(client.get_metric_history(failed[0].info.run_id, "guard/reference_loss")) == STEPS
