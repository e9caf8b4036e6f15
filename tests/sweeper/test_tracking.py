"""SweepTracker against a real `mlflow server` (read back through REST), a dead and a silent server,
and the SQLite default; plus the pure helpers (metric names, run names)."""

from __future__ import annotations

import inspect
import json
import logging
import os
import socket
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from sweeper.tracking.mlflow_run import HTTP_RETRIES_ENV, HTTP_TIMEOUT_ENV, SweepTracker
from sweeper.tracking.names import (
    MAX_PARAM_CHARS,
    default_tracking_uri,
    final_metrics,
    trial_run_name,
)
from sweeper.tracking.protocol import NullTracker, Tracker, TrialLog
from tests.servers import dead_pid, free_port, running_mlflow_server

TRACKER_LOGGER = "sweeper.tracking"


# -- pure helpers ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("number", "kind", "repeat", "name"),
    [
        (7, "search", None, "trial-007"),
        (7, "verify", 2, "verify-007-r2"),
        (123, "search", None, "trial-123"),
    ],
)
def test_trial_run_name(number: int, kind: str, repeat: int | None, name: str) -> None:
    assert trial_run_name(number, kind, repeat) == name


def test_final_metrics_names_and_skips_missing() -> None:
    metrics = final_metrics(fake_result(tokens_per_s=2000.0))
    assert metrics["throughput/tokens_per_s"] == 2000.0
    assert metrics["time/step_s_p90"] == pytest.approx(0.55)
    assert metrics["time/data_wait_frac"] == pytest.approx(0.1)
    assert metrics["memory/peak_gib"] == pytest.approx(1.5)
    assert "mfu/spec" not in metrics  # None on a device without a spec peak
    assert metrics["mfu/ceiling"] == pytest.approx(0.31)


@pytest.mark.parametrize(
    ("env", "expected"),
    [(None, "sqlite:///{cwd}/mlflow.db"), ("http://mlflow:5000", "http://mlflow:5000")],
)
def test_default_tracking_uri(monkeypatch, tmp_path: Path, env: str | None, expected: str) -> None:
    if env is None:
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    else:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", env)
    assert default_tracking_uri(tmp_path) == expected.format(cwd=tmp_path.resolve())


def test_constructor_validates() -> None:
    with pytest.raises(ValueError, match="experiment must be"):
        SweepTracker(tracking_uri="sqlite:///x.db", experiment="", artifact_location=None)
    with pytest.raises(ValueError, match="request_timeout_s must be >= 1"):
        SweepTracker(tracking_uri=None, experiment="e", artifact_location=None, request_timeout_s=0)
    with pytest.raises(ValueError, match="max_retries must be >= 0"):
        SweepTracker(tracking_uri=None, experiment="e", artifact_location=None, max_retries=-1)


def test_the_mlflow_tracker_and_the_null_one_are_trackers() -> None:
    """The engine, the search and the race take a `Tracker`; its methods are SweepTracker's,
    keyword for keyword, and the no-op stand-in answers each of them."""
    mlflow = SweepTracker(tracking_uri="sqlite:///x.db", experiment="e", artifact_location=None)
    assert isinstance(mlflow, Tracker) and isinstance(NullTracker(), Tracker)
    for name in ("start_sweep", "log_trial", "tag_winner", "log_best", "log_cost", "finish"):
        wanted = inspect.signature(getattr(Tracker, name)).parameters
        assert inspect.signature(getattr(SweepTracker, name)).parameters.keys() == wanted.keys()


# -- fakes ----------------------------------------------------------------------------------------
def fake_result(*, tokens_per_s: float | None, status: str = "complete", failure=None) -> dict:
    """A result.json as train/core/result.py writes it (schema v1), trimmed to what we read."""
    intervals = [
        {"step": s, "tokens_per_s": 1900.0 + s, "step_time_s": 0.5, "data_wait_frac": 0.1}
        for s in (10, 20, 30)
    ]
    return {
        "schema_version": 1,
        "status": status,
        "failure": failure,
        "tokens_per_s": tokens_per_s,
        "tokens_per_step": 8192,
        "step_time_s": {
            "p50": 0.5,
            "p90": 0.55,
            "mean": 0.51,
            "std": 0.02,
            "cv": 0.04,
            "min": 0.48,
            "max": 0.6,
            "n": 30,
        },
        "warmup_s": 3.2,
        "compile_s": 0.0,
        "time_frac": {
            "compute": 0.8,
            "data_wait": 0.1,
            "optimizer": 0.05,
            "checkpoint": 0.0,
            "other": 0.05,
        },
        "flops_per_token": 7.1e8,
        "mfu": {"spec": None, "ceiling": 0.31},
        "peak_memory_gib": 1.5,
        "loss": {"first": 10.9, "last": 9.7},
        "device": {"type": "cpu", "name": "cpu-2-cores", "dtype": "fp32", "peak_flops": None},
        "intervals": intervals if tokens_per_s is not None else [],
        "wall_s": 21.0,
    }


