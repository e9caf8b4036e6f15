"""Integration tests of the bounded trial (train/trial/measurement.py) on CPU: the JSON contract,
honest timing (warm-up kept out of the window, the time budget), knobs that must move the numbers,
failures that must become results, and the CLI's exit codes and files.

Most trials run in-process on the tiny preset with 512 tokens a step (tests/conftest.py FAST); the
machine is a shared 2-core CPU, so timing assertions only test large, planted effects.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from pathlib import Path

import pytest
import torch

import train.core.progress as progress_mod
import train.trial.measurement as trial_mod
from tests.conftest import FAST, compose_config, fast_overrides, run_cli
from train.core.flops import flops_per_token
from train.trial.measurement import run_trial

# The result contract (train/core/result.py TrialResult, SCHEMA_VERSION): every key, always.
SCHEMA_KEYS = {
    "schema_version",
    "status",
    "failure",
    "tokens_per_s",
    "tokens_per_step",
    "step_time_s",
    "warmup_s",
    "compile_s",
    "compile",
    "time_frac",
    "checkpoint_s",
    "checkpoint_bytes",
    "checkpoint_save",
    "flops_per_token",
    "mfu",
    "peak_memory_gib",
    "memory_kind",
    "loss",
    "device",
    "attention_backend",
    "fused_optimizer",
    "device_samples",
    "intervals",
    "trace",
    "wall_s",
    "fingerprint",
    "config",
    "projection",
    "full_step_estimate_s",
    "memory",
    "world_size",
    "float8",
    "setup",
}
STEP_TIME_KEYS = {"p50", "p90", "mean", "std", "cv", "min", "max", "n"}
TIME_FRAC_KEYS = {"compute", "data_wait", "optimizer", "checkpoint", "other"}
COMPILE_KEYS = {
    "mode",
    "frames_compiled_window",
    "graph_breaks_window",
    "recompiled_in_window",
    "graph_breaks_total",
    "cache",
}
DEVICE_KEYS = {
    "type",
    "name",
    "dtype",
    "peak_flops",
    "peak_source",
    "ceiling_flops",
    "ceiling_source",
}
INTERVAL_KEYS = {"step", "tokens_per_s", "step_time_s", "data_wait_frac"}


def _trial(cfg, tmp_path: Path, name: str = "trial.json") -> tuple[dict, Path]:
    out = tmp_path / "out" / name
    result = run_trial(cfg, out_path=out)
    return result, out


def _assert_failed(result: dict, out: Path, kind: str) -> None:
    assert result["status"] == "failed"
    assert result["failure"]["kind"] == kind
    assert set(result) == SCHEMA_KEYS
    assert result["tokens_per_s"] is None and result["step_time_s"] is None
    on_disk = json.loads(out.read_text())  # a failure is a result too: the file exists
    assert on_disk["status"] == "failed" and on_disk["failure"]["kind"] == kind


@pytest.fixture(scope="module")
def baseline(synthetic_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """One plain trial shared by the contract tests (and used to size the planted effects)."""
    tmp = tmp_path_factory.mktemp("baseline")
    cfg = compose_config([*fast_overrides(synthetic_dir, tmp / "ckpt"), "trial.report_every=2"])
    result, out = _trial(cfg, tmp)
    assert result["status"] == "complete", result["failure"]
    return cfg, result, out


# -- the JSON contract -----------------------------------------------------------------------------


def test_result_has_every_schema_key(baseline) -> None:
    _, result, out = baseline
    assert set(result) == SCHEMA_KEYS
    assert result["schema_version"] == 7
    assert result["world_size"] == 1 and "comms" not in result["time_frac"]
    assert len(result["loss"]["steps"]) == result["step_time_s"]["n"] + 1  # warm-up step first
    assert result["status"] == "complete" and result["failure"] is None
    assert set(result["step_time_s"]) == STEP_TIME_KEYS
    assert set(result["time_frac"]) == TIME_FRAC_KEYS
    assert set(result["compile"]) == COMPILE_KEYS
    assert set(result["device"]) == DEVICE_KEYS
    assert set(result["mfu"]) == {"spec", "ceiling", "basis"}
    assert result["mfu"]["basis"] == "fp32 dense peak" and result["float8"] is None
    assert set(result["loss"]) == {"first", "last", "steps", "lr"}
    assert json.loads(out.read_text()) == json.loads(json.dumps(result, default=str))


def test_every_step_trains_at_the_production_schedules_lr(baseline) -> None:
    # warm-up step 0 first, then the window's: the lr the production run gives those steps
    from train.core.schedule import scheduled_lr

    cfg, result, _ = baseline
    lrs = result["loss"]["lr"]
    assert len(lrs) == len(result["loss"]["steps"])
    assert lrs == [pytest.approx(scheduled_lr(cfg, i)) for i in range(len(lrs))]
    assert lrs[0] < cfg.optim.lr and lrs == sorted(lrs)  # inside the warm-up: rising


def test_time_fractions_sum_to_one(baseline) -> None:
    fracs = baseline[1]["time_frac"]
    assert sum(fracs.values()) == pytest.approx(1.0, abs=1e-6)
    assert all(0.0 <= f <= 1.0 for f in fracs.values()), fracs
    assert fracs["compute"] > 0.3, fracs  # a tiny model with no planted stall is compute-bound


def test_step_count_and_rate_are_consistent(baseline) -> None:
    cfg, result, _ = baseline
    st = result["step_time_s"]
    n = st["n"]
    assert cfg.trial.min_steps <= n <= cfg.trial.max_steps
    assert 0 < st["min"] <= st["p50"] <= st["p90"] <= st["max"]
    assert result["tokens_per_step"] == 512
    # tokens/s is tokens over the summed measured step times (mean x n), not a median guess
    expected = result["tokens_per_step"] * n / (st["mean"] * n)
    assert result["tokens_per_s"] == pytest.approx(expected, rel=0.01)
    # one interval per report_every (=2) measured steps
    assert [i["step"] for i in result["intervals"]] == list(range(2, n + 1, 2))
    for interval in result["intervals"]:
        assert set(interval) == INTERVAL_KEYS and interval["tokens_per_s"] > 0


def test_flops_and_mfu_on_cpu(baseline) -> None:
    cfg, result, _ = baseline
    m = cfg.model
    assert result["flops_per_token"] == pytest.approx(
        flops_per_token(
            n_layer=m.n_layer,
            n_head=m.n_head,
            n_embd=m.n_embd,
            seq_len=m.block_size,
            vocab_size=m.vocab_size,
        ),
        rel=1e-9,
    )
    assert result["mfu"]["spec"] is None  # no spec-sheet peak for a CPU: never a made-up one
    dev = result["device"]
    assert dev["type"] == "cpu" and dev["dtype"] == "fp32"
    assert dev["peak_flops"] is None and dev["peak_source"] is None
    assert dev["ceiling_flops"] > 0 and dev["ceiling_source"]
    assert 0 < result["mfu"]["ceiling"] < 1.5
    achieved = result["tokens_per_s"] * result["flops_per_token"]
    assert result["mfu"]["ceiling"] == pytest.approx(achieved / dev["ceiling_flops"], rel=1e-6)


def test_loss_fingerprint_and_config_echo(baseline) -> None:
    cfg, result, _ = baseline
    first, last = result["loss"]["first"], result["loss"]["last"]
    assert math.isfinite(first) and math.isfinite(last)
    # an untrained GPT-2 predicts ~uniformly: the first loss is near ln(vocab_size) = 8.32
    assert first == pytest.approx(math.log(cfg.model.vocab_size), abs=0.5)
    fp = result["fingerprint"]
    assert fp["torch"] == torch.__version__
    assert fp["seed"] == cfg.runtime.seed
    assert "git_commit" in fp
    assert result["config"] == dataclasses.asdict(cfg)
    assert result["compile"]["mode"] == "none" and result["compile_s"] == 0.0
    assert result["wall_s"] > result["warmup_s"] > 0


# -- honest timing ---------------------------------------------------------------------------------


def test_compile_warmup_stays_out_of_the_window(make_config, tmp_path: Path) -> None:
    """The one compile test: torch.compile's seconds land in warmup_s, not in any measured step."""
    cfg = make_config(
        "runtime.compile=default", "trial.warmup_steps=2", "trial.max_steps=3", "trial.min_steps=2"
    )
    result, _ = _trial(cfg, tmp_path)
    assert result["status"] == "complete", result["failure"]
    st, comp = result["step_time_s"], result["compile"]
    assert result["compile_s"] > 0
    assert result["warmup_s"] >= result["compile_s"] * 0.9
    assert st["max"] < result["warmup_s"] / 3, (st, result["warmup_s"])
    assert comp["mode"] == "default"
    assert comp["frames_compiled_window"] == 0 and comp["recompiled_in_window"] is False


