"""Data-parallel trials and runs (runtime.nproc > 1) on this CPU: gloo DDP under torch's launcher.

The pure parts (which rank ended a run, which device a rank takes, each rank's slice of a global
batch, the comms span carved out of a clock) are table-tested; the rest runs for real: two gloo
ranks against one process at the same global batch and seed, a rank that crashes, is killed or
hangs, and a production run whose launcher is killed with SIGKILL and then resumed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch import nn

from tests.conftest import fast_overrides, production_argv, run_cli, sigkill_after_checkpoint
from train.core.meters import PhaseClock
from train.core.rules import grad_accum_across_ranks
from train.data.dataset import TokenBatches, open_tokens
from train.run.checkpoint import checkpoint_path, latest_checkpoint, read_header
from train.run.distributed import ExposedComms, Rank, current_rank, rank_device_name, wrap_ddp
from train.run.torchrun import RankExit, exit_text, needs_launch, root_failure, under_torchrun

# ---- pure parts ---------------------------------------------------------------------------------

TERM, KILL, ABRT = -signal.SIGTERM, -signal.SIGKILL, -signal.SIGABRT


@pytest.mark.parametrize(
    ("failures", "written", "want"),
    [
        ({1: 3, 0: TERM}, {1: 5.0}, RankExit(rank=1, exitcode=3)),  # crashed; its peer stopped
        ({0: 3, 1: 3}, {0: 9.0, 1: 4.0}, RankExit(rank=1, exitcode=3)),  # first record wins
        ({0: 3, 1: KILL}, {0: 1.0}, RankExit(rank=1, exitcode=KILL)),  # killed outright: root
        ({0: TERM, 1: TERM}, {}, RankExit(rank=0, exitcode=TERM)),  # all stopped: the first
        ({2: 1}, {}, RankExit(rank=2, exitcode=1)),
        # the peer of a crashed rank wrote "connection closed", then gloo aborted it
        ({0: ABRT, 1: 3}, {1: 5.0, 0: 6.0}, RankExit(rank=1, exitcode=3)),
        ({0: ABRT, 1: KILL}, {0: 6.0}, RankExit(rank=1, exitcode=KILL)),
    ],
)
def test_the_root_failure_is_the_rank_that_failed_on_its_own(failures, written, want) -> None:
    assert root_failure(failures, written) == want


def test_exit_text_names_signals() -> None:
    assert exit_text(3) == "exit code 3"
    assert exit_text(KILL) == "killed by SIGKILL"
    assert RankExit(rank=1, exitcode=3).text(2) == "rank 1 of 2 failed (exit code 3)"


@pytest.mark.parametrize(
    ("requested", "rank", "cuda", "want"),
    [
        ("auto", Rank(), True, "auto"),
        ("auto", Rank(rank=3, local_rank=1, world=4), True, "cuda:1"),
        ("cuda", Rank(rank=1, local_rank=1, world=2), True, "cuda:1"),
        ("auto", Rank(rank=1, local_rank=1, world=2), False, "auto"),  # a CPU: gloo ranks
        ("cpu", Rank(rank=1, local_rank=1, world=2), True, "cpu"),
        ("cuda:0", Rank(), True, "cuda:0"),
    ],
)
def test_each_rank_takes_its_own_gpu(requested, rank, cuda, want) -> None:
    assert rank_device_name(requested, rank, cuda_available=cuda) == want


def test_a_fixed_gpu_for_every_rank_is_refused() -> None:
    with pytest.raises(ValueError, match=r"runtime\.device=cuda:0 with 2 processes"):
        rank_device_name("cuda:0", Rank(rank=0, local_rank=0, world=2), cuda_available=True)


def test_ranks_and_launch_come_from_torchruns_environment() -> None:
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "x"}
    assert current_rank(env) == Rank(rank=3, local_rank=1, world=4)
    assert current_rank({}) == Rank() and Rank().main
    assert under_torchrun(env) and not under_torchrun({})
    assert needs_launch(2, {}) and not needs_launch(2, env) and not needs_launch(1, {})


def test_each_rank_reads_its_slice_of_the_global_batch(synthetic_dir: Path) -> None:
    """Batch i of 2 ranks x 3 sequences is batch i of one process with 6, split in two."""
    tokens = open_tokens(synthetic_dir / "train.bin", format="auto", block_size=16, vocab_size=4096)
    whole = TokenBatches(tokens, micro_batch=6, block_size=16, seed=7)
    parts = [
        TokenBatches(tokens, micro_batch=3, block_size=16, seed=7, rank=r, world=2)
        for r in range(2)
    ]
    for i in (0, 1, 41):
        x, y = whole[i]
        assert torch.equal(torch.cat([p[i][0] for p in parts]), x)
        assert torch.equal(torch.cat([p[i][1] for p in parts]), y)
    assert not np.array_equal(parts[0].offsets(0), parts[1].offsets(0))
    with pytest.raises(ValueError, match=r"rank must be in 0\.\.world-1"):
        TokenBatches(tokens, micro_batch=3, block_size=16, seed=7, rank=2, world=2)


def test_carving_a_span_charges_its_tail_to_comms() -> None:
    ticks = iter([0.0, 1.0, 3.0, 4.0])  # compute starts, bucket ready, backward returns, ...
    clock = PhaseClock(clock=lambda: next(ticks))
    with clock.phase("compute"):
        mark = clock.mark()  # what ExposedComms takes when the last gradient is ready
    clock.carve(mark, into="comms")
    phases = clock.take()
    assert (phases["compute"], phases["comms"]) == (1.0, 2.0)
    assert clock.last_spans == [("compute", 1.0), ("comms", 2.0)]


def test_the_last_gradient_is_marked_in_a_real_ddp_backward(tmp_path: Path) -> None:
    """One gloo rank (a real process group and DDP): the armed backward is split at the last
    gradient's mark, and an unarmed one is left alone with no hook on any parameter."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        from train.core.config import DdpConfig

        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 1))
        comms = ExposedComms(net.parameters())
        model = wrap_ddp(net, device=torch.device("cpu"), cfg=DdpConfig())
        # no Python comm hook: its future's callback is freed on a gloo worker thread, which
        # needs the GIL for it (see the next test)
        clock = PhaseClock()
        with clock.phase("compute"):
            loss = model(torch.randn(4, 8)).sum()
            comms.arm(clock)
            loss.backward()
        comms.carve()
        assert comms.grads == 4  # two weights, two biases
        assert "comm_hook" not in model._get_ddp_logging_data()
        assert [name for name, _ in (clock.take() and clock.last_spans)] == ["compute", "comms"]
        assert not any(p._post_accumulate_grad_hooks for p in net.parameters())
        with clock.phase("compute"):  # not armed: DDP only all-reduces
            model(torch.randn(4, 8)).sum().backward()
        comms.carve()
        clock.take()
        assert [name for name, _ in clock.last_spans] == ["compute"]
    finally:
        dist.destroy_process_group()