def fake_job_dir(root: Path, name: str, result: dict | None, *, trace: bool = False) -> Path:
    job = root / name
    (job / "trial").mkdir(parents=True)
    (job / "trial_config.yaml").write_text("data:\n  num_workers: 2\nbatch:\n  micro_batch: 4\n")
    (job / "trial.log").write_text("step 10 tokens/s 1910\nstep 20 tokens/s 1920\n")
    if result is not None:
        (job / "result.json").write_text(json.dumps(result))
    if trace:
        (job / "trial" / "trace.json").write_text('{"traceEvents": []}')
    return job


def log_fake_sweep(tracker: SweepTracker, root: Path) -> dict[str, str | None]:
    """start_sweep, three trials (complete + profiled, pruned, failed), a verification run,
    the winner and best.yaml + a PNG; returns the trial run ids by name."""
    tracker.start_sweep(
        run_name="sweep-test",
        params={"search_space": "x" * 7000, "sampler": "tpe", "objective": "tokens_per_s"},
        tags={"git_commit": "abc123", "storage": "postgresql://optuna:hunter2@db/optuna"},
    )
    ok = fake_result(tokens_per_s=2000.0)
    pruned = fake_result(tokens_per_s=900.0, status="pruned")
    oom = fake_result(
        tokens_per_s=None, status="failed", failure={"kind": "oom", "message": "CUDA out of memory"}
    )

    def log(
        job: str,
        number: int,
        state: str,
        workers: int,
        mb: int,
        result: dict,
        *,
        reason: str | None = None,
        trace: bool = False,
        **kw,
    ) -> str | None:
        """One trial logged from the fake job dir `root/job`, with these two params."""
        return tracker.log_trial(
            TrialLog(
                number=number,
                state=state,
                reason=reason,
                params={"data.num_workers": workers, "batch.micro_batch": mb},
                result=result,
                job_dir=fake_job_dir(root, job, result, trace=trace),
                **kw,
            )
        )

    ids = {
        "trial-000": log("0", 0, "complete", 2, 4, ok, trace=True),
        "trial-001": log("1", 1, "pruned", 0, 8, pruned),
        "trial-002": log("2", 2, "oom", 4, 16, oom, reason="CUDA out of memory"),
        "verify-000-r1": log("3", 0, "complete", 2, 4, ok, kind="verify", repeat=1),
    }
    best = root / "best.yaml"
    best.write_text("data:\n  num_workers: 2\n")
    png = root / "summary.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\nnot-really")
    tracker.tag_winner(ids["trial-000"])
    tracker.log_best(
        best_yaml=best,
        extra_artifacts=[png],
        metrics={"best/tokens_per_s": 2000.0, "best/cv": 0.01, "note": "x"},
        tags={"verdict": "decisive"},
    )
    tracker.finish()
    return ids


# -- a real server, read back through its REST API -------------------------------------------------
@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory) -> str:
    with running_mlflow_server(tmp_path_factory.mktemp("mlflow-server")) as uri:
        yield uri


def rest(uri: str, endpoint: str, body: dict | None = None, **query) -> dict:
    url = f"{uri}/api/2.0/mlflow/{endpoint}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def artifact_paths(uri: str, run_id: str, path: str = "") -> set[str]:
    """Every file under `path` of a run's artifacts, recursively, as the REST API lists them."""
    listing = rest(uri, "artifacts/list", run_id=run_id, path=path)
    out: set[str] = set()
    for f in listing.get("files", []):
        out |= artifact_paths(uri, run_id, f["path"]) if f["is_dir"] else {f["path"]}
    return out