def test_max_seconds_cuts_the_window_at_min_steps(make_config, tmp_path: Path) -> None:
    cfg = make_config("trial.max_seconds=0.001", "trial.min_steps=2", "trial.max_steps=10")
    result, _ = _trial(cfg, tmp_path)
    assert result["status"] == "complete"
    assert result["step_time_s"]["n"] == 2


# -- knobs move what they should -------------------------------------------------------------------


def test_checkpoint_every_two_steps(make_config, tmp_path: Path) -> None:
    cfg = make_config("checkpoint.every_steps=2", "trial.max_steps=6", "trial.min_steps=6")
    result, _ = _trial(cfg, tmp_path)
    assert result["status"] == "complete", result["failure"]
    n = result["step_time_s"]["n"]
    assert n == 6
    assert len(result["checkpoint_s"]) == n // 2
    assert all(s > 0 for s in result["checkpoint_s"])
    assert result["checkpoint_bytes"] > 0
    assert result["time_frac"]["checkpoint"] > 0
    # the trial measures the write, it keeps no files: its scratch folder is gone
    ckpt_root = tmp_path / "ckpt"
    assert not ckpt_root.exists() or not any(ckpt_root.iterdir())


def test_async_checkpoint_hides_a_slow_write(make_config, tmp_path: Path, baseline) -> None:
    """A planted 0.3 s write stalls every sync save; async saves return after a host snapshot.

    Saves are spaced ~1 s of steps apart (sized from the baseline step time, so the window stays
    ~2 s however fast a step is) so one async write finishes before the next save waits on it."""
    step_s = baseline[1]["step_time_s"]["p50"]
    every = min(50, max(2, math.ceil(1.0 / step_s)))
    knobs = (
        "checkpoint.slow_write_s=0.3",
        f"checkpoint.every_steps={every}",
        f"trial.max_steps={2 * every}",
        f"trial.min_steps={2 * every}",
    )
    sync, _ = _trial(make_config(*knobs, "checkpoint.mode=sync"), tmp_path, "sync.json")
    asyn, _ = _trial(make_config(*knobs, "checkpoint.mode=async"), tmp_path, "async.json")
    assert sync["status"] == asyn["status"] == "complete"
    assert len(sync["checkpoint_s"]) == len(asyn["checkpoint_s"]) == 2
    assert min(sync["checkpoint_s"]) >= 0.3  # the caller sat through the whole write
    assert sum(asyn["checkpoint_s"]) < 0.5 * sum(sync["checkpoint_s"])
    s_frac, a_frac = sync["time_frac"]["checkpoint"], asyn["time_frac"]["checkpoint"]
    # shares are relative to windows that load can stretch unequally: a 2x margin, not 20x
    assert s_frac > 2 * a_frac, (s_frac, a_frac)
    assert not any((tmp_path / "ckpt").glob("trial-*"))


