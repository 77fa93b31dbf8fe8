"""Issue 11, case 7 (first half): a malformed embeddings answer is a provider error, retried as
transient; never an internal error that fails the job for good and leaves the file without chunks.

The real ``openai`` SDK talks to a local server (tests/reliability/flaky_embeddings.py) that answers
200 with a body that cannot be used: JSON cut off, an HTML error page, no ``data``, a vector short,
NaN, vectors of different sizes.
"""

import pytest
from django.contrib.postgres.search import SearchQuery

from indexing.models import Chunk, IndexJob, MemoryFile
from indexing.writes import file_ingest
from tests.reliability.flaky_embeddings import MALFORMED, FlakyEmbeddings, use_flaky_provider

pytestmark = pytest.mark.usefixtures("eager_tasks")
NOTE = "# Zeppelin\n\nThe zeppelin leaves at dawn from the northern hangar.\n\nBring the blue ticket."


@pytest.fixture
def provider(settings):
    with FlakyEmbeddings() as server:
        use_flaky_provider(settings, server)
        yield server


def ingest(member, django_capture_on_commit_callbacks) -> tuple[MemoryFile, IndexJob]:
    with django_capture_on_commit_callbacks(execute=True):
        memory_file, job = file_ingest(agent=member.agent, path="memory/zeppelin.md", content=NOTE)
    memory_file.refresh_from_db()
    job.refresh_from_db()
    return memory_file, job


@pytest.mark.parametrize("answer", MALFORMED)
def test_malformed_answers_are_retried_and_the_file_is_indexed(alice, provider, answer, django_capture_on_commit_callbacks):
    # Two in a row: before, the first failed the batch as an internal error and the second, on the
    # file-by-file rerun meant for bugs, failed the file for good.
    provider.script = [answer, answer]
    memory_file, job = ingest(alice, django_capture_on_commit_callbacks)
    assert memory_file.state == "indexed", memory_file.last_error
    assert job.state == "done", job.error
    assert provider.requests == 3
    assert Chunk.objects.filter(file=memory_file).exists()
    assert not Chunk.objects.filter(file=memory_file, embedding=None).exists()


def test_a_provider_that_keeps_answering_garbage_leaves_the_file_keyword_searchable(
    alice, provider, settings, django_capture_on_commit_callbacks
):
    settings.MEMORYHUB_EMBEDDING_MAX_RETRIES = 1
    provider.behaviour = "truncated"
    memory_file, job = ingest(alice, django_capture_on_commit_callbacks)
    assert job.state == "failed" and "retries" in job.error and "malformed answer" in job.error
    assert job.attempts > 1  # the job was retried as transient
    assert memory_file.state == "failed"
    assert not memory_file.last_error.startswith("internal error"), memory_file.last_error
    # Chunked and stored without vectors: keyword search finds the file meanwhile.
    assert Chunk.objects.filter(file=memory_file, search_vector=SearchQuery("zeppelin", config="english")).exists()
