"""scripts/gpu_acceptance.py: the staged GPU acceptance run, rehearsed on this CPU.

Pure parts by tables (stage names, budgets, the starting config and memory points from the memory
model, commands, production figures, the README section); the state file and the deadline runner
with real files and processes; and one dry run of every stage with the tiny model, each stage
handed only the previous stage's state file (its work folder deleted in between, as on a fresh
GPU host), the first sweep stage cut by its deadline while a trial runs, the next resuming it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from acceptance.commands import ddp_argv, ddp_split, race_stop_reason, sweep_argv  # noqa: E402
from acceptance.deadline import run_until  # noqa: E402
from acceptance.evidence import production_figures  # noqa: E402
from acceptance.kit import LIMIT_BYTES, kit_size  # noqa: E402
from acceptance.plan import Point, memory_points, predicted_gib, starting_point  # noqa: E402
from acceptance.profiles import TINY, XL, stage_named  # noqa: E402
from acceptance.readme_table import readme_section  # noqa: E402
from acceptance.run import open_work, run_stage  # noqa: E402
from acceptance.stages import ddp_skip_reason  # noqa: E402
from acceptance.state import MAX_STATE_BYTES, Manifest, pack_state, unpack_state  # noqa: E402

GPT2_XL = {
    "n_layer": 48,
    "n_head": 25,
    "n_embd": 1600,
    "block_size": 1024,
    "vocab_size": 50304,
    "dropout": 0.0,
    "bias": True,
}


@pytest.mark.parametrize(
    ("given", "stage"),
    [
        ("1", "plan"),
        ("2", "sweep"),
        ("3", "sweep"),
        ("4", "production"),
        ("5", "ddp"),
        ("sweep", "sweep"),
        ("ddp", "ddp"),
    ],
)
def test_stage_by_name_or_number(given: str, stage: str) -> None:
    assert stage_named(given) == stage


@pytest.mark.parametrize("given", ["0", "6", "race", ""])
def test_unknown_stage_is_refused(given: str) -> None:
    with pytest.raises(ValueError, match="is not a stage"):
        stage_named(given)


def test_xl_budget_is_25_minutes_with_every_stage_under_10() -> None:
    assert XL.total_budget_s == 1500  # the single-GPU stages; ddp is extra, several GPUs only
    assert all(s < 600 for s in XL.budget_s.values())
    assert XL.budget_for("sweep", repeat=0) == 540 and XL.budget_for("sweep", repeat=1) == 480
    assert XL.multi_gpu_budget_s == XL.budget_for("ddp", repeat=0) == 360


@pytest.mark.parametrize(
    ("profile", "gpus", "why"),
    [
        (XL, 1, "skipped: 1 GPU"),
        (XL, 0, "skipped: 0 GPUs"),
        (XL, 2, ""),
        (XL, 8, ""),
        (TINY, 0, ""),  # the CPU dry run: gloo ranks on any host
    ],
)
def test_ddp_runs_only_with_a_gpu_per_process(profile, gpus: int, why: str) -> None:
    assert ddp_skip_reason(profile, gpus) == why


def test_ddp_stage_on_one_gpu_is_skipped_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The xl profile's ddp stage on a host with one GPU (a fake count): recorded as skipped,
    exit 0 (the run goes on), no child started, no evidence of a run needed."""
    import acceptance.stages
    import gpu_acceptance

    monkeypatch.setattr(acceptance.stages, "cuda_device_count", lambda: 1)
    monkeypatch.setattr(acceptance.stages, "run_until", lambda *a, **k: pytest.fail("ran"))
    t0 = time.monotonic()
    code = gpu_acceptance.main(
        ["--stage", "5", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")]
    )
    assert code == 0 and time.monotonic() - t0 < 10
    evidence = json.loads((tmp_path / "out" / "evidence.json").read_text())
    assert evidence["ddp"] == {
        "outcome": "skipped",
        "reason": "skipped: 1 GPU",
        "device_count": 1,
        "nproc": 2,
    }
    assert [(s["stage"], s["outcome"], s["note"]) for s in evidence["stages"]] == [
        ("ddp", "skipped", "skipped: 1 GPU")
    ]
    assert (tmp_path / "out" / "state.tar.gz").is_file()
    assert "Data-parallel trial: skipped: 1 GPU (it needs 2)." in readme_section(evidence)


@pytest.mark.parametrize(
    ("single", "split"),
    [((16, 64), (16, 32)), ((8, 4), (8, 2)), ((8, 1), (4, 1)), ((2, 3), (1, 3))],
)
def test_ddp_split_keeps_the_tokens_per_step(single, split) -> None:
    assert ddp_split(*single, world=2) == split
    assert split[0] * split[1] * 2 == single[0] * single[1]


def test_ddp_split_that_cannot_be_is_refused() -> None:
    with pytest.raises(ValueError, match="does not split over 2 processes"):
        ddp_split(1, 1, world=2)


def test_ddp_command_runs_best_yaml_on_two_processes(tmp_path: Path) -> None:
    best = tmp_path / "sweep" / "best.yaml"
    argv = ddp_argv(XL, tmp_path, best_yaml=best, start=None, split=(16, 32))
    assert argv[1:7] == [
        "-m",
        "train.trial",
        "--config-path",
        str(tmp_path / "sweep"),
        "--config-name",
        "best",
    ]
    for pinned in (
        "runtime.nproc=2",
        "batch.micro_batch=16",
        "batch.grad_accum=32",
        "trial.project_above_s=0",
        f"trial.out={tmp_path / 'ddp' / 'trial.json'}",
    ):
        assert pinned in argv
    start = Point(micro_batch=16, compile="default", activation_checkpointing="none")
    argv = ddp_argv(XL, tmp_path, best_yaml=None, start=start, split=(16, 32))
    assert "model=gpt2-xl" in argv and "batch.tokens_per_step=1048576" in argv
    assert argv.index("batch.grad_accum=64") < argv.index("batch.grad_accum=32")  # the split wins


@pytest.mark.parametrize(
    ("memory_gib", "start", "gib"),
    [
        # H100 80GB: compiled 8 (the seed's 16 compiled is 73.5 GiB, 73.55 measured on an H200,
        # over the 72.9 usable)
        (79.19, "mb8-default-ac_none", 49.8),
        (139.8, "mb16-default-ac_none", 73.5),  # H200: the seed's 16, compiled
        (39.4, "mb2-default-ac_none", 32.4),  # A100 40GB: no recompute first
        (None, "mb16-default-ac_none", 73.5),  # no memory known: the first candidate
    ],
)
def test_starting_config_is_the_best_predicted_to_fit(
    memory_gib: float | None, start: str, gib: float
) -> None:
    point = starting_point(XL, GPT2_XL, device_type="cuda", memory_gib=memory_gib)
    assert point.name == start
    assert predicted_gib(XL, GPT2_XL, point, device_type="cuda") == pytest.approx(gib, abs=0.05)


def test_no_starting_config_fits_a_small_card() -> None:
    with pytest.raises(ValueError, match=r"predicted to fit 10\.0 GiB"):
        starting_point(XL, GPT2_XL, device_type="cuda", memory_gib=10.0)


@pytest.mark.parametrize(
    ("memory_gib", "points"),
    [
        (79.19, ["mb8-default-ac_none", "mb8-none-ac_none", "mb8-none-ac_every"]),
        (139.8, ["mb16-default-ac_none", "mb16-none-ac_none", "mb16-none-ac_every"]),
    ],
)
def test_memory_points_are_the_start_the_largest_eager_fit_and_the_start_recomputed(
    memory_gib: float, points: list[str]
) -> None:
    start = starting_point(XL, GPT2_XL, device_type="cuda", memory_gib=memory_gib)
    chosen = memory_points(XL, GPT2_XL, start, device_type="cuda", memory_gib=memory_gib)
    assert [p.name for p in chosen] == points


@pytest.mark.parametrize(
    ("line", "left_s", "stops"),
    [
        ("[t][HYDRA] verifying 2 configs (the top 1 and ...", 100.0, True),
        ("[t][HYDRA] verifying 2 configs (the top 1 and ...", 400.0, False),
        ("trial   3 complete  39,210 tok/s", 10.0, False),
    ],
)
def test_the_race_starts_only_where_its_first_round_fits(
    line: str, left_s: float, stops: bool
) -> None:
    assert bool(race_stop_reason(line, left_s=left_s, race_round_s=XL.race_round_s)) is stops


def test_sweep_command_pins_the_study_in_the_work_folder(tmp_path: Path) -> None:
    start = Point(micro_batch=16, compile="default", activation_checkpointing="none")
    argv = sweep_argv(XL, tmp_path, start, max_wall_s=495.4, extra=["hydra.sweeper.n_trials=3"])
    assert argv[2:5] == ["-m", "search=gpu-acceptance", "model=gpt2-xl"]
    for pinned in (
        "batch.tokens_per_step=1048576",
        "batch.micro_batch=16",
        "batch.grad_accum=64",
        "runtime.compile=default",
        "runtime.dtype=bf16",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"hydra.sweeper.storage=sqlite:///{tmp_path / 'optuna.db'}",
        "hydra.sweeper.study_name=acceptance-xl",
        "hydra.sweeper.budget.max_wall_s=495",
        "hydra.sweeper.mlflow.enabled=false",
    ):
        assert pinned in argv
    assert argv[-1] == "hydra.sweeper.n_trials=3"  # the run's own overrides win (last)


def test_production_figures_leave_the_first_step_out() -> None:
    summary = {
        "start_step": 0,
        "end_step": 4,
        "history": [
            {
                "step": 1,
                "loss": 11.0,
                "tokens_per_s": 100.0,
                "mfu_spec": 0.01,
                "mfu_ceiling": 0.02,
                "data_wait_frac": 0.5,
            },
            {
                "step": 2,
                "loss": 10.0,
                "tokens_per_s": 400.0,
                "mfu_spec": 0.4,
                "mfu_ceiling": 0.5,
                "data_wait_frac": 0.0,
            },
            {
                "step": 3,
                "loss": 9.0,
                "tokens_per_s": 500.0,
                "mfu_spec": 0.5,
                "mfu_ceiling": 0.6,
                "data_wait_frac": 0.0,
            },
            {
                "step": 4,
                "loss": 8.0,
                "tokens_per_s": 450.0,
                "mfu_spec": 0.45,
                "mfu_ceiling": 0.55,
                "data_wait_frac": 0.1,
            },
        ],
    }
    got = production_figures(summary)
    assert got["steps"] == 4 and got["measured_steps"] == 3
    assert got["first_step_tokens_per_s"] == 100.0
    assert got["tokens_per_s"] == 450.0 and got["mfu_spec"] == 0.45
    assert (got["loss_first"], got["loss_last"]) == (11.0, 8.0)


def _manifest(work: Path, profile: str = "tiny") -> Manifest:
    return Manifest(
        version=1,
        profile=profile,
        work=str(work),
        stages_done=["plan"],
        packed_at="2026-11-25T00:00:00+00:00",
    )


def test_state_round_trip_leaves_data_checkpoints_and_plot_html_out(tmp_path: Path) -> None:
    work = tmp_path / "work"
    tree = {
        "optuna.db": "db",
        "evidence.json": "{}",
        "sweep/0/result.json": "{}",
        "sweep/plots/summary.png": "png",
        "sweep/plots/slice.html": "x" * 1000,
        "data/synthetic/train.bin": "t",
        "ckpt/a/ckpt_3.pt": "c",
    }
    for rel, text in tree.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    state = tmp_path / "out" / "state.tar.gz"
    pack_state(work, state, manifest=_manifest(work))
    import shutil

    shutil.rmtree(work)
    manifest = unpack_state(state, profile="tiny")
    assert manifest.work == str(work) and manifest.stages_done == ["plan"]
    files = sorted(p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file())
    assert files == ["evidence.json", "optuna.db", "sweep/0/result.json", "sweep/plots/summary.png"]
    with pytest.raises(ValueError, match="belongs to a --profile tiny run"):
        unpack_state(state, profile="xl")


def test_a_state_too_large_to_come_back_keeps_the_previous_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "optuna.db").write_bytes(b"small")
    state = tmp_path / "state.tar.gz"
    pack_state(work, state, manifest=_manifest(work))
    before = state.read_bytes()
    (work / "big.log").write_bytes(os.urandom(2**20))  # 1 MiB that gzip cannot shrink
    monkeypatch.setattr("acceptance.state.MAX_STATE_BYTES", 64 * 1024)
    with pytest.raises(ValueError, match="over the 0 MiB"):
        pack_state(work, state, manifest=_manifest(work))
    assert state.read_bytes() == before and MAX_STATE_BYTES == 16 * 2**20


