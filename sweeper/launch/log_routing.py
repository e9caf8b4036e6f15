"""What reaches the console and what only the sweep's log file keeps.

Hydra's launchers say "Launching 1 jobs locally" and the job's whole override line for every trial
(numbered by Hydra's job counter, which is not the trial number), Optuna's experimental-feature
warning and MLflow's database set-up lines come on every run, and a job logs the folder it ran
in. The trial's own progress line (sweeper/report/console.py) says all of it in trial numbers, so
those lines go to `<sweep dir>/sweep.log` only; warnings and errors of every logger still reach
the console.

How: Hydra configures logging from `hydra.hydra_logging` at the start and again around every
launch, so the sweep's copy of that config gains a filter on its console handlers and a handler
for the log file (`route_sweep_logging`), and every reconfiguration keeps them. Optuna's and
MLflow's loggers print through handlers of their own; they are handed to the root logger
(`adopt_library_logger`). A job running in this process (Hydra's basic launcher) logs through
Hydra's job logging: `quiet_console` filters its console handlers too.

A console line is at most `MAX_CONSOLE_WIDTH` characters (or the terminal's width, if less): a
longer one is wrapped at word boundaries by `ConsoleFormatter`; the log file keeps it whole.
"""

from __future__ import annotations

import logging
import shutil
import textwrap
import threading
from pathlib import Path
from typing import Any, ClassVar

from sweeper.launch.disk_full import tolerate_full_disks
from sweeper.masking import mask_secrets

SWEEP_LOG_NAME = "sweep.log"
# Loggers whose lines below WARNING are chatter on the console: Hydra's launchers (the per-job
# "Launching 1 jobs locally" and "#<job> : <overrides>"), our job's "trial in <dir>" and which
# Hydra job runs which trial, MLflow's and Optuna's set-up lines, torchao's load messages, and
# matplotlib's notes while Optuna's views are drawn.
QUIET_LOGGERS = (
    "hydra._internal.core_plugins.basic_launcher",
    "hydra_plugins.hydra_joblib_launcher",
    "hydra_plugins.hydra_submitit_launcher",
    "sweeper.launch.job",
    "sweeper.launch.batch",
    "mlflow",
    "alembic",
    "optuna",
    "torchao",
    "matplotlib",
    "sweeper.report.record",  # the report's lines in full (every knob): the console shortens them
)
# Third-party warnings the sweep triggers on purpose, by category name as `warnings` prints it:
# Optuna's RDB heartbeat (which recovers trials of a dead worker) is marked experimental.
KNOWN_WARNINGS = ("ExperimentalWarning",)
FILE_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
# The widest console line; a log, CI or Slurm output file has no terminal width of its own.
MAX_CONSOLE_WIDTH = 160
CONTINUATION = "    "  # the indent of a wrapped line's continuation


def _quiet(name: str) -> bool:
    return any(name == q or name.startswith(q + ".") for q in QUIET_LOGGERS)


def known_warning(message: str) -> bool:
    """Whether a captured warning (`logging.captureWarnings`) is one of KNOWN_WARNINGS."""
    return any(f"{category}:" in message for category in KNOWN_WARNINGS)


