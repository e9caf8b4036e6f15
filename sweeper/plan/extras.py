"""Optional plugins a command line asks for, named with the extra that installs them.

`hydra/launcher=joblib` without Hydra's joblib launcher installed ends in Hydra's own
"Could not find 'hydra/launcher/joblib'" and a list of the options it does know, which says
nothing about the fix. The sweep's entry point asks here first and answers in one line that
names the package extra (`pip install -e ".[scale]"`); so does a PostgreSQL storage without its
driver. Nothing here imports a plugin: a module is looked up, not run.
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


def storage_url(args: Iterable[str]) -> str | None:
    """The `hydra.sweeper.storage=<url>` of a command line (the last one wins)."""
    url = None
    for arg in args:
        key, _, value = arg.partition("=")
        if key.lstrip("+") == "hydra.sweeper.storage":
            url = value.strip("'\"")
    return url


# the driver each PostgreSQL URL scheme loads: SQLAlchemy >= 2.1 takes psycopg (3) for a bare
# postgresql://, 2.0 took psycopg2; the scale extra installs both
POSTGRES_DRIVERS = {"postgresql+psycopg2": "psycopg2", "postgresql+psycopg": "psycopg"}


def postgres_driver(url: str) -> str | None:
    """The module a PostgreSQL storage URL's driver is (None: not a PostgreSQL URL we know)."""
    scheme = url.split("://", 1)[0]
    if scheme == "postgresql":
        import sqlalchemy

        major, minor = (int(x) for x in sqlalchemy.__version__.split(".")[:2])
        return "psycopg" if (major, minor) >= (2, 1) else "psycopg2"
    return POSTGRES_DRIVERS.get(scheme)


def missing_driver_error(args: Iterable[str]) -> str | None:
    """One line naming the extra when a PostgreSQL storage's driver (`postgres_driver`) is not
    installed. The URL is not repeated: it may hold a password."""
    driver = postgres_driver(storage_url(args) or "")
    if driver is None or installed(driver):
        return None
    return (
        f"hydra.sweeper.storage is a PostgreSQL URL, and its driver {driver} is not installed "
        f"here: install the package's scale extra ({SCALE_EXTRA}, from the repository root) and "
        "run the command again"
    )


def missing_plugin_error(args: Iterable[str]) -> str | None:
    """One line naming the extra when the command line's launcher plugin, or its PostgreSQL
    storage's driver, is not installed."""
    args = list(args)
    choice = launcher_choice(args)
    if choice not in LAUNCHER_PLUGINS:
        return missing_driver_error(args)
    module, package = LAUNCHER_PLUGINS[choice]
    if installed(module):
        return missing_driver_error(args)
    return (
        f"hydra/launcher={choice} needs Hydra's {package} plugin, which is not installed here: "
        f"install the package's scale extra ({SCALE_EXTRA}, from the repository root) and run "
        "the command again"
    )
