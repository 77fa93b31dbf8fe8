"""Ingestion settings: bad values stop the process at start-up, naming the variable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parents[2]


def start_django(**env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "memoryhub.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "variable, value",
    [
        ("MEMORYHUB_MAX_FILE_BYTES", "0"),
        ("MEMORYHUB_MAX_FILES_PER_AGENT", "many"),
        ("MEMORYHUB_INDEX_MAX_RETRIES", "-1"),
        ("MEMORYHUB_INDEX_STUCK_AFTER", "600"),  # not above the task time limit (660 s)
    ],
)
def test_a_bad_ingestion_setting_fails_at_start_up(variable, value):
    result = start_django(**{variable: value})
    assert result.returncode != 0
    assert variable in result.stderr