FREED_AFTER_GROUP = """
import sys, torch, torch.distributed as dist
from torch import nn
from train.core.config import DdpConfig
from train.core.meters import PhaseClock
from train.run.distributed import ExposedComms, wrap_ddp
dist.init_process_group("gloo", store=dist.FileStore(sys.argv[1], 1), rank=0, world_size=1)
for _ in range(int(sys.argv[2])):
    net = nn.Sequential(*[nn.Linear(64, 64) for _ in range(8)])
    model = wrap_ddp(net, device=torch.device("cpu"), cfg=DdpConfig(bucket_cap_mb=0.01))
    comms, loss = ExposedComms(net.parameters()), model(torch.randn(4, 64)).sum()
    with (clock := PhaseClock()).phase("compute"):
        comms.arm(clock)
        loss.backward()
    comms.carve()
dist.destroy_process_group()
del model  # the last reference to the process group, freed after the group was left
print("freed")
"""


def test_a_ddp_model_freed_after_its_process_group_does_not_hang(tmp_path: Path) -> None:
    """The order a run ends in: leave the group, then the model goes. With a Python comm hook
    this deadlocked (under CI load, in this file's earlier hook test): the group's destructor,
    run with the GIL held, joined a gloo worker that needed the GIL to free the hook's future
    callback. No Python runs on gloo's threads now (the test above checks that no comm hook is
    registered); the race was not reproduced on demand, so this guards the teardown order."""
    for attempt in range(2):
        proc = subprocess.run(
            [sys.executable, "-c", FREED_AFTER_GROUP, str(tmp_path / f"store{attempt}"), "20"],
            capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2],
        )  # fmt: skip
        assert proc.returncode == 0 and "freed" in proc.stdout, proc.stderr[-2000:]


# ---- real ranks ---------------------------------------------------------------------------------

# 1024 tokens a step: one process 8 x 2 x 64, or two ranks of 4 x 2 x 64 each (the same global
# batch); four warm-up steps and a short window, so the first 5 steps are compared
TRIAL = (
    "batch.tokens_per_step=1024",
    "batch.grad_accum=2",
    "trial.warmup_steps=4",
    "trial.max_steps=4",
    "trial.min_steps=2",
    "trial.project_above_s=0",
)


