"""Optional Hydra plugins a command line asks for, named with the extra that installs them.

`hydra/launcher=joblib` without Hydra's joblib launcher installed ends in Hydra's own
"Could not find 'hydra/launcher/joblib'" and a list of the options it does know, which says
nothing about the fix. The sweep's entry point asks here first and answers in one line that
names the package extra (`pip install -e ".[scale]"`). Nothing here imports a plugin: a module
is looked up, not run.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

SCALE_EXTRA = 'pip install -e ".[scale]"'

# hydra/launcher=<choice> -> (the plugin module it needs, the plugin's name on PyPI)
LAUNCHER_PLUGINS = {
    "joblib": ("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher"),
    "submitit_local": ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher"),
    "submitit_slurm": ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher"),
    "slurm": ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher"),  # conf/
}


def installed(module: str) -> bool:
    """The module can be found (a finder that refuses it counts as not installed)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def launcher_choice(args: Iterable[str]) -> str | None:
    """The `hydra/launcher=<choice>` of a command line (the last one wins, as in Hydra)."""
    choice = None
    for arg in args:
        key, _, value = arg.partition("=")
        if key.lstrip("+") == "hydra/launcher" and value:
            choice = value
    return choice


def missing_plugin_error(args: Iterable[str]) -> str | None:
    """One line naming the extra when the command line's launcher plugin is not installed."""
    choice = launcher_choice(args)
    if choice not in LAUNCHER_PLUGINS:
        return None
    module, package = LAUNCHER_PLUGINS[choice]
    if installed(module):
        return None
    return (
        f"hydra/launcher={choice} needs Hydra's {package} plugin, which is not installed here: "
        f"install the package's scale extra ({SCALE_EXTRA}, from the repository root) and run "
        "the command again"
    )
