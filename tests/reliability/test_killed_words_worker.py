"""A worker killed with SIGKILL while the periodic `memory_words` task embeds an agent's words (keyword
expansion, search/expansion.py): the next worker goes on where it stopped. Nothing is lost or counted
twice: every word ends with its vector and its neighbours worked out, each chunk's lexemes are counted
once, and the dead worker's advisory lock went with its connection, so the next run is not skipped."""

import random
import string

import pytest

from django.db import connection

from indexing.models import Chunk, MemoryFile
from indexing.tables import CHUNK
from search.models import MemoryLexeme, MemoryWord, MemoryWordsState
from tests.reliability.processes import service_env, start_worker, wait_for


def invented_words(count: int, seed: int) -> list[str]:
    """``count`` distinct words of 6-9 letters that no stop list holds."""
    rng = random.Random(seed)
    words: set[str] = set()
    while len(words) < count:
        words.add("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(6, 9))))
    return sorted(words)


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_while_embedding_the_memorys_words_loses_nothing(alice, queue, tmp_path):
    # 3 s per embedding request: the words' requests (256 words each) leave time to kill the worker between two.
    # A file the killed worker was indexing is taken back within the lease (tests/reliability/test_killed_worker.py).
    env = service_env(
        queue=queue, MEMORYHUB_EMBEDDING_FAKE_LATENCY=3, MEMORYHUB_SEARCH_EXPANSION_INTERVAL=5,
        MEMORYHUB_INDEX_LEASE_SECONDS=6, MEMORYHUB_INDEX_RECOVERY_INTERVAL=1,
    )
    words = invented_words(700, seed=7)
    for day in range(7):
        text = "\n\n".join(" ".join(words[i : i + 10]) + "." for i in range(day * 100, day * 100 + 100, 10))
        response = alice.client.put(f"/api/v1/files/memory/2026-11-0{day + 1}.md", f"# Day {day + 1}\n\n{text}\n", content_type="text/markdown")
        assert response.status_code == 201, response.content
    first = start_worker(tmp_path, env, name="first")
    second = None
    try:
        # Killed once some of the words have their vectors and others do not (a request in flight).
        wait_for(
            lambda: MemoryWord.objects.filter(agent=alice.agent).exclude(embedding_identity="").exists()
            and MemoryWord.objects.filter(agent=alice.agent, embedding_identity="").exists(),
            timeout=120, interval=0.1, what=f"words partly embedded; worker log:\n{first.output()}",
        )
        first.kill()
        assert MemoryWord.objects.filter(agent=alice.agent, embedding_identity="").exists()

        second = start_worker(tmp_path, env, name="second")
        chunks = Chunk.objects.filter(agent=alice.agent)

        def settled() -> bool:
            state = MemoryWordsState.objects.filter(agent=alice.agent).first()
            return (
                not MemoryFile.objects.filter(agent=alice.agent).exclude(state="indexed").exists()
                and state is not None and state.last_chunk_id == max(chunks.values_list("id", flat=True))
                and not MemoryWord.objects.filter(agent=alice.agent, neighbours=None).exists()
            )

        wait_for(settled, timeout=180, what=f"every word read, embedded, its neighbours worked out; second worker log:\n{second.output()}")
        assert MemoryWord.objects.filter(agent=alice.agent).count() == len(words) + 1  # and "day": none lost, none twice
        assert not MemoryWord.objects.filter(agent=alice.agent, embedding_identity="").exists()
        # Each live chunk's lexemes counted once: the counts are those of the chunks as they are.
        state = MemoryWordsState.objects.get(agent=alice.agent)
        assert state.chunks == chunks.count() and state.words == len(words) + 1
        counts = dict(MemoryLexeme.objects.filter(agent=alice.agent).values_list("lexeme", "chunks"))
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT u.lexeme, count(*) FROM {CHUNK} c CROSS JOIN LATERAL unnest(c.search_vector) u "
                "WHERE c.agent_id = %s GROUP BY u.lexeme",
                [alice.agent.pk],
            )
            assert counts == dict(cursor.fetchall())
        second.output()  # flushes the log
        assert "memory_words" in second.log.read_text() and "another run is reading" not in second.log.read_text()
    finally:
        first.stop()
        if second is not None:
            second.stop()
