"""sweeper/masking.py: the one rule that hides secrets in logs, MLflow tags and best.yaml."""

from __future__ import annotations

import pytest

from sweeper.masking import mask_secrets


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
        ("sqlite:////tmp/sweeps/optuna.db", "sqlite:////tmp/sweeps/optuna.db"),
        ("postgresql://bob@db.lan/optuna", "postgresql://bob@db.lan/optuna"),  # no password
        ("https://alice:s3cret@mlflow.example.com", "https://alice:***@mlflow.example.com"),
        ("postgresql://bob:hunter2@db.lan:5432/optuna", "postgresql://bob:***@db.lan:5432/optuna"),
        (
            "postgresql://optuna:pw%40x@db:5432/optuna?sslmode=require",
            "postgresql://optuna:***@db:5432/optuna?sslmode=require",
        ),
        ("postgresql://u:p@ss@db/optuna", "postgresql://u:***@db/optuna"),  # a raw @, masked whole
        ("http://h:5000/api?email=a@b", "http://h:5000/api?email=a@b"),  # an @ past the host
        ("https://host/api?token=abc123&x=1", "https://host/api?token=***&x=1"),
        (
            "https://host/?access_token=abc&password=hunter2",
            "https://host/?access_token=***&password=***",
        ),
        (
            "s3://b/k?X-Amz-Credential=AKIA/x&X-Amz-Signature=deadbeef",
            "s3://b/k?X-Amz-Credential=***&X-Amz-Signature=***",
        ),
        ("api_key=sk-live-123 and more", "api_key=*** and more"),
        ("Authorization: Bearer eyJhbGciOi.x.y", "Authorization: Bearer ***"),
        ("error at http://u:p@h:5000/api (x)", "error at http://u:***@h:5000/api (x)"),
        ("keyboard=qwerty tokens_per_s=1000", "keyboard=qwerty tokens_per_s=1000"),
    ],
)
def test_mask_secrets(text: str, expected: str) -> None:
    assert mask_secrets(text) == expected