def test_not_a_state_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "state.tar.gz"
    bogus.write_text("not a tarball")
    with pytest.raises(ValueError, match="is not an acceptance state"):
        unpack_state(bogus, profile="tiny")


def test_a_new_run_needs_an_empty_work_folder(tmp_path: Path) -> None:
    (tmp_path / "left-over").write_text("x")
    with pytest.raises(ValueError, match="is not empty: pass --state"):
        open_work(profile=TINY, state=None, work=tmp_path, sweep_overrides=[])


CHILD = textwrap.dedent("""
    import signal, sys, time
    if sys.argv[1] == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ready", flush=True)
    print("STOP here", flush=True)
    time.sleep(60)
""")


@pytest.mark.parametrize("mode", ["default", "ignore"])
def test_a_child_past_its_deadline_gets_sigterm_then_sigkill(tmp_path: Path, mode: str) -> None:
    t0 = time.monotonic()
    ran = run_until(
        [sys.executable, "-c", CHILD, mode],
        cwd=tmp_path,
        env={},
        log_path=tmp_path / "child.log",
        deadline=time.monotonic() + 1.0,
        grace_s=1.0,
    )
    assert ran.cut and not ran.stopped and ran.returncode < 0
    assert time.monotonic() - t0 < 10
    assert "ready" in (tmp_path / "child.log").read_text()