def trial(
    synthetic_dir: Path, out: Path, *overrides: str
) -> tuple[subprocess.CompletedProcess, dict]:
    """`python -m train.trial` with `overrides`; its process and result."""
    argv = [*fast_overrides(synthetic_dir, out / "ck"), *TRIAL, f"hydra.run.dir={out}", *overrides]
    proc = run_cli("train.trial", argv, cwd=out.parent, timeout=240)
    return proc, json.loads((out / "trial.json").read_text())


def processes_mentioning(needle: str) -> list[int]:
    """Pids whose command line holds `needle` (a run's own folder): what it left running."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if needle in cmdline and int(entry.name) != os.getpid():
                pids.append(int(entry.name))
    return pids


def test_two_gloo_ranks_train_what_one_process_trains(synthetic_dir: Path, tmp_path: Path) -> None:
    one_proc, one = trial(synthetic_dir, tmp_path / "one", "batch.micro_batch=8")
    two_proc, two = trial(synthetic_dir, tmp_path / "two", "batch.micro_batch=4", "runtime.nproc=2")
    assert one["status"] == "complete", one_proc.stderr[-3000:]
    assert two["status"] == "complete", two_proc.stderr[-3000:]
    assert (one["tokens_per_step"], two["tokens_per_step"]) == (1024, 1024)
    assert (one["world_size"], two["world_size"]) == (1, 2)
    a, b = one["loss"]["steps"][:5], two["loss"]["steps"][:5]
    assert len(a) == len(b) == 5
    assert max(abs(x - y) / abs(x) for x, y in zip(a, b, strict=True)) <= 1e-5, (a, b)
    assert "comms" not in one["time_frac"]
    assert 0 < two["time_frac"]["comms"] < 1
    assert abs(sum(two["time_frac"].values()) - 1) < 1e-9
    assert "comms" in two_proc.stdout and "(2 processes)" in two_proc.stdout
    assert not (tmp_path / "two" / "trial.rank1.json").exists()  # rank 1 writes only a failure


@pytest.mark.parametrize(
    ("fault", "kind", "says"),
    [
        ("crash", "crash", "rank 1 of 2 failed (exit code 3): RuntimeError: planted crash"),
        ("sigkill", "crash", "rank 1 of 2 failed (killed by SIGKILL)"),
        (
            "hang",
            "timeout",
            "rank 0 of 2 failed (exit code 3): a collective waited longer than "
            "ddp.timeout_s=3 s: another rank hung or died",
        ),
    ],
)
def test_a_failing_rank_fails_the_trial_with_its_reason_and_leaves_nothing_running(
    synthetic_dir: Path, tmp_path: Path, fault: str, kind: str, says: str
) -> None:
    out = tmp_path / fault
    started = time.monotonic()
    proc, result = trial(
        synthetic_dir,
        out,
        "batch.micro_batch=4",
        "runtime.nproc=2",
        f"hooks.fault={fault}",
        "hooks.fault_rank=1",
        "ddp.timeout_s=3",
    )
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert result["status"] == "failed"
    assert result["failure"]["kind"] == kind
    assert result["failure"]["message"].startswith(says), result["failure"]["message"][:400]
    assert time.monotonic() - started < 120
    assert processes_mentioning(str(out)) == []


# ---- the production run under runtime.nproc=2 ---------------------------------------------------

RUN = ("batch.tokens_per_step=512", "batch.grad_accum=2")


def _train_argv(synthetic_dir: Path, ck: Path, out: Path, *overrides: str) -> list[str]:
    return production_argv(synthetic_dir, ck, out, *RUN, *overrides)


def _losses(out: Path) -> dict[int, float]:
    summary = json.loads((out / "train_summary.json").read_text())
    return {h["step"]: h["loss"] for h in summary["history"] if "loss" in h}


@pytest.mark.parametrize(
    ("tokens", "micro_batch", "grad_accum", "world", "want"),
    [
        (4096, 8, 8, 2, 4),  # best.yaml swept on one process, trained on two: 8 -> 4 per rank
        (4096, 8, 8, 8, 1),
        (4096, 8, 4, 1, 8),  # swept on two ranks, trained on one: 4 -> 8
        (4096, 8, 8, 1, None),  # already fits
        (4096, 8, 2, 2, 4),  # made for 4 ranks (8 x 2 x 64 x 4), trained on 2
        (4096, 8, 3, 2, None),  # fits no whole number of ranks (8 x 3 x 64 = 1536): refused
        (4096, 8, 1, 16, None),  # 16 ranks cannot keep micro-batch 8 (8 x 64 x 16 > 4096)
        (4096, 8, 8, 3, None),  # 4096 does not split over 3 ranks
    ],
)
def test_grad_accum_is_divided_across_ranks_where_the_split_was_made_for_others(
    tokens, micro_batch, grad_accum, world, want
) -> None:
    got = grad_accum_across_ranks(
        tokens_per_step=tokens,
        micro_batch=micro_batch,
        grad_accum=grad_accum,
        block_size=64,
        world=world,
    )
    assert got == want
    if got is not None:
        assert micro_batch * got * 64 * world == tokens


def test_a_single_process_split_trains_on_two_ranks_as_written(
    synthetic_dir: Path, tmp_path: Path
) -> None:
    """The production example: a config whose split was made for one process (micro-batch 1 x
    grad_accum 8 x block 64 = 512 tokens) trains on runtime.nproc=2 with grad_accum 4 per rank,
    said in one line, the tokens per step kept; a grad_accum given beside it is the user's."""
    base = [
        a
        for a in fast_overrides(synthetic_dir, tmp_path / "ck")
        if not a.startswith(("batch.micro_batch=", "batch.grad_accum="))
    ]
    argv = [
        *base,
        "batch.micro_batch=1",
        "train.max_steps=2",
        "train.eval_every=0",
        "checkpoint.every_steps=0",
        f"hydra.run.dir={tmp_path / 'run'}",
        "runtime.nproc=2",
    ]
    proc = run_cli("train", argv, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert (
        "2 processes: batch.grad_accum 8 -> 4 per process, keeping batch.micro_batch 1 and "
        "batch.tokens_per_step 512 (1 x 4 x block 64 x 2 processes)"
    ) in out
    summary = json.loads((tmp_path / "run" / "train_summary.json").read_text())
    assert summary["history"][-1]["step"] == 2
    given = run_cli("train", [*argv, "batch.grad_accum=8"], cwd=tmp_path)
    assert given.returncode == 2
    assert "x world (2) = 1024, but batch.tokens_per_step is 512" in given.stdout + given.stderr


def test_a_two_process_run_killed_with_sigkill_resumes_with_no_step_lost_or_repeated(
    synthetic_dir: Path, tmp_path: Path
) -> None:
    two = ("batch.micro_batch=2", "runtime.nproc=2", "train.max_steps=30")
    straight = run_cli(
        "train",
        _train_argv(synthetic_dir, tmp_path / "ck0", tmp_path / "straight", *two),
        cwd=tmp_path,
    )
    assert straight.returncode == 0, straight.stderr[-3000:]
    want = _losses(tmp_path / "straight")
    assert sorted(want) == list(range(1, 31))
    single = run_cli(
        "train",
        _train_argv(
            synthetic_dir,
            tmp_path / "ck1",
            tmp_path / "single",
            "batch.micro_batch=4",
            "train.max_steps=30",
        ),
        cwd=tmp_path,
    )
    assert single.returncode == 0, single.stderr[-3000:]
    alone = _losses(tmp_path / "single")  # one process, the same global batches
    assert max(abs(alone[s] - want[s]) / abs(alone[s]) for s in range(1, 6)) <= 1e-5

    ck, killed = tmp_path / "ck", tmp_path / "killed"
    argv = _train_argv(synthetic_dir, ck, killed, *two, "checkpoint.slow_write_s=0.4")
    sigkill_after_checkpoint(argv, checkpoint=checkpoint_path(ck, 10), cwd=tmp_path)  # the agent
    deadline = time.monotonic() + 10
    while processes_mentioning(str(killed)) and time.monotonic() < deadline:
        time.sleep(0.1)  # the ranks die with their launcher (parent-death signal)
    assert processes_mentioning(str(killed)) == []
    start = read_header(latest_checkpoint(ck))["step"]
    assert 10 <= start < 30

    resumed = run_cli(
        "train", _train_argv(synthetic_dir, ck, tmp_path / "resumed", *two), cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got = _losses(tmp_path / "resumed")
    assert sorted(got) == list(range(start + 1, 31))  # each step once: none lost or repeated
    assert got == {s: v for s, v in want.items() if s > start}  # the uninterrupted run's, exactly
    a = torch.load(checkpoint_path(tmp_path / "ck0", 30), weights_only=True)["model"]
    b = torch.load(checkpoint_path(ck, 30), weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
