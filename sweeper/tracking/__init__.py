"""MLflow tracking for a sweep: an experiment per study and storage, one parent run per sweep (kept
across interruptions and resumes), a nested run per trial and per verification run.

- `names`: pure tables and names (URIs, the experiment of a study, run names and statuses, metrics)
- `parent`: which earlier parent run a resumed sweep continues
- `mlflow_run`: `SweepTracker`, the MLflow client side; every public method swallows its errors
- `protocol`: the `Tracker` the sweep calls, and `NullTracker` for
  `hydra.sweeper.mlflow.enabled=false`
- `stopped`: the trials a stopped sweep killed, each given its MLflow run
"""

__all__ = ["mlflow_run", "names", "parent", "protocol", "stopped"]