def test_a_child_is_stopped_early_when_its_output_says_so(tmp_path: Path) -> None:
    ran = run_until(
        [sys.executable, "-c", CHILD, "default"],
        cwd=tmp_path,
        env={},
        log_path=tmp_path / "child.log",
        deadline=time.monotonic() + 60,
        stop_when=lambda line: "no room" if "STOP" in line else "",
    )
    assert ran.stopped == "no room" and not ran.cut and ran.wall_s < 30


def test_kit_size_counts_tracked_code_and_wheels(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "a.py").write_bytes(b"x" * 1000)
    (tmp_path / "untracked.py").write_bytes(b"y" * 5000)
    subprocess.run(["git", "add", "a.py"], cwd=tmp_path, check=True)
    with pytest.raises(ValueError, match=r"offline-wheels\.sh"):
        kit_size(tmp_path, kit_dir=tmp_path / ".whl")
    (tmp_path / ".whl").mkdir()
    (tmp_path / ".whl" / "optuna-5.0.0-py3-none-any.whl").write_bytes(b"w" * 3000)
    (tmp_path / "state.tar.gz").write_bytes(b"s" * 200)
    size = kit_size(tmp_path, kit_dir=tmp_path / ".whl", extra=(tmp_path / "state.tar.gz",))
    assert (size.code_files, size.code_bytes, size.kit_files, size.kit_bytes) == (1, 1000, 1, 3000)
    assert size.total_bytes == 4200 and size.fits and LIMIT_BYTES == 64 * 2**20
    assert size.lines()[-1].endswith("of 64 MiB: fits")


