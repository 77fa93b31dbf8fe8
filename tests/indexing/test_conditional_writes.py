"""If-Match on PUT, append and DELETE: a write based on a stale read is refused with 412 and writes nothing."""

import hashlib
import threading

import pytest
import requests

from indexing.models import Chunk, MemoryFile

NOTE = "# Falcon\n\nThe launch is planned for March.\n"


def search_snippets(member, query) -> list[str]:
    response = member.client.post("/api/v1/search", {"query": query}, format="json")
    assert response.status_code == 200, response.content
    return [result["snippet"] for result in response.json()["results"]]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def falcon(alice, fake_embeddings, indexed):
    with indexed():
        response = alice.client.put("/api/v1/files/memory/falcon.md", {"content": NOTE}, format="json")
    assert response.status_code == 201
    return response.json()["hash"]


def test_a_put_with_the_current_hash_is_written(alice, falcon):
    response = alice.client.put(
        "/api/v1/files/memory/falcon.md", {"content": NOTE + "More.\n"}, format="json", HTTP_IF_MATCH=f'"{falcon}"'
    )
    assert response.status_code == 200 and response.json()["hash"] == digest(NOTE + "More.\n")


@pytest.mark.parametrize("method", ["put", "append", "delete"])
def test_a_stale_hash_is_412_with_the_current_hash_and_nothing_is_written(alice, falcon, method):
    stale = digest("an older version\n")
    if method == "put":
        response = alice.client.put("/api/v1/files/memory/falcon.md", {"content": "new\n"}, format="json", HTTP_IF_MATCH=stale)
    elif method == "append":
        response = alice.client.post("/api/v1/files/memory/falcon.md/append", {"text": "new\n"}, format="json", HTTP_IF_MATCH=stale)
    else:
        response = alice.client.delete("/api/v1/files/memory/falcon.md", HTTP_IF_MATCH=stale)
    assert response.status_code == 412
    error = response.json()["error"]
    assert error["code"] == "hash_mismatch" and error["current_hash"] == falcon
    memory_file = MemoryFile.objects.get(agent=alice.agent, path="memory/falcon.md")
    assert memory_file.content == NOTE and memory_file.content_hash == falcon


def test_an_empty_if_match_creates_only_a_new_file(alice, falcon):
    response = alice.client.put("/api/v1/files/memory/falcon.md", {"content": "x\n"}, format="json", HTTP_IF_MATCH='""')
    assert response.status_code == 412 and response.json()["error"]["current_hash"] == falcon
    response = alice.client.put("/api/v1/files/memory/new.md", {"content": "x\n"}, format="json", HTTP_IF_MATCH='""')
    assert response.status_code == 201


def test_a_matching_delete_removes_the_file(alice, falcon):
    response = alice.client.delete("/api/v1/files/memory/falcon.md", HTTP_IF_MATCH=f"sha256:{falcon}")
    assert response.status_code == 200
    assert not MemoryFile.objects.filter(agent=alice.agent).exists()


def test_a_malformed_if_match_is_a_400(alice, falcon):
    response = alice.client.put("/api/v1/files/memory/falcon.md", {"content": "x\n"}, format="json", HTTP_IF_MATCH="abc")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_hash"
    assert MemoryFile.objects.get(agent=alice.agent, path="memory/falcon.md").content == NOTE


def test_another_agents_hash_does_not_reach_alices_file(alice, bob, falcon):
    response = bob.client.delete("/api/v1/files/memory/falcon.md", HTTP_IF_MATCH=falcon)
    assert response.status_code == 404
    assert MemoryFile.objects.filter(agent=alice.agent).exists()


@pytest.mark.django_db(transaction=True)
def test_two_racing_writers_with_the_hash_they_read_one_wins_one_gets_412(alice, fake_embeddings, live_server):
    url = f"{live_server.url}/api/v1/files/memory/race.md"
    headers = {"Authorization": f"Bearer {alice.raw_token}"}
    first = requests.put(url, json={"content": "version zero\n"}, headers=headers, timeout=30)
    assert first.status_code == 201
    read_hash = first.json()["hash"]

    contents = {"a": "writer alpha wrote aardvark\n", "b": "writer beta wrote bumblebee\n"}
    answers: dict[str, requests.Response] = {}
    barrier = threading.Barrier(len(contents))

    def write(name):
        barrier.wait()
        answers[name] = requests.put(
            url, json={"content": contents[name]}, headers={**headers, "If-Match": f'"{read_hash}"'}, timeout=30
        )

    threads = [threading.Thread(target=write, args=(name,)) for name in contents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    statuses = sorted(answer.status_code for answer in answers.values())
    assert statuses == [200, 412], {name: answer.content for name, answer in answers.items()}
    winner = next(name for name, answer in answers.items() if answer.status_code == 200)
    loser = next(name for name in contents if name != winner)
    assert answers[loser].json()["error"]["current_hash"] in (read_hash, answers[winner].json()["hash"])

    memory_file = MemoryFile.objects.get(agent=alice.agent, path="memory/race.md")
    assert memory_file.content == contents[winner] and memory_file.state == "indexed"
    chunk_text = "".join(Chunk.objects.filter(file=memory_file).order_by("ordinal").values_list("text", flat=True))
    assert chunk_text.strip() == contents[winner].strip()
    winning_word, losing_word = ("aardvark", "bumblebee") if winner == "a" else ("bumblebee", "aardvark")
    assert any(winning_word in snippet for snippet in search_snippets(alice, winning_word))
    assert not any(losing_word in snippet for snippet in search_snippets(alice, losing_word))
