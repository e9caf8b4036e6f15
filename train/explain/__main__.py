"""`python -m train.explain`: see train/explain/cli.py."""

from train.explain.cli import main

raise SystemExit(main())
