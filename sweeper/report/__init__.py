"""Everything the user reads about a sweep, and the files it leaves behind. The numbers in it are
written by sweeper/numbers.py, one way each.

- `console`: the console, a progress line per trial, the final table.
- `plan_text`: the plan that `hydra.sweeper.plan.enabled=true` prints.
- `story`: the closing story: the starting config against the winner, and the next fixes.
- `prior_text`: the prior's line and each point's reason, for plan mode and the sweep's start.
- `verdict_text`: the race's verdict in words, for the console, sweep.log, the study, MLflow and
  best.yaml alike.
- `claim_text`: which worker of a shared study exports its best, and where, for the closing report.
- `time_to_train`: the time-to-train and price lines of the starting config and the winner.
- `plots`: Optuna's HTML views and the static PNG summary.
- `best_yaml`: best.yaml, the winning trainer config pinned with its evidence.
- `handoff`: the production checkpoint interval (Young/Daly), and best_nanogpt.py and best_llmc.sh
  beside best.yaml with what each target cannot express.
"""

__all__ = [
    "best_yaml",
    "claim_text",
    "console",
    "handoff",
    "plan_text",
    "plots",
    "prior_text",
    "story",
    "time_to_train",
    "verdict_text",
]
