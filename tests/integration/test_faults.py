"""Every fault a long unattended run meets, injected into a real run and survived (issue 13).

Each test runs the real thing on CPU with the tiny preset: the production run as
`python -m train` in a subprocess (killed with SIGKILL, resumed, pointed at another run's
checkpoints, given a corrupt newest checkpoint, a full disk), and one real sweep whose grid plants
each trial fault (`hooks.fault`: disk_full, crash, nan, oom, sigkill, hang) beside a healthy trial.

A fault is survived when the run answers it as documented (the right failure kind, one line with
the fix and no traceback, or a resume with nothing lost or repeated) and nothing completed before
it is lost. The file ends by printing "faults injected N / survived M; trials or checkpoints
lost K", and fails if K is not 0.

A new fault is one `with fault("what is injected") as f:` block: its asserts, plus
`f["lost"] += <what did not survive>` for anything completed before it that is now gone.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from optuna.trial import TrialState

from tests.conftest import production_argv, run_cli, sigkill_after_checkpoint
from tests.sweep_helpers import REPO, finished_sweep, run_sweep, sweep_argv, sweep_dirs
from train.run.checkpoint import checkpoint_path, latest_checkpoint, read_header

TALLY = {"injected": 0, "survived": 0, "lost": 0}


@contextmanager
def fault(name: str) -> Iterator[dict[str, int]]:
    """Count one injected fault. The block adds what it lost (completed trials or checkpoints,
    weights that differ) to `record["lost"]`; the fault is survived when the block's asserts held
    and it lost nothing, and the test fails otherwise: a loss never passes as a tally alone."""
    TALLY["injected"] += 1
    record = {"lost": 0}
    try:
        yield record
    finally:
        TALLY["lost"] += record["lost"]
    assert record["lost"] == 0, (
        f"{name}: lost {record['lost']} (completed trials, checkpoints or weights that differ "
        "from the uninterrupted run's)"
    )
    TALLY["survived"] += 1


@pytest.fixture(scope="module", autouse=True)
def _report(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    line = (
        f"faults injected {TALLY['injected']} / survived {TALLY['survived']}; "
        f"trials or checkpoints lost {TALLY['lost']}"
    )
    # printed past pytest's output capture, so a plain `pytest -q` run shows it
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\n{line}")
    # each fault() already failed its own test; this makes the printed tally itself a check
    if TALLY["lost"]:
        pytest.fail(line)


# ---- the production run -----------------------------------------------------------------------

# 256 tokens a step (2 x 2 x 64): gradient accumulation exercised, a step takes milliseconds
RUN = ("batch.tokens_per_step=256", "batch.micro_batch=2", "batch.grad_accum=2")


def _argv(synthetic_dir: Path, ckpt: Path, out: Path, *overrides: str) -> list[str]:
    return production_argv(synthetic_dir, ckpt, out, *RUN, *overrides)


def train(synthetic_dir: Path, ckpt: Path, out: Path, *overrides: str):
    """`python -m train` to completion; its process and summary (None when it failed)."""
    proc = run_cli("train", _argv(synthetic_dir, ckpt, out, *overrides), cwd=out.parent)
    summary = out / "train_summary.json"
    return proc, json.loads(summary.read_text()) if summary.is_file() else None


def losses(summary: dict) -> dict[int, float]:
    return {h["step"]: h["loss"] for h in summary["history"] if "loss" in h}


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """The run failed with exactly one ERROR line holding every needle, and no traceback."""
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-2000:]
    assert "Traceback" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if "[ERROR]" in line]
    assert len(errors) == 1, errors
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


@pytest.fixture(scope="module")
def straight(synthetic_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The uninterrupted run every fault is compared with: 40 steps, checkpoints every 5."""
    root = tmp_path_factory.mktemp("straight")
    proc, summary = train(synthetic_dir, root / "ck", root / "out", "train.max_steps=40")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"summary": summary, "ckpt": root / "ck"}


