"""One bounded, honest measurement of one configuration: `python -m train.trial`. `measurement`
runs it, `window` is its warm-up and measured window, `result` is the versioned JSON every reader
takes, `pruning` is the one place train/ talks to Optuna, `pinned` runs a fully resolved config
file (the sweeper's children).
"""