def _data_wait_s(result: dict) -> float:
    st = result["step_time_s"]
    return result["time_frac"]["data_wait"] * st["mean"] * st["n"]


def test_data_latency_shows_as_data_wait_and_workers_hide_it(
    make_config, tmp_path: Path, baseline
) -> None:
    """Planted per-batch latency: the main process pays all of it, two prefetching workers don't.

    The latency per micro-batch is two baseline step times, so a step without workers is mostly
    waiting even if load slows compute several-fold. Two workers deliver batches twice as fast as
    the main process and keep a queue, so the seconds spent waiting fall below half; shares
    (time_frac) move with compute speed, so only the no-worker share is held to a bound."""
    latency = min(0.3, max(0.05, 2 * baseline[1]["step_time_s"]["p50"]))
    knobs = (f"hooks.inject_latency_s={latency:.3f}", "trial.warmup_steps=2", "trial.max_steps=6")
    main_proc, _ = _trial(make_config(*knobs, "data.num_workers=0"), tmp_path, "w0.json")
    workers, _ = _trial(
        make_config(*knobs, "data.num_workers=2", "data.prefetch_factor=4"), tmp_path, "w2.json"
    )
    assert main_proc["status"] == workers["status"] == "complete"
    n0 = main_proc["step_time_s"]["n"]
    # grad_accum (2) batches per step, each sleeping `latency` in this process
    assert _data_wait_s(main_proc) >= 0.95 * latency * 2 * n0
    assert main_proc["time_frac"]["data_wait"] > 0.3, main_proc["time_frac"]
    assert _data_wait_s(workers) < 0.5 * _data_wait_s(main_proc)
    assert workers["time_frac"]["data_wait"] < main_proc["time_frac"]["data_wait"]