def test_readme_section_from_evidence() -> None:
    ev = {
        "profile": "xl",
        "model": "gpt2-xl",
        "tokens_per_step": 1048576,
        "total_budget_s": 1500,
        "wall_s_total": 1200.0,
        "device": {
            "name": "NVIDIA H100 80GB HBM3",
            "memory_gib": 79.19,
            "driver": "580.159.04",
            "torch": "2.11.0+cu130",
            "cuda": "13.0",
            "python": "3.12.3",
            "packages": {"optuna": "5.0.0"},
            "spec_peak_flops": 989.4e12,
            "ceiling_flops": 785.5e12,
        },
        "stages": [
            {
                "stage": "plan",
                "run": 1,
                "outcome": "done",
                "wall_s": 200.0,
                "deadline_s": 240.0,
                "note": "",
            }
        ],
        "memory": [
            {
                "micro_batch": 16,
                "compile": "default",
                "activation_checkpointing": "none",
                "status": "complete",
                "memory_predicted_gib": 57.5,
                "memory_measured_gib": 56.35,
                "tokens_per_s": 45000.0,
                "compile_s": 90.0,
            }
        ],
        "sweep": {
            "trials": [
                {
                    "number": 0,
                    "start": True,
                    "knobs": {"batch.micro_batch": 16},
                    "outcome": "complete",
                    "tokens_per_s": 50000.0,
                    "projected": True,
                    "mfu_spec": 0.52,
                    "mfu_ceiling": 0.65,
                }
            ],
            "projection": [
                {
                    "trial": 0,
                    "search_tokens_per_s": 50000.0,
                    "search_projected": True,
                    "real_tokens_per_s": 49000.0,
                    "error": 50000 / 49000 - 1,
                }
            ],
            "race": {"verdict": {"outcome": "decided", "rounds": 2, "reason": "won."}},
            "best": {
                "trial": 0,
                "knobs": {"micro_batch": 16},
                "tokens_per_s": 49000.0,
                "mfu_spec": 0.51,
                "mfu_ceiling": 0.64,
            },
        },
        "production": {
            "command": "python -m train",
            "tokens_per_s": 48000.0,
            "measured_steps": 3,
            "mfu_spec": 0.5,
            "race_tokens_per_s": 49000.0,
            "ratio_to_race": 48000 / 49000,
        },
    }
    text = readme_section(ev)
    assert "device time 1200 s of a 1500 s budget" in text
    assert "NVIDIA H100 80GB HBM3 (79.2 GiB), driver 580.159.04, torch 2.11.0+cu130" in text
    assert "Spec peak 989.4 TFLOP/s, measured matmul ceiling 785.5 TFLOP/s" in text
    row = "| mb 16, compile default, AC none | complete | 57.50 | 56.35 | -2.0% | 45,000 | 90.0 |"
    assert row in text
    assert "| 0 (start) | mb 16 | complete | 50,000 (projected) | 52.0% | 65.0% |" in text
    assert "| 0 | 50,000 (projected) | 49,000 | +2.0% |" in text
    assert "Race: decided after 2 round(s); won." in text
    assert "48,000 tokens/s (median of 3 steps after the first)" in text
    assert "(ratio 0.980)" in text


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gpu_acceptance.py"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _handed_on(out: Path) -> Path:
    """The state file a stage left in its output folder, checked against a GPU host's limits."""
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8, files
    assert all(p.stat().st_size <= 16 * 2**20 for p in files)
    assert all(len(p.relative_to(out).parts) <= 2 for p in files)
    return out / "state.tar.gz"


