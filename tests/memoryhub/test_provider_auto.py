"""MEMORYHUB_EMBEDDING_PROVIDER=auto (the default): the first configured of openai → gemini → voyage →
local → none, decided at start, and said in `status`, the run banner and the admin."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memoryhub.run import search_mode_lines

BASE_DIR = Path(__file__).resolve().parents[2]
PROVIDER_VARIABLES = [
    "MEMORYHUB_EMBEDDING_PROVIDER", "MEMORYHUB_EMBEDDING_MODEL", "MEMORYHUB_EMBEDDING_DIMENSIONS",
    "MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS", "OPENAI_API_KEY", "OPENAI_BASE_URL", "GEMINI_API_KEY", "GEMINI_BASE_URL",
    "VOYAGE_API_KEY", "VOYAGE_BASE_URL", "COHERE_API_KEY", "COHERE_BASE_URL", "OLLAMA_BASE_URL",
]


def resolved(tmp_path, *, local_installed: bool, **env) -> dict:
    """The provider settings a fresh process resolves from ``env`` alone. ``local_installed`` puts an
    importable (empty) sentence_transformers on the path, or hides any installed one."""
    fake = tmp_path / "site"
    (fake / "sentence_transformers").mkdir(parents=True, exist_ok=True)
    (fake / "sentence_transformers" / "__init__.py").write_text("")
    hide = "" if local_installed else (
        "import importlib.util, sys; _find = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda name, *a: None if name == 'sentence_transformers' else _find(name, *a)\n"
    )
    code = hide + (
        "import json, django; django.setup(); from django.conf import settings as s\n"
        "print(json.dumps([s.MEMORYHUB_EMBEDDING_PROVIDER, s.MEMORYHUB_EMBEDDING_PROVIDER_CHOSEN,"
        " s.MEMORYHUB_EMBEDDING_MODEL, s.MEMORYHUB_EMBEDDING_DIMENSIONS, s.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS]))"
    )
    clean = {k: v for k, v in os.environ.items() if k not in PROVIDER_VARIABLES}
    if local_installed:
        clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(fake), clean.get("PYTHONPATH", "")]))
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=BASE_DIR, capture_output=True, text=True, timeout=60,
        env={**clean, "DJANGO_SETTINGS_MODULE": "memoryhub.settings", **env},
    )
    assert result.returncode == 0, result.stderr
    provider, chosen, model, dimensions, window = json.loads(result.stdout.strip().splitlines()[-1])
    return {"provider": provider, "chosen": chosen, "model": model, "dimensions": dimensions, "window": window}


@pytest.mark.parametrize(
    "env, local_installed, expected",
    [
        ({"OPENAI_API_KEY": "sk", "GEMINI_API_KEY": "g", "VOYAGE_API_KEY": "v"}, True, "openai"),
        ({"GEMINI_API_KEY": "g", "VOYAGE_API_KEY": "v"}, True, "gemini"),
        ({"VOYAGE_API_KEY": "v"}, True, "voyage"),
        ({"COHERE_API_KEY": "c", "OLLAMA_BASE_URL": "http://127.0.0.1:11434"}, True, "local"),  # by name only
        ({}, False, "none"),
    ],
)
def test_auto_picks_the_first_configured_provider(tmp_path, env, local_installed, expected):
    result = resolved(tmp_path, local_installed=local_installed, **env)
    assert result["provider"] == expected and result["chosen"] == "auto"


def test_auto_is_the_default_and_a_named_provider_is_chosen_by_setting(tmp_path):
    assert resolved(tmp_path, local_installed=False, GEMINI_API_KEY="g") == {
        "provider": "gemini", "chosen": "auto", "model": "gemini-embedding-001", "dimensions": 768, "window": 2048,
    }
    named = resolved(tmp_path, local_installed=True, MEMORYHUB_EMBEDDING_PROVIDER="cohere", GEMINI_API_KEY="g")
    assert named == {"provider": "cohere", "chosen": "setting", "model": "embed-v4.0", "dimensions": 1536, "window": 8191}
    assert resolved(tmp_path, local_installed=True, MEMORYHUB_EMBEDDING_PROVIDER="auto")["provider"] == "local"


def test_the_banner_says_auto_chose_the_provider():
    (line,) = search_mode_lines(provider="gemini", model="gemini-embedding-001", dimensions=768, chosen="auto")
    assert "gemini" in line and "MEMORYHUB_EMBEDDING_PROVIDER=auto" in line and "openai, gemini, voyage, local" in line
    (line,) = search_mode_lines(provider="voyage", model="voyage-3.5", dimensions=1024, chosen="setting")
    assert "auto" not in line
    lines = search_mode_lines(provider="none", model="", dimensions=None, chosen="auto")
    assert "keyword-only" in lines[0] and "auto" in lines[0]


def test_status_and_the_admin_say_how_the_provider_was_chosen(alice, admin_client, settings):
    settings.MEMORYHUB_EMBEDDING_PROVIDER_CHOSEN = "auto"
    body = alice.client.get("/api/v1/status").json()
    assert body["embedding"]["chosen"] == "auto"
    assert "chosen by auto" in admin_client.get("/admin/").content.decode()
    settings.MEMORYHUB_EMBEDDING_PROVIDER_CHOSEN = "setting"
    assert alice.client.get("/api/v1/status").json()["embedding"]["chosen"] == "setting"
    assert "chosen by auto" not in admin_client.get("/admin/").content.decode()