def test_sweep_is_browsable_through_the_server(mlflow_uri: str, tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger=TRACKER_LOGGER)
    tracker = SweepTracker(
        tracking_uri=mlflow_uri, experiment="throughput-test", artifact_location=None
    )
    ids = log_fake_sweep(tracker, tmp_path)
    assert not tracker.disabled, caplog.text
    assert all(ids.values())
    assert tracker.last_log_s is not None and tracker.last_log_s > 0
    assert tracker.overhead_s >= tracker.last_log_s

    exp = rest(mlflow_uri, "experiments/get-by-name", experiment_name="throughput-test")
    exp_id = exp["experiment"]["experiment_id"]
    runs = rest(mlflow_uri, "runs/search", {"experiment_ids": [exp_id], "max_results": 100})["runs"]
    by_name = {r["info"]["run_name"]: r for r in runs}
    assert set(by_name) == {"sweep-test", *ids}

    def tags(run: dict) -> dict:
        return {t["key"]: t["value"] for t in run["data"].get("tags", [])}

    def params(run: dict) -> dict:
        return {p["key"]: p["value"] for p in run["data"].get("params", [])}

    def metrics(run: dict) -> dict:
        return {m["key"]: m["value"] for m in run["data"].get("metrics", [])}

    parent = by_name["sweep-test"]
    parent_id = parent["info"]["run_id"]
    assert parent["info"]["status"] == "FINISHED"
    assert "mlflow.parentRunId" not in tags(parent)
    assert tags(parent)["winner_run_id"] == ids["trial-000"]
    assert tags(parent)["storage"] == "postgresql://optuna:***@db/optuna"  # never the password
    assert len(params(parent)["search_space"]) == MAX_PARAM_CHARS  # truncated to MLflow's limit
    assert metrics(parent)["best/tokens_per_s"] == 2000.0
    assert "note" not in metrics(parent)

    for name in ids:
        run = by_name[name]
        assert tags(run)["mlflow.parentRunId"] == parent_id
        assert params(run)["data.num_workers"] in ("0", "2", "4")
    ok, pruned, oom = by_name["trial-000"], by_name["trial-001"], by_name["trial-002"]
    assert (tags(ok)["state"], tags(ok)["kind"]) == ("complete", "search")
    assert tags(ok)["winner"] == "true"
    assert metrics(ok)["throughput/tokens_per_s"] == 2000.0
    assert metrics(ok)["time/step_s_p50"] == 0.5
    assert "mfu/spec" not in metrics(ok)
    assert (pruned["info"]["status"], tags(pruned)["state"]) == ("FINISHED", "pruned")
    assert (oom["info"]["status"], tags(oom)["state"]) == ("FAILED", "oom")
    assert tags(oom)["failure_reason"] == "CUDA out of memory"
    assert tags(oom)["failure_kind"] == "oom"
    assert "throughput/tokens_per_s" not in metrics(oom)
    verify = by_name["verify-000-r1"]
    assert (tags(verify)["kind"], tags(verify)["repeat"]) == ("verify", "1")
    assert ok["info"]["end_time"] - ok["info"]["start_time"] >= 20_000  # backdated by wall_s

    history = rest(
        mlflow_uri,
        "metrics/get-history",
        run_id=ids["trial-000"],
        metric_key="interval/tokens_per_s",
    )["metrics"]
    assert sorted((m["step"], m["value"]) for m in history) == [
        (10, 1910.0),
        (20, 1920.0),
        (30, 1930.0),
    ]

    assert artifact_paths(mlflow_uri, ids["trial-000"]) == {
        "trial_config.yaml",
        "trial.log",
        "result.json",
        "trial/trace.json",
    }
    assert artifact_paths(mlflow_uri, ids["trial-001"]) == {
        "trial_config.yaml",
        "trial.log",
        "result.json",
    }
    assert artifact_paths(mlflow_uri, parent_id) == {"best.yaml", "summary.png"}
    assert caplog.records == []


# -- a server that is not there --------------------------------------------------------------------
def run_against_unreachable(
    uri: str, tmp_path: Path, caplog, **kwargs
) -> tuple[SweepTracker, float]:
    caplog.set_level(logging.WARNING, logger=TRACKER_LOGGER)
    tracker = SweepTracker(tracking_uri=uri, experiment="down", artifact_location=None, **kwargs)
    t0 = time.monotonic()
    ids = log_fake_sweep(tracker, tmp_path)  # must not raise
    elapsed = time.monotonic() - t0
    assert set(ids.values()) == {None}
    assert tracker.disabled
    warnings = [r for r in caplog.records if r.name == TRACKER_LOGGER]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "Optuna study" in warnings[0].getMessage()
    return tracker, elapsed


