"""A model known by name brings its window and native size whichever provider reaches it: all-MiniLM-L6-v2
behind an OpenAI-compatible server reads 256 word pieces, so its chunks are the local provider's 220
tokens, not OpenAI's 8,191 (memoryhub/embedding_models.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memoryhub.embedding_models import known_model, wordpiece_window

BASE_DIR = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "name, window, dimensions",
    [
        ("all-MiniLM-L6-v2", 220, 384),
        ("sentence-transformers/all-MiniLM-L6-v2", 220, 384),
        ("all-minilm:latest", 220, 384),
        ("BAAI/bge-small-en-v1.5", 442, 384),
        ("intfloat/e5-large-v2", 442, 1024),
        ("nomic-embed-text:v1.5", 7093, 768),
        ("text-embedding-3-small", 8191, None),
        ("gemini-embedding-001", 2048, None),  # the APIs' own models are known: never probed
        ("embed-english-v3.0", 442, 1024),
    ],
)
def test_a_model_is_known_by_the_names_providers_give_it(name, window, dimensions):
    model = known_model(name)
    assert (model.window, model.dimensions) == (window, dimensions)


def test_an_unknown_model_is_not_guessed():
    assert known_model("my-company/embedder-7") is None
    assert known_model("") is None


def test_the_word_piece_rule_gives_the_window_checked_with_minilms_own_tokenizer():
    # tests/indexing/test_embedding_window.py proves 220 cl100k tokens of chat and meeting text fit in 254
    # word pieces; the rule must reproduce that figure for the other models' windows to mean anything.
    assert wordpiece_window(256) == 220


def _settings_seen(**env) -> dict:
    env = {key: value for key, value in env.items() if value is not None}
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORYHUB_EMBEDDING", "OPENAI_"))}
    result = subprocess.run(
        [sys.executable, "-c",
         "import json, django; django.setup(); from django.conf import settings as s; "
         "print(json.dumps([s.MEMORYHUB_EMBEDDING_PROVIDER, s.MEMORYHUB_EMBEDDING_MODEL, "
         "s.MEMORYHUB_EMBEDDING_DIMENSIONS, s.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS]))"],
        cwd=BASE_DIR, env={**base, "DJANGO_SETTINGS_MODULE": "memoryhub.settings", **env},
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return dict(zip(["provider", "model", "dimensions", "window"], json.loads(result.stdout.strip().splitlines()[-1])))


def test_minilm_behind_an_openai_compatible_server_gets_its_own_window_and_size():
    seen = _settings_seen(
        MEMORYHUB_EMBEDDING_PROVIDER="openai", OPENAI_BASE_URL="http://127.0.0.1:9/v1",
        MEMORYHUB_EMBEDDING_MODEL="sentence-transformers/all-MiniLM-L6-v2",
    )
    assert (seen["dimensions"], seen["window"]) == (384, 220)


def test_the_settings_win_over_the_table_and_unknown_models_keep_the_providers_defaults():
    seen = _settings_seen(
        MEMORYHUB_EMBEDDING_PROVIDER="openai", MEMORYHUB_EMBEDDING_MODEL="all-MiniLM-L6-v2",
        MEMORYHUB_EMBEDDING_DIMENSIONS="128", MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS="100",
    )
    assert (seen["dimensions"], seen["window"]) == (128, 100)
    seen = _settings_seen(MEMORYHUB_EMBEDDING_PROVIDER="openai", MEMORYHUB_EMBEDDING_MODEL="my-embedder")
    assert (seen["dimensions"], seen["window"]) == (1536, 8191)
    seen = _settings_seen(MEMORYHUB_EMBEDDING_PROVIDER="openai")  # OpenAI's own default model
    assert (seen["model"], seen["dimensions"], seen["window"]) == ("text-embedding-3-small", 1536, 8191)


def test_the_local_provider_reads_a_known_models_own_window():
    # 220 is all-MiniLM-L6-v2's window, not a limit of running a model in the process.
    seen = _settings_seen(MEMORYHUB_EMBEDDING_PROVIDER="local", MEMORYHUB_EMBEDDING_MODEL="BAAI/bge-small-en-v1.5")
    assert (seen["dimensions"], seen["window"]) == (384, 442)
    seen = _settings_seen(MEMORYHUB_EMBEDDING_PROVIDER="local")
    assert (seen["model"], seen["dimensions"], seen["window"]) == ("all-MiniLM-L6-v2", 384, 220)


def test_a_provider_that_cuts_shorter_than_the_model_keeps_its_own_window():
    # Ollama loads nomic-embed-text with a 2,048-token context although the model reads 8,192.
    seen = _settings_seen(MEMORYHUB_EMBEDDING_PROVIDER="ollama", MEMORYHUB_EMBEDDING_MODEL="nomic-embed-text:latest")
    assert (seen["dimensions"], seen["window"]) == (768, 2048)


def test_the_benchmarks_openai_compatible_server_answers_the_openai_provider():
    """serve_embeddings (how bench_search measures a self-hosted model through OPENAI_BASE_URL) speaks the
    real openai SDK's protocol: the fake provider's vectors come back in order, bad bodies are 400s."""
    import threading
    import urllib.error
    import urllib.request

    from benchmarks.management.commands.serve_embeddings import embedding_server
    from indexing.embedding_identity import EmbeddingIdentity
    from indexing.embeddings import FakeProvider, OpenAIProvider

    server = embedding_server(provider="fake", model="fake-hash", dimensions=16)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        identity = EmbeddingIdentity("openai", "all-MiniLM-L6-v2", 16)
        texts = ["the deploy key lives in vault", "lunch with Maria", "a third line"]
        vectors = OpenAIProvider(identity, api_key="unused", base_url=base_url).embed_documents(texts)
        assert vectors == FakeProvider(EmbeddingIdentity("fake", "fake-hash", 16)).embed_documents(texts)
        request = urllib.request.Request(f"{base_url}/embeddings", data=b'{"input": []}', method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 400
    finally:
        server.shutdown()
        server.server_close()