@pytest.mark.slow
def test_dry_run_of_every_stage_with_a_cut_sweep_resumed(tmp_path: Path) -> None:
    """plan -> sweep (cut by its deadline while trial 0 runs) -> sweep (resumed: best.yaml) ->
    production -> README table; each stage gets only the previous state file, the work folder
    removed in between as on a fresh GPU host."""
    import shutil

    work = tmp_path / "work"
    outs = [tmp_path / f"out{i}" for i in range(1, 5)]

    proc = _cli("--dry-run", "--stage", "1", "--work", str(work), "--out", str(outs[0]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stage plan (run 1): done" in proc.stdout
    evidence = json.loads((outs[0] / "evidence.json").read_text())
    assert [m["status"] for m in evidence["memory"]] == ["complete", "complete"]
    assert evidence["plan"]["start"]["micro_batch"] == 8
    shutil.rmtree(work)

    # Stage 2 in-process, with a clock that jumps past the deadline once trial 0 runs.
    def clock() -> float:
        running = (work / "sweep" / "0" / "trial.log").exists()
        return time.monotonic() + (1e6 if running else 0.0)

    report = run_stage(
        "sweep", profile=TINY, state=_handed_on(outs[0]), work=work, out=outs[1], clock=clock
    )
    assert report.outcome == "cut", report.note
    study = optuna.load_study(study_name="acceptance-tiny", storage=f"sqlite:///{work}/optuna.db")
    states = [t.state for t in study.trials]
    assert optuna.trial.TrialState.RUNNING not in states
    assert study.trials[0].user_attrs["failure_kind"] == "interrupted"
    assert not (work / "sweep" / "best.yaml").exists()
    shutil.rmtree(work)

    proc = _cli(
        "--dry-run", "--stage", "3", "--state", str(_handed_on(outs[1])), "--out", str(outs[2])
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stage sweep (run 2): done" in proc.stdout
    evidence = json.loads((outs[2] / "evidence.json").read_text())
    trials = evidence["sweep"]["trials"]
    assert trials[0]["outcome"] == "interrupted"
    # the interrupted start was queued again and measured by the resumed stage
    assert any(t["outcome"] == "complete" and t["knobs"] == trials[0]["knobs"] for t in trials[1:])
    assert evidence["sweep"]["best"]["race_tokens_per_s"] > 0
    shutil.rmtree(work)

    proc = _cli(
        "--dry-run", "--stage", "4", "--state", str(_handed_on(outs[2])), "--out", str(outs[3])
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    evidence = json.loads((outs[3] / "evidence.json").read_text())
    assert [(s["stage"], s["outcome"]) for s in evidence["stages"]] == [
        ("plan", "done"),
        ("sweep", "cut"),
        ("sweep", "done"),
        ("production", "done"),
    ]
    assert all(s["wall_s"] > 0 for s in evidence["stages"])
    prod = evidence["production"]
    assert prod["returncode"] == 0 and prod["tokens_per_s"] > 0 and prod["race_tokens_per_s"] > 0
    assert evidence["device"]["packages"]["optuna"] == optuna.__version__

    # the extra stage: best.yaml as 2 gloo ranks (NCCL's code path with backend gloo)
    shutil.rmtree(work)
    out5 = tmp_path / "out5"
    proc = _cli(
        "--dry-run", "--stage", "5", "--state", str(_handed_on(outs[3])), "--out", str(out5)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stage ddp (run 1): done" in proc.stdout
    _handed_on(out5)
    evidence = json.loads((out5 / "evidence.json").read_text())
    ddp = evidence["ddp"]
    assert (ddp["config"], ddp["backend"], ddp["world_size"]) == ("best.yaml", "gloo", 2)
    one, each = ddp["single_split"], ddp["per_process_split"]
    assert one["micro_batch"] * one["grad_accum"] == 2 * each["micro_batch"] * each["grad_accum"]
    assert ddp["tokens_per_s"] > 0 and 0 < ddp["comms_frac"] < 1
    assert ddp["single_gpu_tokens_per_s"] == evidence["sweep"]["best"]["race_tokens_per_s"]
    assert ddp["scaling_efficiency"] == pytest.approx(
        ddp["tokens_per_s"] / (2 * ddp["single_gpu_tokens_per_s"])
    )

    proc = _cli("--table", str(out5 / "evidence.json"))
    assert proc.returncode == 0, proc.stderr
    assert "| sweep (1) | cut |" in proc.stdout
    assert "Production run (`python -m train" in proc.stdout
    assert "| ddp (1) | done |" in proc.stdout
    assert "| best.yaml, 2 x gloo |" in proc.stdout


def test_a_search_stage_always_ends_where_the_race_starts() -> None:
    line = "[t][HYDRA] verifying 2 configs (the top 1 and the starting config) ..."
    why = race_stop_reason(line, left_s=1e6, race_round_s=float("inf"))
    assert why == "the search is done and the race is the next sweep stage's"


def test_dry_run_ddp_stage_without_best_yaml_runs_the_starting_config(tmp_path: Path) -> None:
    """No best.yaml (the sweep never finished): the ddp stage runs the plan's starting config as
    2 gloo ranks, against the start's single-process figure, from a state handed in."""
    work = tmp_path / "work"
    folder, evidence, _ = open_work(profile=TINY, state=None, work=work, sweep_overrides=[])
    evidence["plan"] = {
        "start": {"micro_batch": 8, "compile": "none", "activation_checkpointing": "none"}
    }
    evidence["sweep"] = {
        "trials": [{"number": 0, "start": True, "outcome": "complete", "tokens_per_s": 1000.0}]
    }
    (folder / "evidence.json").write_text(json.dumps(evidence))
    state = tmp_path / "in" / "state.tar.gz"
    pack_state(folder, state, manifest=_manifest(folder))
    import shutil

    shutil.rmtree(work)
    report = run_stage("ddp", profile=TINY, state=state, work=work, out=tmp_path / "out")
    assert report.outcome == "done", report.note
    ddp = json.loads((tmp_path / "out" / "evidence.json").read_text())["ddp"]
    assert ddp["config"] == "start" and ddp["world_size"] == 2
    assert (ddp["single_split"], ddp["per_process_split"]) == (
        {"micro_batch": 8, "grad_accum": 4},
        {"micro_batch": 8, "grad_accum": 2},
    )
    assert ddp["single_gpu_source"] == "the starting config's search trial 0"
    assert ddp["scaling_efficiency"] == pytest.approx(ddp["tokens_per_s"] / 2000.0)
    assert 0 < ddp["comms_frac"] < 1


# -- one 15-minute lease --------------------------------------------------------------------------


def test_the_lease_budget_is_a_9_minute_main_command_and_a_3_minute_second() -> None:
    from acceptance.lease import LEASE_MAIN_S, LEASE_S, LEASE_SECOND_S
    from acceptance.profiles import LEASE, LEASE_TINY

    assert LEASE.stages == LEASE_TINY.stages == ("lease", "production")
    assert LEASE.budget_for("lease", repeat=0) == LEASE_MAIN_S == 540
    assert LEASE.budget_for("production", repeat=0) == LEASE_SECOND_S == 180
    assert LEASE.total_budget_s == 720 and LEASE_S == 900  # + a machine start of up to 3 min
    assert LEASE.multi_gpu_budget_s == 0


@pytest.mark.parametrize("device", ["NVIDIA H200", "NVIDIA H100 80GB HBM3"])
def test_lease_plan_prints_the_main_second_and_total_on_any_machine(device: str) -> None:
    import re

    proc = _cli("--lease", "--plan", "--device", device)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = proc.stdout.splitlines()[0]
    found = re.fullmatch(r"lease: main (\d+) s, second (\d+) s, total (\d+) s", first)
    assert found, first
    main, second, total = map(int, found.groups())
    assert total == pytest.approx(main + second + 180, abs=1)  # the machine start counted
    verdict = re.search(r"main \(.*\) against its 540 s deadline: (fits|DOES NOT FIT)", proc.stdout)
    assert verdict and (verdict.group(1) == "fits") is (main <= 540), proc.stdout
    assert f"plan assumes {device}'s machine has torchao installed" in proc.stdout
    # issue 31, must-show 4: both fit (the H100 priced with the H200's measured set-up and
    # compile: its own of 2026-11-23 left no raw file)
    assert main <= 540 and second <= 180, proc.stdout


def test_every_lease_trial_compiles_block_by_block(tmp_path: Path) -> None:
    from acceptance.commands import sweep_argv
    from acceptance.plan import Point
    from acceptance.profiles import LEASE

    start = Point(micro_batch=16, compile="default", activation_checkpointing="none")
    argv = sweep_argv(LEASE, tmp_path, start)
    assert "runtime.compile_unit=block" in argv and "search=gpu-lease" in argv


@pytest.mark.parametrize(
    ("device", "trials"),
    [("NVIDIA H200", 3), ("NVIDIA H100 80GB HBM3", 2)],  # the H100's start is its best bf16 split
)
def test_the_lease_searches_its_start_and_the_priors_points_only(device: str, trials: int) -> None:
    from acceptance.lease import sweep_plan_numbers
    from acceptance.plan import starting_point
    from acceptance.profiles import LEASE
    from acceptance.stages import model_fields

    from train.core.chips import chip_for

    model = model_fields(LEASE.model)
    start = starting_point(LEASE, model, device_type="cuda", memory_gib=chip_for(device).memory_gib)
    numbers = sweep_plan_numbers(LEASE, start, device)
    assert numbers["n_search"] == 1 + len(numbers["prior"]) == trials
    assert {"runtime.float8": "tensorwise"}.items() <= numbers["prior"][-1].items()


def test_lease_plan_refuses_an_unknown_device() -> None:
    proc = _cli("--lease", "--plan", "--device", "NVIDIA H300")
    assert proc.returncode == 2
    assert "--device 'NVIDIA H300' has no known memory size" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_dry_run_of_the_lease_main_cut_and_whole_then_the_second(tmp_path: Path) -> None:
    """The lease on the tiny model: a main command cut by its deadline while a trial runs (the
    study consistent, the state packed), the second refusing to train without best.yaml; the
    main command resumed from the cut state to best.yaml, and the second training from it and
    laying out docs/gpu/<date>-<device>/ with the raw files."""
    import shutil

    from acceptance.profiles import LEASE_TINY

    work = tmp_path / "cut"

    def lease(state_from: Path, out: Path, *stage: str) -> subprocess.CompletedProcess:
        """The dry-run lease command from the state packed in `state_from`, writing to `out`."""
        state = str(state_from / "state.tar.gz")
        return _cli("--lease", "--dry-run", *stage, "--state", state, "--out", str(out))

    def clock() -> float:  # past the deadline once trial 0 runs
        running = (work / "sweep" / "0" / "trial.log").exists()
        return time.monotonic() + (1e6 if running else 0.0)

    report = run_stage(
        "lease", profile=LEASE_TINY, state=None, work=work, out=tmp_path / "o1", clock=clock
    )
    assert report.outcome == "cut", report.note
    study = optuna.load_study(
        study_name="acceptance-lease-tiny", storage=f"sqlite:///{work}/optuna.db"
    )
    assert optuna.trial.TrialState.RUNNING not in [t.state for t in study.trials]
    shutil.rmtree(work)
    proc = lease(tmp_path / "o1", tmp_path / "o2", "--stage", "production")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # no best.yaml: run the main again
    assert "stage production (run 1): failed" in proc.stdout and "no " in proc.stdout

    # a later lease resumes the cut main command from its state: the same study, to best.yaml
    proc = lease(tmp_path / "o1", tmp_path / "m")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stage lease (run 2): done" in proc.stdout
    shutil.rmtree(work)  # the second may run on a fresh machine: only the state travels
    proc = lease(tmp_path / "m", tmp_path / "s", "--stage", "production")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    evidence = json.loads((tmp_path / "s" / "evidence.json").read_text())
    assert [(s["stage"], s["outcome"]) for s in evidence["stages"]] == [
        ("lease", "cut"),
        ("lease", "done"),
        ("production", "done"),
    ]
    assert evidence["production"]["tokens_per_s"] > 0
    (folder,) = (tmp_path / "s" / "docs" / "gpu").iterdir()
    assert folder.name.startswith(evidence["stages"][0]["started"][:10])
    names = {p.name for p in folder.iterdir()}
    assert {
        "README.md",
        "evidence.json",
        "env.txt",
        "best.yaml",
        "sweep.log",
        "production.log",
    } <= names
    results = sorted(n for n in names if n.startswith("result-"))
    ran = [t for t in evidence["sweep"]["trials"] if t.get("status")]
    assert len(results) >= len(ran) > 0  # every search trial's result, and the race's
    readme = (folder / "README.md").read_text()
    assert "| production (1) | done |" in readme and "Production run (`python -m train" in readme
    assert "package optuna: " in (folder / "env.txt").read_text()