def test_sigkill_mid_run_resumes_with_no_step_lost_or_repeated(
    synthetic_dir: Path, tmp_path: Path, straight: dict
) -> None:
    with fault("production run killed by SIGKILL") as f:
        ck = tmp_path / "ck"
        # a slow disk stretches the run so the kill lands mid-run, after the step-10 save
        argv = _argv(
            synthetic_dir,
            ck,
            tmp_path / "killed",
            "train.max_steps=40",
            "checkpoint.slow_write_s=0.4",
        )
        sigkill_after_checkpoint(argv, checkpoint=checkpoint_path(ck, 10), cwd=tmp_path)
        kept = latest_checkpoint(ck)
        assert kept is not None
        start = read_header(kept)["step"]
        assert 10 <= start < 40

        resumed, summary = train(synthetic_dir, ck, tmp_path / "resumed", "train.max_steps=40")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert (summary["start_step"], summary["end_step"]) == (start, 40)
        got = losses(summary)
        assert sorted(got) == list(range(start + 1, 41))  # each step once: none lost or repeated
        want = {s: v for s, v in losses(straight["summary"]).items() if s > start}
        assert got == want  # the uninterrupted run's losses, exactly
        a = torch.load(checkpoint_path(straight["ckpt"], 40), weights_only=True)["model"]
        b = torch.load(checkpoint_path(ck, 40), weights_only=True)["model"]
        f["lost"] += sum(not torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    ("changed", "expected"),
    [
        (("runtime.seed=7",), "runtime.seed 1337 -> 7"),
        (("batch.micro_batch=1", "batch.grad_accum=4"), "batch.micro_batch 2 -> 1"),
        (("model.n_embd=128",), "model.n_embd 64 -> 128"),
    ],
    ids=["seed", "batch-split", "model-shape"],
)
def test_resume_from_another_runs_checkpoint_is_refused_in_one_line(
    synthetic_dir: Path, tmp_path: Path, straight: dict, changed: tuple[str, ...], expected: str
) -> None:
    with fault(f"resume across identities ({expected})") as f:
        before = sorted(p.name for p in straight["ckpt"].iterdir())
        proc, _ = train(
            synthetic_dir, straight["ckpt"], tmp_path / "out", "train.max_steps=45", *changed
        )
        assert_one_line_error(
            proc, "belongs to another run", expected, "fresh checkpoint.dir", "train.resume=force"
        )
        assert proc.returncode == 2
        f["lost"] += len(set(before) - {p.name for p in straight["ckpt"].iterdir()})


