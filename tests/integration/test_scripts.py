"""The benchmarks and the GPU check run end to end in their small modes and print parseable,
measured figures.

Each runs as a real process from the repo root, as a user runs it: a benchmark as
`python -m scripts.bench.<name>`, the GPU check as `python scripts/gpu_check.py`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

PROJECT_DIR = Path(__file__).resolve().parents[2]
HAS_CUDA = torch.cuda.is_available()


def run_script(name: str, args: list[str], *, tmp_path: Path, timeout: float = 900):
    """`python scripts/<name>.py <args>` from the repo root."""
    return _run([f"scripts/{name}.py", *args], tmp_path=tmp_path, timeout=timeout)


def run_bench(name: str, args: list[str], *, tmp_path: Path, timeout: float = 900):
    """`python -m scripts.bench.<name> <args>` from the repo root."""
    return _run(["-m", f"scripts.bench.{name}", *args], tmp_path=tmp_path, timeout=timeout)


def _run(argv: list[str], *, tmp_path: Path, timeout: float):
    # A private matmul-ceiling cache: measured fresh, never read from (or left in) the user's own;
    # what a benchmark keeps in a temporary folder (ddp, workers) stays in tmp_path.
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    return subprocess.run(
        [sys.executable, *argv],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def table_rows(text: str, first_cell: str) -> list[list[str]]:
    """Cells of every `| ... |` row whose first cell starts with `first_cell`."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|-"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0].startswith(first_cell):
                rows.append(cells)
    return rows


def number(cell: str) -> float:
    """'1,234' -> 1234.0, '0.88%' -> 0.0088."""
    value = float(cell.replace(",", "").rstrip("%"))
    return value / 100 if cell.endswith("%") else value


