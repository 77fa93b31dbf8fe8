"""/metrics: closed unless a token or an allowed address lets the scraper in; parsed with Prometheus's parser."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from indexing.embeddings import ProviderPermanentError
from memoryhub import metrics

pytestmark = pytest.mark.django_db

METRICS_TOKEN = "scrape-secret-123"


@pytest.fixture
def scrape(anonymous_client, settings):
    settings.MEMORYHUB_METRICS_TOKEN = METRICS_TOKEN

    def get() -> dict:
        response = anonymous_client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")
        assert response.status_code == 200, response.content
        assert response["Content-Type"].startswith("text/plain")
        samples = {}
        for family in text_string_to_metric_families(response.content.decode()):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return samples

    return get


def _value(samples, name, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_answers_404_without_a_token_or_allow_list(anonymous_client, settings):
    settings.MEMORYHUB_METRICS_TOKEN = ""
    settings.MEMORYHUB_METRICS_ALLOWED_IPS = []
    assert anonymous_client.get("/metrics").status_code == 404
    assert anonymous_client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything").status_code == 404


def test_metrics_refuses_a_wrong_token_and_accepts_the_right_one(anonymous_client, settings):
    settings.MEMORYHUB_METRICS_TOKEN = METRICS_TOKEN
    assert anonymous_client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 404
    assert anonymous_client.get("/metrics").status_code == 404
    assert anonymous_client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}").status_code == 200


def test_metrics_lets_an_allowed_network_in(anonymous_client, settings):
    settings.MEMORYHUB_METRICS_TOKEN = ""
    settings.MEMORYHUB_METRICS_ALLOWED_IPS = ["10.0.0.0/8"]
    assert anonymous_client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    assert anonymous_client.get("/metrics", REMOTE_ADDR="192.168.1.5").status_code == 404


def test_metrics_count_requests_searches_and_embeddings_by_bounded_labels(
    alice, scrape, eager_tasks, fake_embeddings, django_capture_on_commit_callbacks
):
    before = scrape()
    with django_capture_on_commit_callbacks(execute=True):
        response = alice.client.generic(
            "PUT", "/api/v1/files/memory/trip.md", b"# Trip\n\nWe fly to Lisbon.\n", content_type="text/markdown"
        )
    assert response.status_code == 201
    assert alice.client.post("/api/v1/search", {"query": "Lisbon flight"}, format="json").status_code == 200
    assert alice.client.post("/api/v1/search", {"query": "Lisbon flight"}, format="json").status_code == 200
    after = scrape()

    def delta(name, **labels):
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert delta("memoryhub_http_request_duration_seconds_count", route="api-file", method="PUT", status="201") == 1
    assert delta("memoryhub_http_request_duration_seconds_count", route="api-search", method="POST", status="200") == 2
    assert delta("memoryhub_search_duration_seconds_count", mode="hybrid", results="1") == 2
    assert delta("memoryhub_embedding_requests_total", kind="document") == 1
    assert delta("memoryhub_embedding_inputs_total", kind="document") == 1
    assert delta("memoryhub_embedding_requests_total", kind="query") == 1
    assert delta("memoryhub_embedding_cache_hits_total", kind="query") == 1  # the second, identical search
    assert delta("memoryhub_task_duration_seconds_count", task="indexing.tasks.index_job_task", state="SUCCESS") == 1

    label_values = {value for (_, labels) in after for _, value in labels}
    assert not any("alice" in value or "trip" in value or "Lisbon" in value for value in label_values)


def test_metrics_count_embedding_errors_and_cache_hits(
    alice, bob, scrape, eager_tasks, fake_embeddings, django_capture_on_commit_callbacks
):
    before = scrape()
    fake_embeddings.fail_next(ProviderPermanentError("bad key"), times=1)
    for member, path in [(alice, "a.md"), (alice, "b.md"), (alice, "c.md"), (bob, "d.md")]:
        with django_capture_on_commit_callbacks(execute=True):
            member.client.generic("PUT", f"/api/v1/files/memory/{path}", b"same words here\n", content_type="text/markdown")
    after = scrape()

    def delta(name):
        return _value(after, name, kind="document") - _value(before, name, kind="document")

    assert delta("memoryhub_embedding_errors_total") == 1  # a.md
    assert delta("memoryhub_embedding_requests_total") == 3  # a.md (failed), b.md, d.md (bob: a cache of his own)
    assert delta("memoryhub_embedding_cache_hits_total") == 1  # c.md reuses alice's own chunk


def test_metrics_report_files_by_state_and_the_throttled_counter(alice, scrape, settings):
    from indexing.models import MemoryFile

    for n, state in enumerate(["pending", "pending", "failed", "indexed"]):
        MemoryFile.objects.create(agent=alice.agent, path=f"memory/{n}.md", source="memory", content="x",
                                  content_hash=str(n), size=1, state=state)
    metrics.throttled_increment(scope="search")
    samples = scrape()
    assert _value(samples, "memoryhub_files", state="pending") == 2
    assert _value(samples, "memoryhub_files", state="failed") == 1
    assert _value(samples, "memoryhub_throttled_requests_total", scope="search") >= 1
    assert ("memoryhub_index_queue_depth", ()) in samples
    assert ("memoryhub_index_background_queue_depth", ()) in samples


def test_refused_requests_are_counted_by_limit_scope(alice, scrape, settings, own_rate_limits):
    from memoryhub.ratelimit import Rate

    settings.MEMORYHUB_RATE_LIMITS = {"search": Rate(50, 60), "write": Rate(30, 60), "sync": Rate(20, 60), "read": Rate(500, 60)}
    before = scrape()
    statuses = [alice.client.post("/api/v1/search", {"query": "kettle"}, format="json").status_code for _ in range(8)]
    assert statuses == [200] * 5 + [429] * 3  # the first refusal by the throttle, the others by the middleware
    after = scrape()
    name = "memoryhub_throttled_requests_total"
    assert _value(after, name, scope="search") - _value(before, name, scope="search") == 3
    assert _value(after, "memoryhub_http_request_duration_seconds_count", route="api-search", method="POST", status="429") - _value(
        before, "memoryhub_http_request_duration_seconds_count", route="api-search", method="POST", status="429") == 3


def test_results_are_bucketed_so_the_label_stays_bounded():
    assert [metrics.results_bucket(n) for n in (0, 1, 2, 5, 6, 20, 21, 1000)] == [
        "0", "1", "2-5", "2-5", "6-20", "6-20", "21+", "21+"
    ]


@pytest.mark.django_db(transaction=True)
def test_metrics_add_up_the_processes_sharing_a_multiprocess_directory(tmp_path):
    """gunicorn workers and Celery processes each write their values; one scrape sums them."""
    import os
    import subprocess
    import sys

    from tests.indexing.test_worker import BASE_DIR, test_database_url

    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "DATABASE_URL": test_database_url(),
           "DJANGO_SETTINGS_MODULE": "memoryhub.settings"}
    count = "from memoryhub import metrics; metrics.throttled_increment(scope='write')"
    for _ in range(2):
        subprocess.run([sys.executable, "-c", count], cwd=BASE_DIR, env=env, check=True, timeout=60)
    scrape = "import django; django.setup(); from memoryhub import metrics; print(metrics.exposition().decode())"
    output = subprocess.run(
        [sys.executable, "-c", scrape], cwd=BASE_DIR, env=env, check=True, timeout=60, capture_output=True, text=True
    ).stdout
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(output) for sample in family.samples
    }
    assert samples[("memoryhub_throttled_requests_total", (("scope", "write"),))] == 2
    assert ("memoryhub_files", (("state", "pending"),)) in samples


def test_with_the_broker_unreachable_both_queue_depths_are_nan_after_one_attempt(scrape, monkeypatch):
    import math

    from memoryhub import observability

    attempts = []

    def unreachable(*, queues, timeout=1.0):
        attempts.append(queues)
        raise ConnectionError("broker down")

    monkeypatch.setattr(observability, "queue_depths", unreachable)
    samples = scrape()
    assert math.isnan(samples[("memoryhub_index_queue_depth", ())])
    assert math.isnan(samples[("memoryhub_index_background_queue_depth", ())])
    assert len(attempts) == 1 and len(attempts[0]) == 2  # one connection attempt for both queues
