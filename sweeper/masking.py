"""Secrets masked out of text that goes to logs, MLflow and best.yaml: URL passwords, secret-looking
`key=value` pairs and bearer tokens.

One rule for every place that shows a storage or tracking URL, so a password hidden in the log is
hidden in the exported file too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

_SECRET_KEYS = (
    r"[A-Za-z0-9_]*(?:token|password|passwd|pwd|secret|api_?key|sig|signature|credential)s?"
)
_SECRET_PATTERNS = [
    # scheme://user:password@host -> scheme://user:***@host. The password runs to the last `@`
    # before the path, query or fragment, so a raw `@` in it (which SQLAlchemy accepts) is masked
    # whole rather than leaking the part after the first `@`.
    (re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*):[^\s/?#]*@"), r"\1:***@"),
    # ?token=..., &password=..., X-Amz-Signature=..., plain "api_key=..." in text
    (re.compile(rf"(?i)(?<![A-Za-z0-9])({_SECRET_KEYS})=[^&\s#;,'\"]+"), r"\1=***"),
    # Authorization: Bearer <token>
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+"), r"\1***"),
]


def mask_secrets(text: str) -> str:
    """`text` with URL passwords, secret-looking key=value pairs and bearer tokens masked.

    A URL without a password (`postgresql://bob@db/optuna`, `sqlite:///x.db`) is left as it is.
    """
    for pattern, repl in _SECRET_PATTERNS:
        text = pattern.sub(repl, text)
    return text


def scrub_files(paths: Iterable[Path]) -> list[Path]:
    """Mask secrets in place in each of `paths` that exists (Hydra's .hydra/*.yaml and
    multirun.yaml keep the command line's overrides, a storage URL's password with them); the
    files changed. Written to a temporary name and renamed: a reader never sees half a file."""
    changed = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        masked = mask_secrets(text)
        if masked != text:
            tmp = path.with_name(f".{path.name}.masking")
            tmp.write_text(masked, encoding="utf-8")
            os.replace(tmp, path)
            changed.append(path)
    return changed


def hydra_files(job_dir: Path) -> list[Path]:
    """What Hydra writes of a job's config: its .hydra/*.yaml, and the sweep's multirun.yaml."""
    return [*sorted((job_dir / ".hydra").glob("*.yaml")), job_dir.parent / "multirun.yaml"]
