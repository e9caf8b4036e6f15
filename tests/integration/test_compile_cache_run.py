"""A real sweep whose two search trials compile one graph (they differ only in data workers): the
first misses the sweep's compile cache, the second (forked from the zygote, which imported torch
before it) finds the graph there, both are charged the same compile by time_to_train, and the
production run from best.yaml compiles from the same folder."""

from __future__ import annotations

import json
import os

from sweeper.study.objective import ObjectiveConfig, result_train_time
from tests.sweep_helpers import finished_sweep, sweep_dirs, train_best


def _results(sweep_dir, jobs):
    return [json.loads((sweep_dir / str(j) / "result.json").read_text()) for j in jobs]


def test_trials_sharing_a_graph_compile_it_once_and_are_charged_alike(tmp_path):
    proc, study = finished_sweep(
        tmp_path,
        "cache",
        "search=smoke",
        "hydra.sweeper.sampler=grid",
        "hydra.sweeper.n_trials=0",
        "hydra.sweeper.verify.top_k=1",
        "hydra.sweeper.verify.repeats=1",
        "hydra.sweeper.mlflow.enabled=false",
        "hydra.sweeper.objective=time_to_train",
        "hydra.sweeper.space={batch.micro_batch: 4, data.num_workers: 'choice(0, 1)'}",
        "runtime.compile=default",
    )
    (sweep_dir,) = sweep_dirs(tmp_path)
    said = proc.stdout + proc.stderr + (sweep_dir / "sweep.log").read_text()
    # the trials were forked from the zygote (whose torch was imported before any trial ran)
    assert "trials fork from a preloaded torch" in said and "with exec" not in said
    folder = tmp_path / "sweeps" / "compile_cache"  # auto: beside sweeps/optuna.db
    first, second = _results(sweep_dir, [0, 1])
    assert first["config"]["data"]["num_workers"] != second["config"]["data"]["num_workers"]
    a, b = first["compile"]["cache"], second["compile"]["cache"]
    assert a["graph"] == b["graph"] is not None
    assert a["setting"] == b["setting"] == str(folder)
    assert (a["state"], b["state"]) == ("miss", "hit")
    assert a["fxgraph_misses"] > 0 and b["fxgraph_hits"] > 0 and b["fxgraph_misses"] == 0
    assert second["compile_s"] < first["compile_s"]
    # the graph's compile is measured once, by the trial that missed, and charged to both
    assert a["graph_compile_s"] == b["graph_compile_s"] == first["compile_s"]
    assert b["graph_compile_by"] == str(sweep_dir / "0")
    objective = ObjectiveConfig(name="time_to_train", planned_steps=100)
    charges = [result_train_time(r, objective).compile_s for r in (first, second)]
    assert charges[0] == charges[1] == first["compile_s"]
    # the folder holds the graphs (the trials really used it) and the record
    assert any((folder / "fxgraph").rglob("*")) and any((folder / "aotautograd").rglob("*"))
    record = json.loads((folder / "graphs.json").read_text())["graphs"]
    assert [v["measured_by"] for v in record.values()] == [str(sweep_dir / "0")]
    # the race's fresh processes found the graph too
    races = [d for d in sweep_dir.iterdir() if d.name.isdigit() and int(d.name) >= 2]
    assert races
    raced = _results(sweep_dir, [d.name for d in races])
    assert {r["compile"]["cache"]["state"] for r in raced} == {"hit"}
    assert {t.value is not None for t in study.trials} == {True}

    # best.yaml carries the folder, and the production run compiles from it, whatever the
    # environment says: another folder named there stays unused
    best = (sweep_dir / "best.yaml").read_text()
    assert f"compile_cache: {folder}" in best and "compile_record: ''" in best
    elsewhere = tmp_path / "elsewhere"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(elsewhere)}
    train = train_best(sweep_dir, tmp_path, env=env, timeout=600)
    assert train.returncode == 0, train.stderr[-3000:]
    assert not elsewhere.exists() or not any(elsewhere.rglob("*.py"))
