"""Which Hydra launchers run trials where: what parallel trials and device planning depend on.

Launchers are told apart by class name, so nothing here imports them (a plugin that is not
installed is simply another name).
"""

from __future__ import annotations

# Jobs run inside the sweep's own process, through process-wide singletons (HydraConfig, the
# logging setup): two of its launches at once would swap each other's config.
IN_PROCESS_LAUNCHERS = ("BasicLauncher",)
# Jobs run on this machine (in this process, joblib's worker processes, or submitit's local
# executor): the probe made here describes their device, and parallel trials share out this
# machine's GPUs. Anything else (submitit's SlurmLauncher) runs them on other machines.
LOCAL_LAUNCHERS = ("BasicLauncher", "JoblibLauncher", "LocalLauncher")


def parallel(launcher: str) -> bool:
    """Several jobs of this launcher may run at once (each in a process of its own)."""
    return launcher not in IN_PROCESS_LAUNCHERS


def local(launcher: str) -> bool:
    """This launcher runs its jobs on this machine."""
    return launcher in LOCAL_LAUNCHERS