class ConsoleFilter(logging.Filter):
    """Lets through what a user reads on the console: warnings and errors (but the known
    third-party warnings), and the sweep's own info lines (but QUIET_LOGGERS')."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "py.warnings":
            return not known_warning(record.getMessage())
        return record.levelno >= logging.WARNING or not _quiet(record.name)


def console_width() -> int:
    """The console's width: the terminal's (or $COLUMNS), at most MAX_CONSOLE_WIDTH."""
    columns = shutil.get_terminal_size((MAX_CONSOLE_WIDTH, 24)).columns
    return max(40, min(columns, MAX_CONSOLE_WIDTH))


def wrap_lines(text: str, width: int) -> list[str]:
    """`text` with each line longer than `width` wrapped at word boundaries, its continuation
    indented past the line's own indent; a word longer than the width (a path) is left whole."""
    out: list[str] = []
    for line in text.splitlines() or [""]:
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip(" "))) + CONTINUATION
        out += textwrap.wrap(
            line,
            width=width,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
    return out


class ConsoleFormatter(logging.Formatter):
    """The console handler's format with its lines wrapped to `console_width`. An error is printed
    whole (the command it ends with, how to resume, is copied as one line) and always says it is
    one: Hydra's sweep format ("[time][HYDRA] message") names no level, and which format is
    active when a sweep ends depends on where it ended (inside a job's logging or not)."""

    def format(self, record: logging.LogRecord) -> str:
        if record.levelno < logging.ERROR:
            return "\n".join(wrap_lines(super().format(record), console_width()))
        if "levelname" not in (self._fmt or ""):
            marked = f"[{record.levelname}] {record.getMessage()}"
            record = logging.makeLogRecord({**record.__dict__, "msg": marked, "args": None})
        return super().format(record)


class SecretFilter(logging.Filter):
    """Masks URL passwords and secret-looking key=value pairs (sweeper/masking.py) in every line
    the console or the sweep's log file gets, whoever logged it: a storage URL in Hydra's
    override lines, an error quoting a connection string."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        masked = mask_secrets(text)
        if masked != text:
            record.msg, record.args = masked, None
        return True


class SweepLogHandler(logging.Handler):
    """Appends every record to the sweep's log file. Lines logged before the sweep dir exists wait
    in memory (a sweep refused on bad input leaves no folder behind) and are written with the
    first line after it does. The waiting lines are kept per path, across the handler objects
    that each of Hydra's logging reconfigurations creates."""

    _waiting: ClassVar[dict[Path, list[str]]] = {}
    _lock = threading.Lock()
    MAX_WAITING = 10_000  # lines; a sweep that never makes its folder keeps no more

    def __init__(self, path: str, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.path = Path(path)
        self.setFormatter(logging.Formatter(FILE_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
            with self._lock:
                waiting = self._waiting.setdefault(self.path, [])
                if not self.path.parent.is_dir():
                    if len(waiting) < self.MAX_WAITING:
                        waiting.append(line)
                    return
                with self.path.open("a", encoding="utf-8") as f:
                    f.writelines([*waiting, line])
                waiting.clear()
        except Exception:
            self.handleError(record)


def _console_handlers(handlers: Any) -> list[str]:
    """The names of the handlers in a logging config that print to a stream (not a file)."""
    names = []
    for name, spec in (handlers or {}).items():
        cls = str(spec.get("class", ""))
        if cls.endswith("StreamHandler") and "File" not in cls:
            names.append(name)
    return names


def add_routes(logging_cfg: Any, log_file: Path) -> None:
    """Edit a `hydra.hydra_logging` config (a DictConfig, in place): console handlers filtered,
    and every record of the root logger also written to `log_file`."""
    from omegaconf import open_dict, read_write

    with read_write(logging_cfg), open_dict(logging_cfg):
        if "root" not in logging_cfg:
            return  # hydra/hydra_logging=disabled: nothing is printed anyway
        logging_cfg.setdefault("filters", {})
        logging_cfg.filters["sweep_console"] = {"()": f"{__name__}.ConsoleFilter"}
        logging_cfg.filters["sweep_secrets"] = {"()": f"{__name__}.SecretFilter"}
        logging_cfg.setdefault("handlers", {})
        for name in _console_handlers(logging_cfg.handlers):
            spec = logging_cfg.handlers[name]
            spec["filters"] = [*list(spec.get("filters") or []), "sweep_console"]
            _wrap_formatter(logging_cfg, spec)
        logging_cfg.handlers["sweep_log"] = {
            "()": f"{__name__}.SweepLogHandler",
            "path": str(log_file),
        }
        for spec in logging_cfg.handlers.values():  # no handler writes a secret
            spec["filters"] = [*list(spec.get("filters") or []), "sweep_secrets"]
        root = logging_cfg.root
        root["handlers"] = [*list(root.get("handlers") or []), "sweep_log"]


def _wrap_formatter(logging_cfg: Any, handler: Any) -> None:
    """A console handler's plain format (Hydra's `simple`) through ConsoleFormatter; a formatter
    of the user's own class (colorlog) is left as it is."""
    formatters = logging_cfg.setdefault("formatters", {})
    spec = formatters.get(handler.get("formatter")) if handler.get("formatter") else None
    if spec is None or "()" in spec or "class" in spec:
        return
    name = f"{handler.formatter}_sweep_console"
    formatters[name] = {
        "()": f"{__name__}.ConsoleFormatter",
        "fmt": spec.get("format"),
        "datefmt": spec.get("datefmt"),
    }
    handler["formatter"] = name


def route_sweep_logging(config: Any) -> Path:
    """Route the sweep's logging (see the module docstring) for the Hydra config `config` that
    the launcher shares, and apply it now; the log file's path."""
    from hydra.core.utils import configure_log

    log_file = Path(str(config.hydra.sweep.dir)).resolve() / SWEEP_LOG_NAME
    add_routes(config.hydra.hydra_logging, log_file)
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    tolerate_full_disks()  # a full disk under the log file: said once, not a traceback a line
    logging.captureWarnings(True)  # warnings reach the log file; the filter judges the console
    adopt_optuna()
    return log_file


def adopt_optuna() -> None:
    """Optuna's lines through the root logger (its own stderr handler off)."""
    import optuna

    optuna.logging.disable_default_handler()
    optuna.logging.enable_propagation()


def adopt_library_logger(name: str) -> None:
    """A library logger that prints through a handler of its own (MLflow's, set up on import)
    hands its records to the root logger instead, where the console filter and the log file are.
    Only where the sweep routes its logging: otherwise (a test, a script) it is left alone."""
    if not any(isinstance(h, SweepLogHandler) for h in logging.getLogger().handlers):
        return
    logger = logging.getLogger(name)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.propagate = True


def quiet_console() -> None:
    """Filter the root logger's console handlers as the sweep's are, and mask secrets in every
    handler (a job's logging, which Hydra configures from `hydra.job_logging` in the job's own
    process or in ours)."""
    for handler in logging.getLogger().handlers:
        console = isinstance(handler, logging.StreamHandler) and not isinstance(
            handler, logging.FileHandler
        )
        if console and not any(isinstance(f, ConsoleFilter) for f in handler.filters):
            handler.addFilter(ConsoleFilter())
        if not any(isinstance(f, SecretFilter) for f in handler.filters):
            handler.addFilter(SecretFilter())  # the job's log file too


def drop_sweep_log() -> None:
    """Stop writing to the sweep's log file: a sweep refused a folder that another sweep holds
    must not write its lines into that sweep's log."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, SweepLogHandler)]:
        root.removeHandler(handler)
        handler.close()