def test_bench_trainer_quick(synthetic_dir: Path, tmp_path: Path) -> None:
    proc = run_bench(
        "trainer",
        [
            "--quick",
            f"--data-dir={synthetic_dir}",
            "--tokens-per-step=512",
            "--micro-batch=4",
            "--threads=1",
            f"--out-dir={tmp_path / 'out'}",
        ],
        tmp_path=tmp_path,
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    out = proc.stdout

    configs = table_rows(out, "eager fp32")
    assert [r[0] for r in configs] == ["eager fp32 nw=1", "eager fp32 nw=0"]
    for _, tokens_per_s, p50_ms, cv, data_wait, mfu, _, n in configs:
        assert number(tokens_per_s) > 0 and number(p50_ms) > 0 and number(mfu) > 0
        assert number(cv) > 0  # measured steps never take exactly equal time
        assert 0 <= number(data_wait) < 1
        assert int(n) >= 2
    # the per-trial JSON results were kept where asked
    assert len(list((tmp_path / "out").glob("*.json"))) == 3  # 2 configs + 1 overhead trial

    (pair,) = table_rows(out, "0")
    trial_tps, plain_tps, ratio = (number(c) for c in pair[1:])
    assert trial_tps > 0 and plain_tps > 0
    assert ratio == pytest.approx(trial_tps / plain_tps, rel=0.01)

    goals = {r[0]: r for r in table_rows(out, "") if r[-1] in ("PASS", "FAIL")}
    assert set(goals) == {
        "data wait, nw>=1",
        "step-time CV",
        "trial / plain tokens/s",
        "same weights+batches (last loss)",
    }
    # a smoke run's short windows may miss a goal: the exit code says so
    assert_exit_code_tells_verdicts(proc, [r[-1] for r in goals.values()])
    # the plain loop really trains the same model on the same batches: identical losses
    assert goals["same weights+batches (last loss)"][-1] == "PASS"
    trial_loss, plain_loss = re.fullmatch(
        r"(\S+) vs (\S+)", goals["same weights+batches (last loss)"][2]
    ).groups()
    assert float(trial_loss) == pytest.approx(float(plain_loss), rel=1e-4)
    assert float(goals["trial / plain tokens/s"][2].split()[0]) > 0
    # the machine's own spread for fixed work is measured beside the trainer's CV
    (floor,) = table_rows(out, "(machine floor")
    assert number(floor[2].split()[0]) > 0


def assert_exit_code_tells_verdicts(proc: subprocess.CompletedProcess, verdicts: list[str]) -> None:
    """Every goal got a verdict, and the script exits 1 exactly when one of them is FAIL."""
    assert verdicts and set(verdicts) <= {"PASS", "FAIL"}, verdicts
    want = 1 if "FAIL" in verdicts else 0
    assert proc.returncode == want, (verdicts, proc.stdout[-2000:] + proc.stderr[-3000:])


def test_noise_floor_prints_a_measured_spread(tmp_path: Path) -> None:
    proc = run_bench(
        "noise_floor", ["--reps=5", "--rep-seconds=0.02", "--threads=1"], tmp_path=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = re.search(r"CV (\S+)% over 5 reps of (\d+) ms fixed matmul work \(1 threads\)", proc.stdout)
    assert m, proc.stdout
    assert float(m.group(1)) > 0 and int(m.group(2)) >= 1


def test_bench_race_prints_the_count_of_each_verdict(tmp_path: Path) -> None:
    """One race of a config against itself plus a planted 30% data latency, on real trials: the
    summary counts one race and its rounds; the planted-slower config is never declared faster."""
    proc = run_bench("race", ["--gaps", "0.3", "--races", "1", "--steps", "4"], tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert re.search(r"step p50 \d+\.\d ms \(median of 3 trials\)", proc.stdout)
    m = re.search(
        r"planted gap 30% \([\d.]+ ms per micro-batch\), 1 races: faster declared (\d), "
        r"equivalent (\d), not significant (\d), slower declared (\d); median rounds ([\d.]+)",
        proc.stdout,
    )
    assert m, proc.stdout
    counts = [int(x) for x in m.groups()[:4]]
    assert sum(counts) == 1 and counts[3] == 0
    assert 3 <= float(m.group(5)) <= 8  # between the race's minimum and maximum rounds


def test_bench_trainer_rejects_a_split_that_does_not_divide(tmp_path: Path) -> None:
    proc = run_bench(
        "trainer", ["--quick", "--tokens-per-step=1000"], tmp_path=tmp_path, timeout=120
    )
    assert proc.returncode != 0
    assert "--tokens-per-step must be a multiple of micro_batch x 64" in proc.stderr


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-CUDA path")
def test_gpu_check_skips_without_cuda(tmp_path: Path) -> None:
    proc = run_script("gpu_check", [], tmp_path=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CUDA is not available" in proc.stdout
    assert "skipping" in proc.stdout


def gpu_check_on_cpu(*args: str, data_dir: Path, tmp_path: Path):
    """scripts/gpu_check.py on the CPU: the tiny preset, no compile, one micro-batch a step."""
    argv = ["--device=cpu", "--models=tiny", "--compile=none", "--grad-accum=1", *args]
    return run_script(
        "gpu_check", [*argv, f"--data-dir={data_dir}"], tmp_path=tmp_path, timeout=300
    )


def test_gpu_check_pipeline_on_cpu(synthetic_dir: Path, tmp_path: Path) -> None:
    """The GPU path's subprocess -> JSON -> table code, run on the CPU with the tiny preset."""
    proc = gpu_check_on_cpu(
        "--dtype=fp32",
        "--warmup-steps=1",
        "--steps=3",
        f"--out-dir={tmp_path / 'out'}",
        data_dir=synthetic_dir,
        tmp_path=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (row,) = table_rows(proc.stdout, "tiny")
    _, mode, status, tokens_per_s, p50_ms, mfu_spec, mfu_ceiling, _, attention, compile_s, _ = row
    assert (mode, status) == ("none", "complete")
    assert number(tokens_per_s) > 0 and number(p50_ms) > 0 and number(mfu_ceiling) > 0
    assert mfu_spec == "n/a"  # a CPU has no spec-sheet peak in our table
    assert attention and number(compile_s) == 0
    assert (tmp_path / "out" / "tiny-none.json").is_file()


def test_gpu_check_prints_a_failed_trial_as_a_row(synthetic_dir: Path, tmp_path: Path) -> None:
    proc = gpu_check_on_cpu("--dtype=fp16", data_dir=synthetic_dir, tmp_path=tmp_path)
    assert proc.returncode == 1
    (row,) = table_rows(proc.stdout, "tiny")
    assert row[2] == "FAILED (invalid_config)"
    assert "fp16" in row[3]
    assert "1 of 1 trials failed: tiny-none" in proc.stdout


def test_bench_memory_one_model(tmp_path: Path) -> None:
    proc = run_bench("memory", ["--models", "tiny"], tmp_path=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = table_rows(proc.stdout, "tiny")
    assert [r[:3] for r in rows] == [["tiny", "none", "8"], ["tiny", "every", "8"]]
    for _, _, _, predicted, measured, error, peak_at in rows:
        assert number(predicted) > 0 and number(measured) > 0 and peak_at
        assert abs(number(error)) <= 0.15
    assert re.search(r"Worst error \d+\.\d% \(bar 15%\): PASS", proc.stdout), proc.stdout
    proc = run_bench("memory", ["--models", "tiny,huge"], tmp_path=tmp_path, timeout=120)
    assert proc.returncode == 2 and "--models: unknown ['huge']" in proc.stderr


def test_bench_projection_one_pair(tmp_path: Path) -> None:
    proc = run_bench(
        "projection",
        [
            "--model",
            "tiny",
            "--micro-batch",
            "2",
            "--grad-accum",
            "8",
            "--micro-steps",
            "2",
            "--warmup-steps",
            "1",
            "--steps",
            "2",
            "--pairs",
            "1",
        ],
        tmp_path=tmp_path,
        timeout=300,
    )
    out = proc.stdout
    m = re.search(r"pair 1: projected (\S+) s \(from short steps of (\S+) s\) \| real (\S+) s", out)
    assert m, out + proc.stderr[-3000:]
    projected, short, real = (float(x) for x in m.groups())
    assert 0 < short < projected and real > 0  # 2 of 8 micro-batches, projected to all 8
    verdicts = re.findall(r"goal within 5%: (PASS|FAIL)|goal >= 3x: (PASS|FAIL)", out)
    assert_exit_code_tells_verdicts(proc, ["".join(v) for v in verdicts])
    assert len(verdicts) == 2


def test_bench_ddp_one_pair(tmp_path: Path) -> None:
    proc = run_bench(
        "ddp",
        [
            "--micro-batch",
            "2",
            "--grad-accum",
            "1",
            "--steps",
            "2",
            "--warmup-steps",
            "1",
            "--pairs",
            "1",
        ],
        tmp_path=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (row,) = table_rows(proc.stdout, "0")
    _, loss_diff, tokens_per_step, one_tps, two_tps, split = row
    assert number(loss_diff) < 1e-4  # the same global batch and seed: the same losses
    assert tokens_per_step == "256 / 256"  # 2 ranks x 2 x 64 = 1 process x 4 x 64
    assert number(one_tps) > 0 and number(two_tps) > 0
    shares = [number(x) for x in split.split(" / ")]
    assert len(shares) == 5 and sum(shares) == pytest.approx(1, abs=0.03)
    assert re.search(
        r"tokens/s, 2 processes / 1: median [\d.]+x \(range [\d.]+-[\d.]+, 1 pairs\)", proc.stdout
    )


# Both sweep benchmarks on the tiny preset with a few short measured steps a trial.
SMALL_TRIALS = [
    "model=tiny",
    "trial.warmup_steps=1",
    "trial.max_steps=4",
    "trial.min_steps=2",
    "trial.max_seconds=5",
    "batch.tokens_per_step=2048",
]


@pytest.mark.slow
def test_bench_workers_one_pair_of_one_point(tmp_path: Path) -> None:
    proc = run_bench(
        "workers",
        ["--pairs", "1", "--space", "{batch.micro_batch: 'choice(8)'}", "--extra", *SMALL_TRIALS],
        tmp_path=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = table_rows(proc.stdout, "0")
    assert [r[1] for r in rows] == ["1", "2"]  # one sweep per slot count
    for _, _, trials, *seconds, tokens_per_s in rows:
        assert int(trials) >= 1 and number(tokens_per_s) > 0
        assert all(number(x) > 0 for x in seconds)
    for label in (
        "sweep wall, 2 / 1 slots",
        "search span, 2 / 1 slots",
        "sum of trial walls, 2 / 1",
        "median tokens/s, 2 / 1",
    ):
        assert re.search(
            rf"{re.escape(label)} +median [\d.]+x \(range [\d.]+-[\d.]+, 1 pairs\)", proc.stdout
        ), label


@pytest.mark.slow
def test_bench_sweep_on_the_smoke_space(tmp_path: Path) -> None:
    workdir = tmp_path / "bench"
    proc = run_bench(
        "sweep",
        [
            "--workdir",
            str(workdir),
            "--search",
            "smoke",
            "--tpe-trials",
            "2",
            "--remeasure",
            "0",
            "--extra",
            *SMALL_TRIALS,
            "hydra.sweeper.verify.top_k=1",
        ],
        tmp_path=tmp_path,
        timeout=600,
    )
    out = proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert re.search(r"grid: 4 points, best \{.+\} \([\d,]+ tokens/s\)", out), (
        out + proc.stderr[-3000:]
    )
    verdicts = re.findall(r"^\(\w\) .+%  goal <= \d+% +(PASS|FAIL)$", out, flags=re.M)
    assert len(verdicts) == 3, out  # (a), (b), (c); --remeasure 0 re-measures nothing
    assert_exit_code_tells_verdicts(proc, verdicts)
    assert ("goals missed: " in out) == ("FAIL" in verdicts)
    assert (workdir / "bench_sweep.json").is_file()


def test_bench_forecast_prints_each_h200_trial_beside_its_forecast(tmp_path: Path) -> None:
    proc = run_bench("forecast", [], tmp_path=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = re.findall(r"(\S+\.json)\s+forecast\s+([\d.]+) s\s+measured\s+([\d.]+) s", proc.stdout)
    assert len(rows) == 5, proc.stdout  # 4 sweep trials and the float8 trial
    assert all(abs(float(p) / float(m) - 1) <= 0.15 for _, p, m in rows), rows
    assert re.search(r"largest difference: [\d.]+% over 5 trials", proc.stdout)
