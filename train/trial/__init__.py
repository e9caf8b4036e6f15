"""One bounded, honest measurement of one configuration: `python -m train.trial`. `measurement`
runs it, `window` is its warm-up and measured window, `pinned` runs a fully resolved config file
(the sweeper's children). The versioned JSON every reader takes (`train/core/result.py`) and the
one place train/ talks to Optuna (`train/core/pruning.py`) are in the torch-free core.
"""
