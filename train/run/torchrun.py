"""Start a run as `runtime.nproc` DDP processes with torch.distributed's own launcher.

A trial or a production run started as one process with runtime.nproc > 1 becomes the torchrun
agent of its run: `launch` runs torch.distributed.launcher's `elastic_launch` (what `torchrun
--standalone --nproc-per-node N` runs: a c10d rendezvous on a free local port, no restarts),
which starts the ranks, watches them, and on the first failure stops the rest and reports which
rank failed and how (`RankExit`). Every rank binds itself to the agent (`bind_to_agent`), so a
SIGKILL of the agent (the sweeper's hard limit) takes the ranks with it: no process is left behind.
Under a torchrun the user started, nothing is relaunched: the process is already a rank.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from train.core.deathsig import die_with_parent, libc_prctl

log = logging.getLogger(__name__)

AGENT_PID_ENV = "THROUGHPUT_AGENT_PID"  # set by `launch` for its ranks
# the composed config every rank of a data-parallel trial or run loads (<name>.yaml)
LAUNCH_CONFIG = "launch_config"


def under_torchrun(env: Mapping[str, str] | None = None) -> bool:
    """This process is a rank that torchrun (or `launch`) started."""
    env = os.environ if env is None else env
    return "TORCHELASTIC_RUN_ID" in env or ("LOCAL_RANK" in env and "WORLD_SIZE" in env)


def needs_launch(nproc: int, env: Mapping[str, str] | None = None) -> bool:
    """runtime.nproc > 1 in a process that is not a rank yet: start the ranks."""
    return nproc > 1 and not under_torchrun(env)


def bind_to_agent() -> None:
    """Die with the launching agent (Linux's parent-death signal): torch starts each rank in a
    session of its own, out of reach of a kill aimed at the agent's process group."""
    agent = os.environ.get(AGENT_PID_ENV)
    if agent:
        die_with_parent(int(agent), libc_prctl())


def exit_text(exitcode: int) -> str:
    """`exit code 3`, or `killed by SIGKILL` for a negative (signal) code."""
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


@dataclass(frozen=True, kw_only=True)
class RankExit:
    """A rank that ended the run: its global rank and exit code (negative: a signal)."""

    rank: int
    exitcode: int

    def text(self, world: int) -> str:
        return f"rank {self.rank} of {world} failed ({exit_text(self.exitcode)})"


def root_failure(failures: Mapping[int, int], written: Mapping[int, float]) -> RankExit:
    """The rank whose failure ended the run, from the failed ranks' exit codes (negative: a
    signal) and the times their own failure records were written (`written`, rank -> mtime).

    A rank killed outright (a signal other than the launcher's SIGTERM, no record written: the
    OS's SIGKILL, a SIGSEGV) is the cause: its peers only saw it vanish. Else the rank that wrote
    its record first: a peer's "connection closed" follows the rank that crashed, even when that
    peer then aborts (gloo raises SIGABRT from a failed all-reduce). Else the first rank that
    failed on its own (exit code > 0)."""
    if not failures:
        raise ValueError("no failed rank to choose from")
    killed = sorted(
        r
        for r, code in failures.items()
        if code < 0 and code != -signal.SIGTERM and r not in written
    )
    if killed:
        return RankExit(rank=killed[0], exitcode=failures[killed[0]])
    own = (
        [r for r in failures if r in written]
        or [r for r, code in failures.items() if code > 0]
        or list(failures)
    )
    rank = min(own, key=lambda r: (written.get(r, float("inf")), r))
    return RankExit(rank=rank, exitcode=failures[rank])


def launch(*, nproc: int, argv: list[str], run_name: str = "run") -> dict[int, int]:
    """Run `python <argv>` as `nproc` ranks on this node and wait; returns the failed ranks'
    exit codes ({} when every rank exited 0). The agent stops the surviving ranks at the first
    failure (torch.distributed.elastic's default: no restarts)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=f"{run_name}-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",  # a free port, as torchrun --standalone
        max_restarts=0,
        monitor_interval=0.1,
    )
    os.environ[AGENT_PID_ENV] = str(os.getpid())
    log.info("starting %d data-parallel processes: python %s", nproc, " ".join(argv))
    try:
        elastic_launch(config, entrypoint=sys.executable)(*argv)
    except ChildFailedError as exc:
        return {rank: failure.exitcode for rank, failure in exc.failures.items()}
    finally:
        os.environ.pop(AGENT_PID_ENV, None)
    return {}
