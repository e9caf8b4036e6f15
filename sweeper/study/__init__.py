"""The Optuna state and what it scores. The study in its storage is the sweep's source of truth.

- `optuna_study`: storage, sampler, pruner, and resuming a sweep that was killed.
- `owner`: which sweep process owns a trial or a run, and whether it still lives.
- `budget`: trials left, wall time left, the verification reserve, the failure-rate stop.
- `objective`: what a trial is scored on (tokens/s or the production run's time to train).
- `export_claim`: which worker of a shared study verifies and exports its best.
"""

__all__ = ["budget", "export_claim", "objective", "optuna_study", "owner"]
