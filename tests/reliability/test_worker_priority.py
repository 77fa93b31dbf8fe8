"""The Celery worker runs at a lower CPU priority than the web (MEMORYHUB_WORKER_NICE), so a tenant's
flood of uploads, each an indexing job, yields the CPU to the other tenants' searches."""

import os

import pytest

from tests.reliability.processes import service_env, start_worker, unique_queue, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def worker_nice(tmp_path, **extra) -> int:
    env = service_env(queue=unique_queue(), **extra)
    worker = start_worker(tmp_path, env)
    try:
        wait_for(lambda: "ready" in worker.output(), timeout=60, what="the worker to start")
        return os.getpriority(os.PRIO_PROCESS, worker.popen.pid)
    finally:
        worker.stop()


def test_the_worker_lowers_its_own_priority(tmp_path):
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    assert worker_nice(tmp_path, MEMORYHUB_WORKER_NICE=7) == min(ours + 7, 19)


def test_zero_keeps_the_web_s_priority(tmp_path):
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    assert worker_nice(tmp_path, MEMORYHUB_WORKER_NICE=0) == ours