@pytest.mark.parametrize(
    ("override", "path", "expected"),
    [
        ("runtime.attention=math", ("attention_backend",), "math"),
        ("runtime.dtype=bf16", ("device", "dtype"), "bf16"),
    ],
)
def test_runtime_knob_is_reported(
    make_config, tmp_path: Path, override: str, path: tuple[str, ...], expected: str
) -> None:
    result, _ = _trial(make_config(override, "trial.max_steps=2"), tmp_path)
    assert result["status"] == "complete", result["failure"]
    value = result
    for key in path:
        value = value[key]
    assert value == expected


# -- failures are results --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("runtime.attention=efficient", r"runtime\.attention='efficient'.*Backends that run here"),
        ("batch.micro_batch=3", r"Valid micro_batch x grad_accum splits: 1x8, 2x4, 4x2, 8x1"),
        ("runtime.dtype=fp16", r"runtime\.dtype=fp16 is not supported on CPU"),
    ],
)
def test_invalid_combination_fails_as_invalid_config(
    make_config, tmp_path: Path, override: str, message: str
) -> None:
    result, out = _trial(make_config(override), tmp_path)
    _assert_failed(result, out, "invalid_config")
    assert re.search(message, result["failure"]["message"], re.DOTALL), result["failure"]
    assert result["config"]  # what was asked for is kept with the failure


def test_nan_loss_fails_as_nan(make_config, tmp_path: Path, monkeypatch) -> None:
    """A real NaN: the final LayerNorm's gain is poisoned after the model is built, so the first
    forward pass produces a NaN loss inside the real train step."""
    real_build = trial_mod.build_session

    def poisoned(cfg, **kwargs):
        session = real_build(cfg, **kwargs)
        with torch.no_grad():
            session.raw_model.transformer.ln_f.weight.fill_(float("nan"))
        return session

    monkeypatch.setattr(trial_mod, "build_session", poisoned)
    result, out = _trial(make_config(), tmp_path)
    _assert_failed(result, out, "nan")
    assert "loss is nan" in result["failure"]["message"]


def test_profile_writes_a_trace_beside_the_result(make_config, tmp_path: Path) -> None:
    cfg = make_config("trial.profile=true", "trial.profile_steps=1", "trial.max_steps=2")
    result, out = _trial(cfg, tmp_path)
    assert result["status"] == "complete", result["failure"]
    trace = out.parent / "trace.json"
    assert result["trace"] == str(trace)
    assert "traceEvents" in json.loads(trace.read_text())
    assert result["step_time_s"]["n"] == 2  # profiled steps are extra, never measured


# -- the CLI ---------------------------------------------------------------------------------------


def _cli_args(synthetic_dir: Path, tmp_path: Path, *overrides: str) -> list[str]:
    return [
        *fast_overrides(synthetic_dir, tmp_path / "ckpt"),
        f"trial.out={tmp_path / 'result.json'}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
        *overrides,
    ]


