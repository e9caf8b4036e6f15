"""The launch plumbing: how one trial runs as a Hydra job in its own child process.

`job` is what each Hydra job executes (it pins the trial's config and reads its limits back from the
job's overrides), `runner` runs the trial in a child process under its hard and stall limits and
names how it ended, `children` keeps every live child stoppable so none outlives the sweep, and
`spawn` forks trials from a preloaded zygote so that a trial does not pay Python's and torch's
import time again. `threads` gives a race run the production run's torch threads where the launcher
caps its jobs' (joblib). None of them imports torch in the sweeper's process.
"""

__all__ = ["batch", "children", "job", "kinds", "runner", "spawn", "threads"]