def test_forced_resume_is_allowed_and_a_forced_shape_change_is_a_clean_error(
    synthetic_dir: Path, tmp_path: Path, straight: dict
) -> None:
    with fault("train.resume=force across identities"):
        ck = tmp_path / "ck"
        proc, _ = train(synthetic_dir, ck, tmp_path / "a", "train.max_steps=10")
        assert proc.returncode == 0, proc.stderr[-3000:]
        proc, summary = train(
            synthetic_dir,
            ck,
            tmp_path / "b",
            "train.max_steps=15",
            "runtime.seed=7",
            "train.resume=force",
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert (summary["start_step"], summary["end_step"]) == (10, 15)
        assert "train.resume=force: resuming from" in proc.stdout + proc.stderr
        proc, _ = train(
            synthetic_dir,
            ck,
            tmp_path / "c",
            "train.max_steps=20",
            "model.n_embd=128",
            "train.resume=force",
        )
        assert_one_line_error(proc, "does not fit this model", "size mismatch")


def test_a_corrupt_newest_checkpoint_is_skipped(synthetic_dir: Path, tmp_path: Path) -> None:
    with fault("corrupt newest checkpoint"):
        ck = tmp_path / "ck"
        proc, _ = train(synthetic_dir, ck, tmp_path / "a", "train.max_steps=10")
        assert proc.returncode == 0, proc.stderr[-3000:]
        newest = checkpoint_path(ck, 10)
        newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # a torn file
        (ck / "ckpt_00000015.pt.tmp").write_bytes(b"half a write")  # a write cut off
        proc, summary = train(synthetic_dir, ck, tmp_path / "b", "train.max_steps=15")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "skipping unreadable checkpoint" in proc.stdout + proc.stderr
        assert (summary["start_step"], summary["end_step"]) == (5, 15)
        assert read_header(checkpoint_path(ck, 15))["step"] == 15


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_at_checkpoint_stops_in_one_line_and_keeps_earlier_checkpoints(
    synthetic_dir: Path, tmp_path: Path
) -> None:
    with fault("disk full at a production checkpoint") as f:
        ck = tmp_path / "ck"
        ck.mkdir()
        # the step-10 save's temporary file is the kernel's always-full device: a real ENOSPC
        (ck / "ckpt_00000010.pt.tmp").symlink_to("/dev/full")
        proc, _ = train(synthetic_dir, ck, tmp_path / "a", "train.max_steps=15")
        kept = f"the newest checkpoint kept is {checkpoint_path(ck, 5)}"
        assert_one_line_error(
            proc,
            "disk full: no space left on device",
            "ckpt_00000010.pt",
            "free there",
            "checkpoint.dir=<a disk with room>",
            "checkpoint.keep=1",
            kept,
        )
        assert sorted(p.name for p in ck.iterdir()) == ["ckpt_00000005.pt"]  # no partial file
        f["lost"] += read_header(checkpoint_path(ck, 5))["step"] != 5
        # room again: the run resumes from the checkpoint the full disk left intact
        proc, summary = train(synthetic_dir, ck, tmp_path / "b", "train.max_steps=15")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert (summary["start_step"], summary["end_step"]) == (5, 15)


def _finite_weights(path: Path) -> bool:
    state = torch.load(path, weights_only=True)
    tensors = [*state["model"].values()]
    for moments in state["optimizer"]["state"].values():
        tensors += [t for t in moments.values() if t.is_floating_point()]
    return all(torch.isfinite(t).all() for t in tensors)


# lr 30 with no clipping blows the tiny model up within ~15 steps on this data; the loss is read
# every 10 steps, as a user's run reads it, so only the check before each save can catch it first
DIVERGING = (
    "optim.lr=30",
    "optim.grad_clip=0",
    "optim.warmup_steps=40",
    "train.log_every=10",
    "checkpoint.keep=2",
    "train.max_steps=60",
)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_diverging_run_stops_in_one_line_and_keeps_its_last_good_checkpoints(
    synthetic_dir: Path, tmp_path: Path, mode: str
) -> None:
    with fault(f"diverging production run ({mode} checkpoints, keep=2)") as f:
        ck = tmp_path / "ck"
        proc, _ = train(synthetic_dir, ck, tmp_path / "a", *DIVERGING, f"checkpoint.mode={mode}")
        line = assert_one_line_error(
            proc,
            "training diverged at step",
            "nothing non-finite",
            "the last good checkpoint is",
            "optim.grad_clip > 0",
            "train.resume=force",
        )
        assert proc.returncode == 1
        stopped = int(line.split("training diverged at step ")[1].split(":")[0])
        last = (stopped - 1) // 5 * 5  # the last save before the step that diverged
        assert last >= 10, line  # two good saves, so keep=2 had a good file to delete
        kept = sorted(ck.iterdir())
        assert [p.name for p in kept] == [checkpoint_path(ck, s).name for s in (last - 5, last)]
        newest = kept[-1]
        assert f"the last good checkpoint is {newest};" in line
        f["lost"] += sum(not _finite_weights(p) for p in kept)  # a NaN file kept is a good one lost
        assert read_header(newest)["step"] == last
        # the user's fix, as the line says: a lower lr, clipped, resumed across that change
        fix = ("optim.lr=1", "optim.grad_clip=1", "train.resume=force", f"checkpoint.mode={mode}")
        proc, summary = train(
            synthetic_dir, ck, tmp_path / "b", *DIVERGING, *fix, f"train.max_steps={last + 10}"
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert summary["start_step"] == last
        assert summary["end_step"] == last + 10
        f["lost"] += not _finite_weights(checkpoint_path(ck, last + 10))


def test_a_non_finite_checkpoint_is_refused_on_resume_in_one_line(
    synthetic_dir: Path, tmp_path: Path
) -> None:
    with fault("resume from a checkpoint with NaN weights (written by an older version)") as f:
        ck = tmp_path / "ck"
        proc, _ = train(synthetic_dir, ck, tmp_path / "a", "train.max_steps=10")
        assert proc.returncode == 0, proc.stderr[-3000:]
        newest = checkpoint_path(ck, 10)
        state = torch.load(newest, weights_only=True)
        state["model"]["transformer.h.0.mlp.c_fc.weight"][0, 0] = float("nan")
        torch.save(state, newest)
        proc, _ = train(synthetic_dir, ck, tmp_path / "b", "train.max_steps=15")
        assert_one_line_error(
            proc,
            f"checkpoint {newest} holds non-finite values",
            "transformer.h.0.mlp.c_fc.weight",
            "move it out of",
            "fresh checkpoint.dir",
        )
        assert proc.returncode == 2
        f["lost"] += sorted(p.name for p in ck.iterdir()) != ["ckpt_00000005.pt", newest.name]


# ---- the sweep: every planted trial fault ------------------------------------------------------

TRIAL_FAULTS = {  # hooks.fault -> the state the sweep records
    "disk_full": "disk_full",
    "crash": "crash",
    "nan": "nan",
    "oom": "oom",
    # a SIGKILL the kernel did not send for memory (the cgroup's oom_kill count unchanged) is a
    # kill from outside: it excludes no micro-batch, as an out-of-memory verdict would
    "sigkill": "crash",
    "hang": "timeout",
}


def test_every_planted_trial_fault_is_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    _, study = finished_sweep(
        tmp_path,
        "faults",
        "search=smoke",
        "hydra.sweeper.sampler=grid",
        "hydra.sweeper.n_trials=0",
        "hydra.sweeper.budget.max_failure_rate=1.0",
        "hydra.sweeper.verify.top_k=1",
        "hydra.sweeper.verify.repeats=1",
        "hydra.sweeper.budget.stall_timeout_s=15",
        "hydra.sweeper.budget.trial_timeout_s=120",
        "hydra.sweeper.mlflow.enabled=false",
        "hydra.sweeper.space={batch.micro_batch: 8, data.num_workers: 0}",
        "checkpoint.every_steps=1",
        f"hooks.fault=none,{','.join(repr(k) for k in TRIAL_FAULTS)}",
    )
    finished = {t.params["hooks.fault"]: t for t in study.trials if t.state.is_finished()}
    for name, state in TRIAL_FAULTS.items():
        with fault(f"hooks.fault={name}") as f:
            t = finished.get(name)
            f["lost"] += t is None
            assert t is not None, f"no trial recorded for hooks.fault={name}"
            assert t.state == TrialState.FAIL
            assert t.user_attrs["failure_kind"] == state, (name, t.user_attrs)
            assert t.user_attrs["failure_reason"], name
    healthy = finished["none"]
    assert healthy.state == TrialState.COMPLETE and healthy.value > 0  # the sweep went on
    assert "planted crash" in finished["crash"].user_attrs["failure_reason"]
    assert "SIGKILL" in finished["sigkill"].user_attrs["failure_reason"]
    reason = finished["disk_full"].user_attrs["failure_reason"]
    assert reason.startswith("disk full: no space left on device writing checkpoint")
    assert "\n" not in reason and "checkpoint.dir=<a disk with room>" in reason
    (sweep_dir,) = sweep_dirs(tmp_path)
    assert (sweep_dir / "best.yaml").is_file()


def test_a_link_or_folder_planted_at_a_sweep_folders_lock_is_refused_untouched(
    tmp_path: Path,
) -> None:
    """The sweep writes its holder's line into its lock: through a link planted there it truncated
    and overwrote the file the link pointed at; a folder there was an IsADirectoryError."""
    from sweeper.launch.dir_lock import LOCK_NAME, lock_sweep_dir

    target = tmp_path / "precious"
    target.write_text("keep me\n")
    linked, folder = tmp_path / "linked", tmp_path / "folder"
    linked.mkdir()
    (linked / LOCK_NAME).symlink_to(target)
    (folder / LOCK_NAME).mkdir(parents=True)
    for sweep_dir in (linked, folder):
        lock = re.escape(str(sweep_dir / LOCK_NAME))
        with pytest.raises(
            ValueError, match=rf"lock file {lock} is unusable: remove what is there"
        ):
            lock_sweep_dir(sweep_dir)
    assert target.read_text() == "keep me\n"


def test_a_sweep_folder_is_held_by_one_sweep_and_let_go_when_it_ends(tmp_path: Path) -> None:
    from sweeper.launch.dir_lock import lock_sweep_dir

    fresh = tmp_path / "multirun" / "day" / "time"
    held = lock_sweep_dir(fresh)
    words = rf"hydra.sweep.dir={fresh} is in use by another sweep \(pid {os.getpid()} on "
    with pytest.raises(ValueError, match=words):
        lock_sweep_dir(fresh)
    held.release(tidy=True)  # refused before writing anything: what the lock made goes
    assert not (tmp_path / "multirun").exists()
    lock_sweep_dir(fresh).release()
    lock_sweep_dir(fresh).release()  # a sweep that ended (or died) leaves its folder free
    kept = tmp_path / "kept"
    (kept / "0").mkdir(parents=True)
    lock_sweep_dir(kept).release(tidy=True)  # a folder that was there stays, with its jobs
    assert (kept / "0").is_dir()


def test_a_second_sweep_on_a_folder_in_use_is_refused_before_it_starts_anything(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "shared-folder"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, pathlib; from sweeper.launch.dir_lock import "
            f"lock_sweep_dir; held = lock_sweep_dir(pathlib.Path({str(folder)!r})); "
            "print('held', flush=True); sys.stdin.read()",
        ],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = run_sweep(tmp_path, "search=smoke", f"hydra.sweep.dir={folder}", timeout=120)
    finally:
        holder.communicate(input="", timeout=30)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    lines = [ln for ln in out.splitlines() if "is in use by another sweep" in ln]
    assert len(lines) == 1 and f"pid {holder.pid} on " in lines[0], out[-3000:]
    assert "Traceback" not in out and "zygote ready" not in out
    assert sorted(p.name for p in folder.iterdir()) == [".sweep.lock"]  # no job of its own


def test_two_sweeps_started_in_the_same_second_get_folders_of_their_own(tmp_path: Path) -> None:
    argvs = [
        sweep_argv(
            "search=smoke",
            "hydra.sweeper.n_trials=1",
            "hydra.sweeper.verify.top_k=1",
            f"hydra.sweeper.study_name=twin-{i}",
        )
        for i in range(2)
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = [
        subprocess.Popen(
            a, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for a in argvs
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-3000:]
    folders = sweep_dirs(tmp_path)
    assert len(folders) == 2, folders
    assert set(_studies_of(folders)) == {"twin-0", "twin-1"}


def _studies_of(folders: list[Path]) -> list[str]:
    """The study each sweep folder's best.yaml came from."""
    import yaml

    docs = [yaml.safe_load((f / "best.yaml").read_text()) for f in folders]
    return [d["provenance"]["sweep"]["study"] for d in docs]


def _stop_after_checkpoint(argv: list[str], *, checkpoint: Path, cwd: Path, act) -> tuple[int, str]:
    """Start `python -m train <argv>`, call `act(proc)` once `checkpoint` exists, and return the
    exit code and output. The run is far longer than the test (train.max_steps in argv), so the
    act always lands mid-run."""
    import time

    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "train", *argv],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while not checkpoint.exists():
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.monotonic() < deadline, f"no {checkpoint.name} within 120 s"
            time.sleep(0.05)
        act(proc)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out


def _one_error(out: str) -> str:
    assert "Traceback" not in out, out[-3000:]
    errors = [ln for ln in out.splitlines() if "[ERROR]" in ln]
    assert len(errors) == 1, out[-3000:]
    return errors[0]


def test_ctrl_c_twice_at_a_production_run_ends_in_the_resume_line(
    synthetic_dir: Path, tmp_path: Path
) -> None:
    import signal
    import time

    ck = tmp_path / "ck"

    def interrupt_twice(proc: subprocess.Popen) -> None:
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)

    with fault("Ctrl-C twice at python -m train") as f:
        argv = _argv(synthetic_dir, ck, tmp_path / "run", "train.max_steps=100000")
        code, out = _stop_after_checkpoint(
            argv, checkpoint=checkpoint_path(ck, 10), cwd=tmp_path, act=interrupt_twice
        )
        line = _one_error(out)
        assert code == 130, out[-3000:]
        kept = latest_checkpoint(ck)
        assert kept is not None and read_header(kept)["step"] >= 10
        assert "stopped at step " in line and "(interrupted)" in line, line
        assert f"the newest checkpoint is {kept} (step {read_header(kept)['step']})" in line, line
        assert line.endswith("the same command resumes from it"), line
        f["lost"] += int(read_header(kept)["step"] < 10)


def test_a_token_file_that_shrinks_under_a_run_stops_it_in_one_line(
    synthetic_dir: Path, tmp_path: Path
) -> None:
    import shutil

    data = tmp_path / "data"
    shutil.copytree(synthetic_dir, data)
    ck = tmp_path / "ck"
    train_bin = data / "train.bin"
    size = train_bin.stat().st_size

    def truncate(proc: subprocess.Popen) -> None:
        with train_bin.open("r+b") as fh:
            fh.truncate(size // 2)

    with fault("token file truncated under python -m train") as f:
        argv = _argv(data, ck, tmp_path / "run", "train.max_steps=100000")
        code, out = _stop_after_checkpoint(
            argv, checkpoint=checkpoint_path(ck, 10), cwd=tmp_path, act=truncate
        )
        line = _one_error(out)
        assert code == 1, out[-3000:]  # not 135 (SIGBUS)
        assert (
            f"token file changed under the run: {train_bin} shrank from {size:,} to "
            f"{size // 2:,} bytes" in line
        ), line
        assert "the newest checkpoint is " in line and "resumes from it" in line, line
        f["lost"] += int(latest_checkpoint(ck) is None)


@contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` (a real disk that fills up), or a skip where this
    machine cannot mount one (not root, no tmpfs)."""
    path.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_sweep_folder_on_a_disk_that_fills_ends_in_one_line_keeping_every_trial(
    tmp_path: Path,
) -> None:
    from tests.sweep_helpers import load_study

    with fault("disk full under the sweep folder") as f, small_disk(tmp_path / "full", "200k"):
        folder = tmp_path / "full" / "sweep"
        proc = run_sweep(
            tmp_path,
            "search=smoke",
            "hydra.sweeper.n_trials=6",
            "hydra.sweeper.study_name=full",
            f"hydra.sweep.dir={folder}",
        )
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1, out[-3000:]
        assert "Traceback" not in out and "--- Logging error ---" not in out, out[-3000:]
        errors = [ln for ln in out.splitlines() if "[ERROR]" in ln]
        assert len(errors) == 1, out[-4000:]
        (line,) = errors
        assert f"disk full: no space left on device writing {folder}" in line, line
        assert (
            f"every trial folder in {folder}; free space there or point hydra.sweep.dir "
            "at a disk with room; resume with: " in line
        ), line
        study = load_study(tmp_path, "full")
        # the trials measured (a re-proposed point is completed from its twin, with no folder)
        done = [
            t for t in study.trials if t.state == TrialState.COMPLETE and "job_dir" in t.user_attrs
        ]
        assert done and not [t for t in study.trials if t.state == TrialState.RUNNING]
        f["lost"] += sum(not Path(t.user_attrs["job_dir"]).is_dir() for t in done)


def test_a_garbled_compile_cache_is_named_in_one_line_and_clearing_it_as_said_works(
    synthetic_dir: Path, tmp_path: Path
) -> None:
    import shutil

    cache = tmp_path / "cache"
    argv = ["runtime.compile=default", f"runtime.compile_cache={cache}", "train.max_steps=2"]
    with fault("garbled compile cache at python -m train") as f:
        first, _ = train(synthetic_dir, tmp_path / "ck1", tmp_path / "a", *argv)
        assert first.returncode == 0, first.stderr[-3000:]
        modules = [p for p in cache.rglob("*.py") if p.is_file()]
        assert modules, "the first run cached no compiled module"
        for p in modules:  # every cached module cut short, as a full disk or a bad copy leaves it
            p.write_text(p.read_text()[:100])
        proc, _ = train(synthetic_dir, tmp_path / "ck2", tmp_path / "b", *argv)
        clear = f"the cache is damaged; clear it (rm -rf {cache})"
        line = assert_one_line_error(
            proc, "torch.compile failed loading ", f"from the compile cache {cache} (", clear
        )
        shutil.rmtree(cache)  # what the line says
        again, summary = train(synthetic_dir, tmp_path / "ck3", tmp_path / "c", *argv)
        assert again.returncode == 0 and summary is not None, again.stderr[-3000:]
        f["lost"] += int("rm -rf" not in line)