def test_cli_invalid_split_exits_2_and_writes_the_result(
    synthetic_dir: Path, tmp_path: Path
) -> None:
    args = _cli_args(synthetic_dir, tmp_path, "batch.micro_batch=3")
    proc = run_cli("train.trial", args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "failed"
    assert result["failure"]["kind"] == "invalid_config"
    assert "Valid micro_batch x grad_accum splits" in result["failure"]["message"]
    assert "trial FAILED (invalid_config)" in proc.stdout


def test_cli_bad_type_names_the_key(synthetic_dir: Path, tmp_path: Path) -> None:
    args = _cli_args(synthetic_dir, tmp_path, "data.num_workers=abc")
    proc = run_cli("train.trial", args, cwd=tmp_path)
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert "data.num_workers" in output and "abc" in output, output[-2000:]
    assert "Traceback" not in output  # a config error is a message, not a stack trace


@pytest.mark.slow
def test_small_cpu_trial_with_default_settings_fits_in_a_minute(
    synthetic_dir: Path, tmp_path: Path
) -> None:
    """Issue requirement: on a preset whose step takes ~0.5 s, a trial with the default trial.*
    settings (warm-up + measured window, no compile) finishes in under 60 s on this CPU.

    The shared 2-core machine rarely gives small-cpu its nominal 0.5 s step, so two checks: the
    real wall time against 60 s stretched by the measured slowdown (never shrunk), and the wall
    time this very run would have taken at 0.5 s a step (its fixed overhead plus warm-up and
    window at 0.5 s each) against 60 s."""
    args = [
        "model=small-cpu",
        f"data.dir={synthetic_dir}",
        f"checkpoint.dir={tmp_path / 'ckpt'}",
        f"trial.out={tmp_path / 'result.json'}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    ]
    start = time.perf_counter()
    proc = run_cli("train.trial", args, cwd=tmp_path)
    wall = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "trial complete" in proc.stdout
    result = json.loads((tmp_path / "result.json").read_text())
    defaults = compose_config(["model=small-cpu"]).trial
    echoed = {k: v for k, v in result["config"]["trial"].items() if k != "out"}
    assert echoed == {k: v for k, v in dataclasses.asdict(defaults).items() if k != "out"}
    assert result["compile"]["mode"] == "none"
    st = result["step_time_s"]
    assert defaults.min_steps <= st["n"] <= defaults.max_steps
    report = f"wall {wall:.1f} s, warm-up {result['warmup_s']:.1f} s, step p50 {st['p50']:.2f} s"
    budget = 60.0 * max(1.0, st["p50"] / 0.5)
    assert wall < budget, report
    # at 0.5 s a step the window ends at max_steps (10 s, well inside max_seconds)
    overhead = wall - result["warmup_s"] - st["mean"] * st["n"]
    projected = overhead + 0.5 * (defaults.warmup_steps + defaults.max_steps)
    assert projected < 60.0, f"{report}, overhead {overhead:.1f} s"


def test_fast_overrides_compose() -> None:
    """The FAST preset the other tests rely on: tiny, 512 tokens a step, eager, no workers."""
    cfg = compose_config(list(FAST))
    assert (cfg.model.name, cfg.batch.tokens_per_step, cfg.data.num_workers) == ("tiny", 512, 0)
    assert cfg.batch.micro_batch * cfg.batch.grad_accum * cfg.model.block_size == 512
    assert cfg.runtime.compile == "none" and cfg.trial.warmup_steps == 1


def test_reporting_to_the_study_is_not_charged_to_the_steps(make_config) -> None:
    """The pruner's database round trip happens between steps; a slow one must not show up as
    slow training (a search trial reports, a verification run does not: same config, same
    numbers)."""
    from train.run.loop import build_session
    from train.trial.measurement import ProgressFile, measure

    class SlowReporter:
        calls = 0

        def report(self, *, step: int, value: float) -> bool:
            SlowReporter.calls += 1
            time.sleep(0.3)
            return False

    cfg = make_config("trial.report_every=1", "trial.max_steps=4", "trial.min_steps=4")
    s = build_session(cfg)
    try:
        raw = measure(s, reporter=SlowReporter(), progress=ProgressFile(""))
    finally:
        s.batches.close()
    assert SlowReporter.calls == 4
    assert len(raw["step_times"]) == 4
    assert max(raw["step_times"]) < 0.3, raw["step_times"]


# -- projected steps (a long optimizer step measured as short steps) -------------------------------

# one optimizer step of 16 micro-batches of 2 sequences (2048 tokens of the tiny preset's 64)
LONG_STEP = ("batch.tokens_per_step=2048", "batch.micro_batch=2", "batch.grad_accum=16")


def test_a_long_step_is_projected_from_short_steps(make_config, tmp_path: Path) -> None:
    """grad_accum 16 over 2-micro-batch steps: the result describes full steps, several times a
    short step, and says what it was projected from.

    A full step is the short step's first micro-batch + 15x its second + the optimizer once
    (train/core/meters.py project_step; its arithmetic is table-tested in test_meters.py), so it
    is 8x a short step only when the two micro-batches take alike: under load either one can
    stretch, and the ratio of the p50s moves anywhere between 1x and 15x (10.4x was measured
    here while a test suite ran). The bounds hold the projection's range, not one machine's."""
    cfg = make_config(
        *LONG_STEP,
        "trial.project_above_s=1e-6",
        "trial.project_micro_steps=2",
        "trial.max_steps=4",
        "trial.min_steps=4",
    )
    result, _ = _trial(cfg, tmp_path)
    assert result["status"] == "complete", result["failure"]
    proj = result["projection"]
    assert proj["micro_batches_per_step"] == 2 and proj["grad_accum"] == 16
    assert proj["short_step_s"]["n"] == result["step_time_s"]["n"] == 4
    ratio = result["step_time_s"]["p50"] / proj["short_step_s"]["p50"]
    assert 2.0 < ratio < 15.0, ratio  # projected: neither one short step nor past 15 of them
    assert result["tokens_per_step"] == 2048
    assert result["tokens_per_s"] == pytest.approx(
        2048 * 4 / (result["step_time_s"]["mean"] * 4), rel=1e-9
    )
    assert sum(result["time_frac"].values()) == pytest.approx(1.0)


def test_project_above_zero_measures_real_full_steps(make_config, tmp_path: Path) -> None:
    cfg = make_config(
        *LONG_STEP,
        "trial.project_above_s=0",
        "trial.max_steps=2",
        "trial.min_steps=2",
    )
    result, _ = _trial(cfg, tmp_path)
    assert result["status"] == "complete", result["failure"]
    assert result["projection"] is None
    assert result["full_step_estimate_s"] > 0


def test_heartbeats_come_during_warmup_and_stop_before_the_window(
    make_config, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(progress_mod, "HEARTBEAT_S", 0.01)
    progress = tmp_path / "progress.jsonl"
    cfg = make_config(
        f"trial.progress_file={progress}",
        "trial.warmup_steps=2",
        "trial.report_every=2",
    )
    result, _ = _trial(cfg, tmp_path)
    assert result["status"] == "complete", result["failure"]
    events = [json.loads(line) for line in progress.read_text().splitlines()]
    kinds = [e["event"] for e in events]
    done = kinds.index("warmup_done")
    beats = [e for e in events[:done] if e["event"] == "heartbeat"]
    assert beats and {b["phase"] for b in beats} <= {"setup", "warmup"}
    assert "heartbeat" not in kinds[done:]  # a hang in the window must go quiet
    assert "interval" in kinds[done:]


def test_a_cached_ceiling_below_the_trials_own_rate_is_measured_again(
    make_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ceiling cached while the machine was busy read low, and every later trial showed an MFU
    against it above 100% (seen on this VM: 103-115%). The trial measures it again."""
    from train.measure.ceiling_cache import default_cache_path

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cfg = make_config()
    first, _ = _trial(cfg, tmp_path, "first.json")
    path = default_cache_path()
    doc = json.loads(path.read_text())
    for entry in doc["entries"].values():
        entry["flops"] = 1.0  # planted: far below any real step's rate
    path.write_text(json.dumps(doc))
    result, _ = _trial(cfg, tmp_path, "second.json")
    assert result["status"] == "complete"
    assert 0 < result["mfu"]["ceiling"] <= 1.0
    assert result["device"]["ceiling_flops"] > 1e6
    assert all(e["flops"] > 1e6 for e in json.loads(path.read_text())["entries"].values())
    assert first["mfu"]["ceiling"] is not None


def test_a_save_record_measures_one_save_per_target_and_the_next_trial_reads_it(
    make_config, tmp_path: Path
) -> None:
    """trial.save_record: no trial saves inside its window; the first of a target measures one
    save after it and records it, the next one carries that measurement and saves nothing."""
    record = tmp_path / "saves.json"
    keys = ("checkpoint.every_steps=2", "trial.max_steps=4", "trial.min_steps=4")
    first, _ = _trial(make_config(*keys, f"trial.save_record={record}"), tmp_path, "a.json")
    second, _ = _trial(make_config(*keys, f"trial.save_record={record}"), tmp_path, "b.json")
    for r in (first, second):
        assert r["status"] == "complete", r["failure"]
        assert r["checkpoint_s"] == [] and r["time_frac"]["checkpoint"] == 0  # no window save
    measured, read = first["checkpoint_save"], second["checkpoint_save"]
    assert measured["here"] is True and read["here"] is False
    assert measured["stall_s"] > 0 and measured["write_s"] >= measured["stall_s"]
    assert measured["bytes"] > 0 and measured["mode"] == "sync"
    assert {k: v for k, v in read.items() if k != "here"} == {
        k: v for k, v in measured.items() if k != "here"
    }
    assert measured["measured_by"] == str(tmp_path / "out")
    # another target is measured again
    other, _ = _trial(
        make_config(*keys, f"trial.save_record={record}", "checkpoint.mode=async"),
        tmp_path,
        "c.json",
    )
    assert other["checkpoint_save"]["here"] is True and other["checkpoint_save"]["mode"] == "async"
    # without a record, the window saves as before
    plain, _ = _trial(make_config(*keys), tmp_path, "d.json")
    assert len(plain["checkpoint_s"]) == 2 and plain["checkpoint_save"] is None