def test_dead_server_costs_seconds_and_warns_once(tmp_path: Path, caplog, monkeypatch) -> None:
    monkeypatch.delenv(HTTP_TIMEOUT_ENV, raising=False)
    monkeypatch.delenv(HTTP_RETRIES_ENV, raising=False)
    port = free_port()  # nothing listens there: connection refused
    uri = f"http://alice:hunter2@127.0.0.1:{port}"
    tracker, elapsed = run_against_unreachable(uri, tmp_path, caplog)
    assert elapsed < 15
    assert tracker.overhead_s < 15
    assert "hunter2" not in caplog.text
    assert f"alice:***@127.0.0.1:{port}" in caplog.text
    # our short timeouts applied to our calls only: nothing is left in the environment
    assert HTTP_TIMEOUT_ENV not in os.environ and HTTP_RETRIES_ENV not in os.environ


def test_silent_server_is_bounded_by_the_request_timeout(tmp_path: Path, caplog) -> None:
    with socket.socket() as sock:  # accepts connections (kernel backlog), never answers
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        uri = f"http://127.0.0.1:{sock.getsockname()[1]}"
        _, elapsed = run_against_unreachable(
            uri, tmp_path, caplog, request_timeout_s=1, max_retries=0
        )
    assert elapsed < 10


# -- no URI: a SQLite file in the working directory ------------------------------------------------
def test_sqlite_default_in_cwd(tmp_path: Path, monkeypatch, caplog) -> None:
    from mlflow.tracking import MlflowClient

    caplog.set_level(logging.WARNING, logger=TRACKER_LOGGER)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    tracker = SweepTracker(tracking_uri=None, experiment="gpt2 tiny/cpu", artifact_location=None)
    assert tracker.tracking_uri == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    ids = log_fake_sweep(tracker, tmp_path / "jobs")
    assert not tracker.disabled, caplog.text
    assert (tmp_path / "mlflow.db").is_file()
    assert not (tmp_path / "mlruns").exists()

    client = MlflowClient(tracking_uri=tracker.tracking_uri)
    exp = client.get_experiment_by_name("gpt2 tiny/cpu")
    art = tmp_path / "mlartifacts" / "gpt2_tiny_cpu"
    assert exp.artifact_location == art.resolve().as_uri()
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1 + len(ids)
    assert (art / ids["trial-000"] / "artifacts" / "trial" / "trace.json").is_file()
    assert (art / tracker.parent_run_id / "artifacts" / "best.yaml").is_file()
    history = client.get_metric_history(ids["trial-000"], "interval/step_s")
    assert [m.step for m in sorted(history, key=lambda m: m.step)] == [10, 20, 30]


def test_a_resumed_sweep_continues_the_interrupted_parent_run(tmp_path: Path) -> None:
    """SIGKILL leaves a sweep's parent run RUNNING; the next sweep of the same study on this host
    continues it, while a finished one, another study or a live owner gets a new run."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"

    def start(study: str) -> SweepTracker:
        t = SweepTracker(tracking_uri=uri, experiment="exp", artifact_location=None)
        t.start_sweep(run_name=f"sweep-{study}", params={"n_trials": 4}, tags={"study": study})
        assert not t.disabled
        return t

    client = MlflowClient(tracking_uri=uri)
    first = start("s1")
    # a live owner (this very process) is never taken over
    assert start("s1").parent_run_id != first.parent_run_id
    # the owner "dies": its run is still RUNNING
    for run in client.search_runs([first.experiment_id]):
        client.set_tag(run.info.run_id, "sweep_owner", f"{socket.gethostname()}:{dead_pid()}")
    resumed = start("s1")
    newest_interrupted = client.search_runs(
        [first.experiment_id], order_by=["attributes.start_time DESC"]
    )[0]
    assert resumed.parent_run_id == newest_interrupted.info.run_id
    tags = client.get_run(resumed.parent_run_id).data.tags
    assert tags["resumed"] == "1"
    assert tags["sweep_owner"] == f"{socket.gethostname()}:{os.getpid()}"
    assert client.get_run(resumed.parent_run_id).data.params == {"n_trials": "4"}
    # another study, or after the run finished: a new parent run
    assert start("s2").parent_run_id != resumed.parent_run_id
    resumed.finish()
    runs_before = len(client.search_runs([first.experiment_id]))
    client.set_tag(resumed.parent_run_id, "sweep_owner", f"{socket.gethostname()}:{dead_pid()}")
    for run in client.search_runs([first.experiment_id]):
        if run.data.tags.get("study") == "s1" and run.info.status == "RUNNING":
            client.set_terminated(run.info.run_id)
    assert start("s1").parent_run_id != resumed.parent_run_id
    assert len(client.search_runs([first.experiment_id])) == runs_before + 1
