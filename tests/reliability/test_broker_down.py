"""Redis down or hung under a running service: writes still answer 201/200 within seconds (never a 500,
never a hang), their jobs wait in the outbox, and within seconds of Redis coming back they are dispatched and
indexed — no restart, nothing lost."""

import time
from types import SimpleNamespace

import pytest

from indexing.models import IndexJob, MemoryFile
from tests.reliability.processes import (
    api_call as call, free_port, service_env, start_redis, start_web, start_worker, unique_queue, wait_for, web_answers,
)


@pytest.fixture
def service(alice, tmp_path):
    """gunicorn and a worker on a Redis of their own, one file written and indexed while it answers. The
    test may replace ``redis`` and add to ``workers``: whatever is there at the end is stopped."""
    port = free_port()
    env = service_env(queue=unique_queue(), redis_url=f"redis://127.0.0.1:{port}/0", MEMORYHUB_INDEX_RECOVERY_INTERVAL=1)
    running = SimpleNamespace(port=port, env=env, redis=start_redis(tmp_path, port), workers=[])
    web, url = start_web(tmp_path, env)
    running.workers.append(start_worker(tmp_path, env))
    running.api = f"{url}/api/v1"
    try:
        wait_for(lambda: web_answers(url), timeout=60, what="the web server")
        status, body = call(f"{running.api}/files/notes/before.md", alice.raw_token, "PUT", b"Written while the broker is up.", "text/markdown")
        assert status == 201, body
        wait_for(
            lambda: call(f"{running.api}/status", alice.raw_token)[1]["pending"] == 0,
            timeout=60, what=f"indexing; {running.workers[0].output()}",
        )
        yield running
    finally:
        running.redis.resume()
        for process in (web, *running.workers, running.redis):
            process.stop()


def write_during_the_outage(api: str, token: str, *, within: float) -> IndexJob:
    """A write while Redis does not answer: 201 within ``within`` seconds, its job in the outbox."""
    started = time.monotonic()
    status, body = call(f"{api}/files/notes/during.md", token, "PUT", b"Written while the broker is away.", "text/markdown")
    took = time.monotonic() - started
    assert status == 201, body
    assert took < within, f"the write took {took:.1f} s with the broker away"
    job = IndexJob.objects.get(pk=body["job"])
    assert job.awaiting_dispatch and job.state == "queued"
    return job


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_writes_during_a_broker_outage_are_indexed_once_it_is_back(alice, service, tmp_path):
    service.redis.kill()
    job = write_during_the_outage(service.api, alice.raw_token, within=10)
    assert call(f"{service.api}/status", alice.raw_token)[1]["pending"] == 1

    service.redis = start_redis(tmp_path, service.port)
    back = time.monotonic()

    def done() -> bool:
        # Celery's worker has been seen to exit inside kombu while reconnecting (rarely, on a loaded
        # machine); its supervisor (compose's restart policy, make run) starts it again, and so does
        # this test: what is tested is the outbox, which must not care which worker indexes the job.
        if service.workers[-1].popen.poll() is not None:
            service.workers.append(start_worker(tmp_path, service.env, name=f"worker-{len(service.workers) + 1}"))
        return IndexJob.objects.get(pk=job.pk).state == "done"

    wait_for(done, timeout=60, what=f"the outbox to dispatch the job; worker log:\n{service.workers[-1].output()}")
    assert time.monotonic() - back < 60
    assert MemoryFile.objects.get(agent=alice.agent, path="notes/during.md").state == "indexed"
    assert not IndexJob.objects.get(pk=job.pk).awaiting_dispatch
    assert call(f"{service.api}/status", alice.raw_token)[1]["pending"] == 0


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_write_answers_when_the_broker_hangs_and_its_job_is_sent_once_it_answers_again(alice, service):
    """Redis that accepts connections and never answers (its process stopped, a network that drops the
    replies). A stopped Redis refuses connections, which the 2 s connect timeout covers; a hung one accepted
    them, and the publish then waited for Redis's reply without end (the write did not answer in 30 s)."""
    service.redis.pause()
    job = write_during_the_outage(service.api, alice.raw_token, within=15)
    service.redis.resume()
    wait_for(
        lambda: IndexJob.objects.get(pk=job.pk).state == "done",
        timeout=90, what=f"the job; {service.workers[-1].output()}",
    )
    assert MemoryFile.objects.get(agent=alice.agent, path="notes/during.md").state == "indexed"
