"""Keyword expansion (search/expansion.py): a question's rare word also searches for the memory's words
nearest in meaning. The fake provider knows no meaning, so these tests give it synonyms: a text of one
word that has a synonym here gets its synonym's vector (every other text is embedded as usual)."""

import importlib
import time

import pytest

from agents.deletion import agent_delete_here
from indexing.embeddings import FakeProvider, ProviderTransientError
from indexing.models import Chunk
from search.expansion import content_words, expansion_plan, expansion_words, memory_words_sync, nearest_words, text_words
from search.models import MemoryLexeme, MemoryWord, MemoryWordsState
from search.services import memory_search

SYNONYMS = {"budget": "spend", "costs": "spend"}

OFFICE = """# Office move

We agreed the spend for the new office furniture: at most 4,000 euros, chairs first.
"""
GARDEN = """# Garden

The tomatoes need water every evening; the roses were pruned in March.
"""
HOSE = "# Hose\n\nThe costs of the new hose.\n"


class SynonymProvider(FakeProvider):
    def _vector(self, text):
        return super()._vector(SYNONYMS.get(text, text))


@pytest.fixture(autouse=True)
def synonyms(settings, monkeypatch, fake_embeddings):
    # Wide vectors: with the fixture's 64 dimensions two unrelated words may share a bucket.
    settings.MEMORYHUB_EMBEDDING_DIMENSIONS = 512
    from indexing import embeddings
    from indexing.embedding_identity import configured_identity

    provider = SynonymProvider(configured_identity())
    monkeypatch.setattr(embeddings, "get_provider", lambda: provider)
    return provider


def explained(member, query, **options):
    response = memory_search(agent=member.agent, query=query, explain=True, min_score=0, **options)
    return {result.path: result.explain for result in response.results}, response


def test_a_question_word_absent_from_the_memory_finds_the_word_of_like_meaning(alice, index_files, settings):
    index_files(alice, {"memory/office.md": OFFICE, "memory/garden.md": GARDEN})
    before, _ = explained(alice, "what budget did we set?")
    assert before["memory/office.md"]["keyword_score"] is None  # "budget" is nowhere in the memory

    outcome = memory_words_sync()
    assert outcome.words_added == MemoryWord.objects.filter(agent=alice.agent).count() > 0
    assert outcome.words_embedded == outcome.words_added and not outcome.errors
    status = alice.client.get("/api/v1/status").json()["memory_words"]
    assert status == {"words": outcome.words_added, "embedded": outcome.words_added}
    FakeProvider.reset_counts()
    after, response = explained(alice, "what budget did we set?")
    office = after["memory/office.md"]
    assert office["keyword_score"] == 1.0 and office["expansion_score"] == 1.0
    assert office["expansion"] == {"budget": ["spend"]}
    assert "expansion" not in after.get("memory/garden.md", {})
    assert response.results[0].path == "memory/office.md"
    # The question's rare words the memory lacks ride in the query's request: one request, three inputs.
    assert content_words("what budget did we set?") == ["budget", "set"]
    assert FakeProvider.queries_embedded == 3
    # A word the memory holds has its vector there: "spend" (common here: not expanded at all) is not
    # embedded, "set" is.
    FakeProvider.reset_counts()
    explained(alice, "what spend did we set?")
    assert FakeProvider.queries_embedded == 2

    settings.MEMORYHUB_SEARCH_EXPANSION_WEIGHT = 0
    off, _ = explained(alice, "what budget did we set?")
    assert off["memory/office.md"]["keyword_score"] is None


def test_a_word_the_memory_holds_often_enough_is_not_expanded(alice, index_files, settings):
    hose = "# Hose\n\nThe costs of the new garden hose were small.\n"
    index_files(alice, {"memory/office.md": OFFICE, "memory/garden.md": GARDEN, "memory/hose.md": hose})
    memory_words_sync()
    # "spend" stands in one chunk of three: its IDF (about 1) is far below the 3.0 floor, so its neighbour
    # "costs" is not searched for.
    assert MemoryLexeme.objects.get(agent=alice.agent, lexeme="spend").chunks == 1
    assert MemoryWordsState.objects.get(agent=alice.agent).chunks == 3
    assert all("expansion" not in e for e in explained(alice, "the spend")[0].values())
    settings.MEMORYHUB_SEARCH_EXPANSION_MIN_IDF = 0.5
    assert explained(alice, "the spend")[0]["memory/hose.md"]["expansion"] == {"spend": ["costs"]}
    # A word the memory lacks is always rare enough.
    settings.MEMORYHUB_SEARCH_EXPANSION_MIN_IDF = 50.0
    assert explained(alice, "the budget")[0]["memory/office.md"]["expansion"] == {"budget": ["costs", "spend"]}  # equally near: by word
    # Words the memory lacks left out: "budget" is not expanded (nor embedded), "spend" still is.
    settings.MEMORYHUB_SEARCH_EXPANSION_ABSENT_WORDS = False
    FakeProvider.reset_counts()
    assert all("expansion" not in e for e in explained(alice, "the budget")[0].values())
    assert FakeProvider.queries_embedded == 1
    settings.MEMORYHUB_SEARCH_EXPANSION_MIN_IDF = 0.5
    assert explained(alice, "the spend")[0]["memory/hose.md"]["expansion"] == {"spend": ["costs"]}
    settings.MEMORYHUB_SEARCH_EXPANSION_ABSENT_WORDS = True
    MemoryWord.objects.filter(agent=alice.agent, word__in=["spend", "costs"]).delete()  # no word near enough
    assert all("expansion" not in e for e in explained(alice, "the budget")[0].values())


def test_the_lexemes_count_the_chunks_that_hold_them_and_the_rarest_words_go_first(alice, index_files, settings):
    from indexing.embedding_identity import configured_identity
    from search.keyword import bm25_idf, keyword_candidates
    from search.types import SearchFilters

    key = configured_identity().key
    index_files(alice, {"memory/office.md": OFFICE, "memory/garden.md": GARDEN})
    memory_words_sync()
    counts = dict(MemoryLexeme.objects.filter(agent=alice.agent).values_list("lexeme", "chunks"))
    assert counts["spend"] == 1 and counts["tomato"] == 1  # the keyword index's lexemes, stemmed
    # The office note written again: its new chunk is read, and as its old chunk is gone the chunks counted
    # (3) drift from the live ones (2), so the lexemes are counted again from the live chunks.
    index_files(alice, {"memory/office.md": OFFICE + "\nThe spend was approved on Monday.\n"})
    outcome = memory_words_sync()
    assert outcome.chunks_read == 1 and outcome.recounted == [alice.agent.pk]
    assert MemoryLexeme.objects.get(agent=alice.agent, lexeme="spend").chunks == 1
    assert MemoryLexeme.objects.get(agent=alice.agent, lexeme="approv").chunks == 1
    state = MemoryWordsState.objects.get(agent=alice.agent)
    assert state.chunks == 2 and state.lexemes == MemoryLexeme.objects.filter(agent=alice.agent).count()
    # So the counts are the keyword half's own: the same IDF as it computes at search time.
    settings.MEMORYHUB_SEARCH_EXPANSION_MIN_IDF = 0.0
    plan = expansion_plan(agent_id=alice.agent.pk, identity_key=key, query="spend tomatoes budget")
    # Rarest first, a word of no chunk before all: "budget" (absent), then "spend" and "tomatoes" (one chunk
    # each: in question order).
    assert plan.words == ["budget", "spend", "tomatoes"] and plan.to_embed == ("budget",)
    assert plan.held == {"spend", "tomatoes"}
    idf = keyword_candidates(agent_id=alice.agent.pk, query="spend tomatoes", filters=SearchFilters(), limit=10).idf
    assert idf == {"spend": bm25_idf(n=2, df=1), "tomato": bm25_idf(n=2, df=1)}
    settings.MEMORYHUB_SEARCH_EXPANSION_MAX_EXPANDED = 2
    assert expansion_plan(agent_id=alice.agent.pk, identity_key=key, query="spend tomatoes budget").words == ["budget", "spend"]
    # A word held without a vector of the model is embedded with the query, as an absent one is.
    MemoryWord.objects.filter(agent=alice.agent, word="tomatoes").update(embedding_identity="")
    assert expansion_plan(agent_id=alice.agent.pk, identity_key=key, query="tomatoes").to_embed == ("tomatoes",)
    settings.MEMORYHUB_SEARCH_EXPANSION_ABSENT_WORDS = False
    assert expansion_plan(agent_id=alice.agent.pk, identity_key=key, query="tomatoes budget") is None
    # Chunks not read yet (the agent's words from before the counts, read again after the upgrade): none.
    settings.MEMORYHUB_SEARCH_EXPANSION_ABSENT_WORDS = True
    MemoryWordsState.objects.filter(agent=alice.agent).update(chunks=0)
    assert expansion_plan(agent_id=alice.agent.pk, identity_key=key, query="spend tomatoes budget") is None


def test_a_deletion_or_an_edit_taking_words_out_is_counted_out_at_the_next_run_and_an_append_once_the_counts_drift(
    alice, index_files, settings, django_capture_on_commit_callbacks
):
    from indexing.writes import file_delete

    def counts():
        return dict(MemoryLexeme.objects.filter(agent=alice.agent).values_list("lexeme", "chunks"))

    def live():
        """The lexemes of the agent's live chunks, counted as the keyword half counts them."""
        found: dict[str, int] = {}
        for vector in Chunk.objects.filter(agent=alice.agent).values_list("search_vector", flat=True):
            for lexeme in {term.split(":")[0].strip("'") for term in vector.split()}:
                found[lexeme] = found.get(lexeme, 0) + 1
        return found

    def words():
        return set(MemoryWord.objects.filter(agent=alice.agent).values_list("word", flat=True))

    settings.MEMORYHUB_SEARCH_KEYWORD_STATS_DRIFT = 0.9  # no drift this large here: the removals alone count
    index_files(alice, {"memory/office.md": OFFICE, "memory/garden.md": GARDEN})
    memory_words_sync()
    assert counts() == live()
    # A new note removes nothing: its chunk is read and counted, nothing counted again.
    index_files(alice, {"memory/hose.md": "# Hose\n\nThe new garden hose was cheap.\n"})
    outcome = memory_words_sync()
    assert (outcome.chunks_read, outcome.recounted) == (1, [])
    # A deletion alone, with no chunk to read, is counted out at the next run, and the words only the deleted
    # note held are dropped ("garden" stays: the hose note holds it).
    assert {"tomatoes", "roses", "pruned", "garden"} <= words()
    before = words()
    with django_capture_on_commit_callbacks(execute=True):
        file_delete(agent=alice.agent, path="memory/garden.md")
    assert MemoryWordsState.objects.get(agent=alice.agent).text_removed
    outcome = memory_words_sync()
    assert (outcome.agents, outcome.chunks_read, outcome.recounted) == (1, 0, [alice.agent.pk])
    assert counts() == live() and "tomato" not in counts()
    assert not {"tomatoes", "roses", "pruned"} & words() and {"garden", "hose", "cheap"} <= words()
    assert outcome.words_dropped == len(before - words()) > 0
    state = MemoryWordsState.objects.get(agent=alice.agent)
    assert (state.chunks, state.lexemes, state.words, state.text_removed) == (2, len(live()), len(words()), False)
    assert memory_words_sync().agents == 0  # done: the next run has nothing to do
    # A sync that deletes the files it does not list notes it the same way.
    from indexing.writes import SyncEntry, workspace_sync

    index_files(alice, {"memory/spare.md": "# Spare\n\nThe ladder is in the shed.\n"})
    memory_words_sync()
    assert "ladder" in words()
    listed = [SyncEntry(path=path, content=content) for path, content in alice.agent.files.values_list("path", "content")
              if path != "memory/spare.md"]
    with django_capture_on_commit_callbacks(execute=True):
        workspace_sync(agent=alice.agent, entries=listed, delete_missing=True)
    assert memory_words_sync().recounted == [alice.agent.pk] and "ladder" not in words()
    # An append rewrites a file's last chunk and removes no word: it is not noted (a recount at each one
    # would be wasted), and its old chunk's counts stay until the counts drift.
    index_files(alice, {"memory/office.md": OFFICE + "\nThe spend was approved on Monday.\n"})
    assert not MemoryWordsState.objects.get(agent=alice.agent).text_removed
    assert memory_words_sync().recounted == [] and {"approved", "monday"} <= words()
    assert counts()["spend"] == 2  # the old chunk's count and the new one's
    # An edit that takes words out is noted as a deletion is, and counted out at the next run: its words go.
    index_files(alice, {"memory/office.md": OFFICE})
    assert MemoryWordsState.objects.get(agent=alice.agent).text_removed
    assert memory_words_sync().recounted == [alice.agent.pk]
    assert counts() == live() and counts()["spend"] == 1 and not {"approved", "monday"} & words()
    # Appends are counted out once the counts drift; a recount keeps the most frequent lexemes within the cap.
    settings.MEMORYHUB_SEARCH_KEYWORD_STATS_DRIFT = 0.02
    settings.MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS = 3
    index_files(alice, {"memory/office.md": OFFICE + "\nChairs first.\n"})
    assert not MemoryWordsState.objects.get(agent=alice.agent).text_removed
    assert memory_words_sync().recounted == [alice.agent.pk]
    assert len(counts()) == 3 and MemoryWordsState.objects.get(agent=alice.agent).lexemes == 3


def test_an_edit_took_words_out_when_a_word_of_the_chunks_it_removed_stands_in_none_of_the_files_chunks_now():
    from search.expansion import words_gone

    old_last = "The tomatoes need water."
    assert not words_gone(removed=[old_last], kept=["The tomatoes need water. The roses too.", "# Garden"])
    assert words_gone(removed=[old_last], kept=["The tomatoes need sun.", "# Garden"])  # "water" went
    assert not words_gone(removed=["The tomatoes need water."], kept=["Water: the tomatoes need it."])  # cased
    assert not words_gone(removed=["We did it, and then some."], kept=[])  # stop words and short ones only
    assert words_gone(removed=[old_last], kept=[])  # the file emptied
    assert words_gone(removed=["A torch."], kept=["Two torches."])  # only a part of a longer word
    assert not words_gone(removed=["A torch."], kept=["Two torches.", "Torch: one."])


def test_a_deletion_whose_note_fails_after_its_commit_still_answers_and_leaves_the_words_to_the_drift(
    alice, index_files, monkeypatch, django_capture_on_commit_callbacks
):
    from django.db import OperationalError
    from django.db.models import QuerySet

    index_files(alice, {"memory/office.md": OFFICE, "memory/garden.md": GARDEN})
    memory_words_sync()
    update = QuerySet.update

    def failing(queryset, **values):
        if "text_removed" in values:
            raise OperationalError("the database went away")
        return update(queryset, **values)

    monkeypatch.setattr(QuerySet, "update", failing)
    with django_capture_on_commit_callbacks(execute=True):
        response = alice.client.delete("/api/v1/files/memory/garden.md")
    assert response.status_code == 200, response.content
    monkeypatch.undo()
    assert not alice.agent.files.filter(path="memory/garden.md").exists()
    assert not MemoryWordsState.objects.get(agent=alice.agent).text_removed  # not noted: the drift decides
    assert memory_words_sync().agents == 0


def test_a_word_whose_text_is_gone_leaves_the_neighbours_that_named_it_and_makes_room(
    alice, index_files, settings, django_capture_on_commit_callbacks
):
    from indexing.writes import file_delete

    settings.MEMORYHUB_SEARCH_EXPANSION_MIN_IDF = 0.5
    index_files(alice, {"memory/office.md": OFFICE, "memory/hose.md": HOSE, "memory/garden.md": GARDEN})
    memory_words_sync()
    assert MemoryWord.objects.get(agent=alice.agent, word="spend").neighbours == ["costs"]
    assert explained(alice, "the spend")[0]["memory/hose.md"]["expansion"] == {"spend": ["costs"]}
    # The hose note goes: "costs" is dropped at the next run, and "spend", whose list named it, is worked out
    # again in the same run, without it.
    with django_capture_on_commit_callbacks(execute=True):
        file_delete(agent=alice.agent, path="memory/hose.md")
    MemoryWordsState.objects.filter(agent=alice.agent).update(words=0)  # a count gone wrong is set right, not below 0
    outcome = memory_words_sync()
    assert outcome.recounted == [alice.agent.pk] and outcome.words_dropped >= 1
    assert MemoryWordsState.objects.get(agent=alice.agent).words == MemoryWord.objects.filter(agent=alice.agent).count()
    assert not MemoryWord.objects.filter(agent=alice.agent, word="costs").exists()
    assert MemoryWord.objects.get(agent=alice.agent, word="spend").neighbours == []
    assert all("expansion" not in e for e in explained(alice, "the spend")[0].values())
    # The words dropped make room under the cap. A note written while the agent is full has its words
    # refused; once a drop makes room, the words refused are read again, in the same run as the drop
    # (the words of the chunks read before it) or in a later one.
    settings.MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS = MemoryWord.objects.filter(agent=alice.agent).count()

    def stored():
        return set(MemoryWord.objects.filter(agent=alice.agent).values_list("word", flat=True))

    index_files(alice, {"memory/shed.md": "# Shed\n\nThe shed roof leaks.\n"})
    assert memory_words_sync().words_added == 0 and not {"shed", "roof", "leaks"} & stored()
    with django_capture_on_commit_callbacks(execute=True):
        file_delete(agent=alice.agent, path="memory/garden.md")
    index_files(alice, {"memory/fence.md": "# Fence\n\nThe fence is green.\n"})
    outcome = memory_words_sync()  # fence's words are read before the drop, the shed's in an earlier run
    assert outcome.words_dropped > 0 and {"shed", "roof", "leaks", "fence", "green"} <= stored()
    assert outcome.words_added == 5
    state = MemoryWordsState.objects.get(agent=alice.agent)
    assert state.words == len(stored()) <= settings.MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS
    # No drop, no reading again: a full agent's later words wait for the next drop.
    MemoryWordsState.objects.filter(agent=alice.agent).update(words=settings.MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS)
    index_files(alice, {"memory/gate.md": "# Gate\n\nThe gate is blue.\n"})
    assert memory_words_sync().words_added == 0 and not {"gate", "blue"} & stored()


def test_the_words_already_stored_take_none_of_the_room_left_under_the_cap(alice, index_files, settings):
    index_files(alice, {"memory/a.md": "# Almanac\n\nApples and barley ripen.\n"})
    memory_words_sync()
    settings.MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS = MemoryWord.objects.filter(agent=alice.agent).count() + 2
    # Alphabetically the words already stored come first; the two new ones still get the two places.
    index_files(alice, {"memory/b.md": "# Almanac\n\nApples and barley ripen in the valley; zucchini too.\n"})
    assert memory_words_sync().words_added == 2
    assert {"valley", "zucchini"} <= set(MemoryWord.objects.filter(agent=alice.agent).values_list("word", flat=True))


def test_a_word_is_stored_only_when_the_keyword_index_holds_one_of_its_lexemes(alice, index_files):
    # "SmartKom" is one lexeme to the keyword index ("smartkom"): its parts would search for nothing; so
    # would "again" and "further", Postgres's stop words (no lexeme) that the expansion's own list lacks.
    index_files(alice, {"memory/a.md": "# Notes\n\nThe SmartKom demo ran again, further tests tomorrow.\n"})
    memory_words_sync()
    words = set(MemoryWord.objects.filter(agent=alice.agent).values_list("word", flat=True))
    assert {"notes", "demo", "ran", "tests", "tomorrow"} <= words
    assert not {"smart", "kom", "again", "further"} & words


def test_an_agent_never_expands_with_another_agents_words(alice, bob, index_files):
    index_files(alice, {"memory/garden.md": GARDEN})
    index_files(bob, {"memory/office.md": OFFICE})
    memory_words_sync()
    assert MemoryWord.objects.filter(agent=bob.agent, word="spend").exists()
    assert not MemoryWord.objects.filter(agent=alice.agent, word="spend").exists()
    from indexing.embedding_identity import configured_identity

    identity = configured_identity()
    vector = SynonymProvider(identity).embed_query("budget")
    def nearest(agent, words, vectors=None):
        return nearest_words(
            agent_id=agent.pk, identity_key=identity.key, dimensions=identity.dimensions, words=words, vectors=vectors
        )

    assert nearest(bob.agent, ["budget"], {"budget": vector}) == {"budget": ["spend"]}
    assert nearest(alice.agent, ["budget"], {"budget": vector}) == {}
    # A word given without a vector takes the memory's own vector of it: bob holds "spend", but no other
    # word near it; alice holds no "spend" at all.
    assert nearest(bob.agent, ["spend"]) == {} and nearest(alice.agent, ["spend"]) == {}
    found, response = explained(alice, "what budget did we set?")
    assert all("expansion" not in e for e in found.values()) and all(r.path == "memory/garden.md" for r in response.results)


def test_a_provider_failure_leaves_the_words_for_the_next_run_and_the_search_answers(alice, index_files, synonyms):
    index_files(alice, {"memory/office.md": OFFICE})
    FakeProvider.fail_next(ProviderTransientError("provider down"))
    outcome = memory_words_sync()
    assert outcome.words_added > 0 and outcome.words_embedded == 0
    assert "provider down" in outcome.errors[alice.agent.pk]
    assert not MemoryWord.objects.filter(agent=alice.agent).exclude(embedding_identity="").exists()
    assert alice.client.get("/api/v1/status").json()["memory_words"] == {"words": outcome.words_added, "embedded": 0}
    # No word embedded yet: the search answers without expansion, its question words not even embedded.
    FakeProvider.reset_counts()
    found, response = explained(alice, "what budget did we set?")
    assert "expansion" not in found["memory/office.md"] and FakeProvider.queries_embedded == 1
    # The next run embeds them; the chunks it read are not read again.
    again = memory_words_sync()
    assert (again.words_added, again.chunks_read, again.words_embedded) == (0, 0, outcome.words_added)
    assert explained(alice, "what budget did we set?")[0]["memory/office.md"]["expansion"] == {"budget": ["spend"]}
    # The question's embedding failing at search time: keyword search, no expansion, no error.
    from search.services import query_cache_clear

    query_cache_clear()
    synonyms.embed_query_windows = lambda texts: (_ for _ in ()).throw(ProviderTransientError("down again"))
    synonyms.embed_query = synonyms.embed_query_windows
    found, response = explained(alice, "what budget did we set?")
    assert response.mode == "keyword" and "provider failed" in response.message
    assert all("expansion" not in e for e in found.values())


def test_the_words_are_bounded_per_agent_and_only_new_chunks_are_read(alice, index_files, settings):
    settings.MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS = 5
    index_files(alice, {"memory/office.md": OFFICE})
    first = memory_words_sync()
    assert first.words_added == 5 == MemoryWord.objects.filter(agent=alice.agent).count()
    index_files(alice, {"memory/garden.md": GARDEN, "memory/more.md": "# More\n\nThe chairs came, and the agreed spend held."})
    second = memory_words_sync()
    # Full: no new word or lexeme, but the chunks are still read, and the lexemes held counted.
    assert (second.words_added, second.chunks_read) == (0, 2)
    state = MemoryWordsState.objects.get(agent=alice.agent)
    assert (state.words, state.lexemes, state.chunks) == (5, 5, 3)
    assert state.last_chunk_id == max(Chunk.objects.filter(agent=alice.agent).values_list("id", flat=True))
    lexemes = dict(MemoryLexeme.objects.filter(agent=alice.agent).values_list("lexeme", "chunks"))
    assert len(lexemes) == 5 and lexemes["chair"] == 2
    assert memory_words_sync().agents == 0  # nothing left to do


def test_a_question_longer_than_a_question_is_not_expanded(settings):
    # Capitalised past the first word (Caroline, Lake): names, which have no synonyms; "did", "the": stop words.
    assert expansion_words("Did Caroline paint the Lake yesterday") == ["paint", "yesterday"]
    long = " ".join(f"word{n} budget" for n in range(20))
    assert expansion_words(long) == []
    many = " ".join(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
                     "kilo", "lima", "mike", "november"])
    assert len(expansion_words(many)) == 12
    settings.MEMORYHUB_SEARCH_EXPANSION_WEIGHT = 0
    assert expansion_words("budget") == []


def test_a_word_with_a_letter_outside_ascii_gives_no_fragments(alice, index_files):
    """Words are ASCII; a word holding another letter was cut into its ASCII pieces, which were stored,
    embedded and offered as neighbours ("réunion" gave "union", "Müller" "ller", "café" "caf")."""
    assert text_words("Réunion avec Müller au café: the budget, naïve Pokémon") == {"avec", "budget"}
    assert content_words("what did Zoë say about the réunion budget?") == ["budget"]
    # ASCII words as before: a capital starts a word inside a run, digits and underscores end one.
    assert text_words("iPhone memorySearch covid19 snake_case ABCdef") == {
        "phone", "memory", "search", "covid", "snake", "case", "cdef"
    }
    index_files(alice, {"memory/notes.md": "# Notes\n\nLa réunion avec Müller au café: budget validé.\n"})
    memory_words_sync()
    stored = set(MemoryWord.objects.filter(agent_id=alice.agent.pk).values_list("word", flat=True))
    assert {"budget", "avec", "notes"} <= stored and not stored & {"union", "ller", "caf", "valid", "unio"}


def test_the_pieces_stored_before_are_dropped_by_the_recount_migration_0009_brings(alice, index_files):
    from django.apps import apps

    migration = importlib.import_module("search.migrations.0009_memory_words_recount_fragments")
    index_files(alice, {"memory/notes.md": "# Notes\n\nLa réunion avec Müller au café: budget validé.\n"})
    memory_words_sync()
    # As the code before stored them: the ASCII pieces of the words with a letter outside ASCII.
    pieces = [MemoryWord(agent_id=alice.agent.pk, word=word) for word in ("union", "ller", "caf")]
    MemoryWord.objects.bulk_create(pieces)
    assert not memory_words_sync().recounted  # (it embeds them, as it did)
    assert memory_words_sync().agents == 0, "nothing brings a recount: the pieces would stay"

    migration.recount_every_agents_words(apps, None)
    assert alice.agent.pk in memory_words_sync().recounted
    stored = set(MemoryWord.objects.filter(agent_id=alice.agent.pk).values_list("word", flat=True))
    assert {"budget", "avec", "notes"} <= stored and not stored & {"union", "ller", "caf"}


def test_an_agents_words_go_with_it_and_a_new_model_embeds_them_again(alice, bob, index_files, settings):
    index_files(alice, {"memory/office.md": OFFICE})
    index_files(bob, {"memory/garden.md": GARDEN})
    memory_words_sync()
    assert memory_words_sync().agents == 0  # nothing left to do: no word of theirs is read again
    words = MemoryWord.objects.filter(agent=bob.agent).count()
    # Another model: every word is embedded again and its neighbours worked out again.
    settings.MEMORYHUB_EMBEDDING_MODEL = "fake-hash-2"
    again = memory_words_sync()
    assert again.agents == 2 and again.words_embedded == again.neighbours_found == MemoryWord.objects.count()
    assert memory_words_sync().agents == 0
    assert set(MemoryWord.objects.values_list("embedding_identity", flat=True)) == {"fake:fake-hash-2:512"}
    # Without a model nothing is embedded, and words of another model are no work.
    settings.MEMORYHUB_EMBEDDING_PROVIDER = "none"
    assert memory_words_sync().agents == 0
    settings.MEMORYHUB_EMBEDDING_PROVIDER = "fake"
    agent_delete_here(agent_id=alice.agent.pk)
    assert not MemoryWord.objects.filter(agent_id=alice.agent.pk).exists()
    assert not MemoryWordsState.objects.filter(agent_id=alice.agent.pk).exists()
    assert MemoryWord.objects.filter(agent=bob.agent).count() == words


def test_the_periodic_task_reads_and_embeds_the_words(alice, index_files, settings):
    from search.tasks import memory_words_task

    assert settings.CELERY_BEAT_SCHEDULE["search-memory-words"]["task"] == "search.tasks.memory_words_task"
    index_files(alice, {"memory/office.md": OFFICE})
    result = memory_words_task()
    assert result["agents"] == 1 and result["words_embedded"] == result["words_added"] > 0 and result["finished"]
    assert result["neighbours_found"] == result["words_embedded"] and result["recounted"] == []


def test_a_new_model_revision_embeds_the_words_again(alice, index_files, settings):
    """MEMORYHUB_EMBEDDING_REVISION (a model changed behind its name, indexing/model_check.py) is a new
    identity: the words' vectors of the old model are not used, the next run embeds every word again."""
    from search.tasks import memory_words_task

    index_files(alice, {"memory/office.md": OFFICE})
    words = memory_words_task()["words_embedded"]
    assert words > 0 and memory_words_task()["words_embedded"] == 0
    settings.MEMORYHUB_EMBEDDING_REVISION = "2"
    assert memory_words_task()["words_embedded"] == words
    key = f"fake:fake-hash@2:{settings.MEMORYHUB_EMBEDDING_DIMENSIONS}"
    assert set(MemoryWord.objects.filter(agent=alice.agent).values_list("embedding_identity", flat=True)) == {key}


# Committed: an index built in the open transaction over rows it updated (HOT chains) is not used by it.
@pytest.mark.django_db(transaction=True)
def test_an_agent_with_many_words_gets_an_hnsw_index_that_the_lookup_uses(alice, bob, index_files, settings):
    from django.db import connection, transaction

    from indexing.embedding_identity import configured_identity
    from search import expansion

    settings.MEMORYHUB_SEARCH_EXPANSION_HNSW_MIN_WORDS = 10
    index_files(alice, {"memory/office.md": OFFICE, "memory/garden.md": GARDEN})
    index_files(bob, {"memory/office.md": OFFICE.splitlines()[0]})  # a handful of words: no index
    identity = configured_identity()
    name = expansion.word_index_name(agent_id=alice.agent.pk, identity_key=identity.key)
    assert memory_words_sync().indexes_created == [name]
    # On the agent's partition of the words table (search/migrations/0006): the planner of a statement
    # naming another agent never weighs it.
    from indexing.partitions import agent_table

    partition = agent_table(table=expansion.WORDS, agent_id=alice.agent.pk)
    with connection.cursor() as cursor:
        cursor.execute("SELECT indrelid::regclass::text FROM pg_index WHERE indexrelid = %s::regclass", [name])
        assert cursor.fetchone()[0] == partition != expansion.WORDS
    vector = SynonymProvider(identity).embed_query("budget")
    sql = expansion._NEAREST_SQL.format(
        dims=identity.dimensions, words=expansion.WORDS, agent=alice.agent.pk, identity=expansion._sql_string(identity.key)
    )
    # A question word embedded with the query, and one whose vector the memory holds: the index either way.
    for words, vectors in ((["budget"], [str(vector).replace(" ", "")]), (["spend"], [None])):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(expansion._NEAREST_SETTINGS)
            cursor.execute("EXPLAIN " + sql, [words, vectors, 11])
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert name in plan, plan
    assert explained(alice, "what budget did we set?")[0]["memory/office.md"]["expansion"] == {"budget": ["spend"]}
    assert memory_words_sync().indexes_created == []  # nothing new: nothing built again

    # Another model: the words are embedded again, and the index follows them.
    settings.MEMORYHUB_EMBEDDING_MODEL = "fake-hash-2"
    newer = expansion.word_index_name(agent_id=alice.agent.pk, identity_key=configured_identity().key)
    outcome = memory_words_sync()
    assert (outcome.indexes_dropped, outcome.indexes_created) == ([name], [newer])
    # The agent deleted: its index goes at the next run.
    agent_delete_here(agent_id=alice.agent.pk)
    assert memory_words_sync().indexes_dropped == [newer]


@pytest.mark.django_db(transaction=True)
def test_the_expansion_runs_beside_both_halves_when_a_helper_is_free_with_the_same_answer(
    alice, index_files, settings, monkeypatch
):
    """Committed (a helper's connection sees committed rows only): the second keyword query needs nothing
    of the keyword half, so it runs on a second helper while the keyword half is still running, or on the
    request's thread when no helper is free or the helper's run failed."""
    import threading

    from django.db import OperationalError

    import search.services as services

    index_files(alice, {"memory/office.md": OFFICE, "memory/garden.md": GARDEN})
    memory_words_sync()
    threads, failures = [], []
    expanded = threading.Event()
    real_query, real_keyword = services.expansion_query, services.keyword_candidates

    def recorded(**kwargs):
        threads.append(threading.current_thread().name)
        expanded.set()
        if failures:
            failures.pop()
            raise OperationalError("the helper's connection broke")
        return real_query(**kwargs)

    def keyword_half(**kwargs):  # on a helper, the keyword half ends only once the expansion has run
        if threading.current_thread().name.startswith("search-half"):
            assert expanded.wait(timeout=10)
        return real_keyword(**kwargs)

    monkeypatch.setattr(services, "expansion_query", recorded)
    monkeypatch.setattr(services, "keyword_candidates", keyword_half)

    def answer():
        expanded.clear()
        found, response = explained(alice, "what budget did we set?")
        return [(r.path, r.start_line, r.score) for r in response.results], found["memory/office.md"]["expansion"]

    settings.MEMORYHUB_SEARCH_PARALLEL_HALVES = 0
    in_sequence = answer()
    assert in_sequence[1] == {"budget": ["spend"]} and threads == [threading.current_thread().name]
    settings.MEMORYHUB_SEARCH_PARALLEL_HALVES = 2
    assert answer() == in_sequence and threads[1].startswith("search-half")
    settings.MEMORYHUB_SEARCH_PARALLEL_HALVES = 1  # the one helper runs the keyword half: the expansion runs here
    assert answer() == in_sequence and threads[2] == threading.current_thread().name
    settings.MEMORYHUB_SEARCH_PARALLEL_HALVES = 2
    failures.append(1)
    assert answer() == in_sequence
    assert threads[3].startswith("search-half") and threads[4] == threading.current_thread().name


def test_the_local_model_embeds_the_question_and_its_words_in_one_batch(settings):
    """One pass of the model: a second pass for the words cost more than padding them to the question's
    length, for the 1-5 words a question usually sends (docs/search.md)."""
    from indexing.embedding_identity import EmbeddingIdentity
    from indexing.embeddings import LocalProvider

    batches = []

    class Model:
        def encode(self, texts, **options):
            import numpy as np

            batches.append(list(texts))
            return np.ones((len(texts), 4))

    provider = LocalProvider(EmbeddingIdentity(provider="local", model="m", dimensions=4))
    provider._loaded = lambda: Model()
    vectors = provider.embed_query_and_words(["what budget did we set?"], ["budget", "set"])
    assert len(vectors) == 3 and batches == [["what budget did we set?", "budget", "set"]]
    assert provider.embed_query_and_words(["a question"], []) and batches[-1] == ["a question"]


def test_each_words_neighbours_are_worked_out_ahead_and_again_when_a_word_near_it_comes(
    alice, index_files, settings, monkeypatch
):
    from indexing.embedding_identity import configured_identity
    from search import expansion

    lookups = []
    real_nearest = expansion.nearest_words

    def counted(**kwargs):
        if kwargs["words"]:
            lookups.append(list(kwargs["words"]))
        return real_nearest(**kwargs)

    monkeypatch.setattr(expansion, "nearest_words", counted)

    def lists():
        return dict(MemoryWord.objects.filter(agent=alice.agent).values_list("word", "neighbours"))

    index_files(alice, {"memory/office.md": OFFICE, "memory/garden.md": GARDEN})
    first = memory_words_sync()
    assert first.neighbours_found == first.words_embedded == len(lists())
    assert lists()["spend"] == [] and lists()["tomatoes"] == []  # no word near enough: an empty list
    # A word near "spend" comes: its list is worked out again, with the new word's; the others stay.
    index_files(alice, {"memory/hose.md": HOSE})
    second = memory_words_sync()
    assert (second.words_embedded, second.neighbours_found) == (2, 3)  # "costs", "hose"; and "spend" again
    assert lists()["spend"] == ["costs"] and lists()["costs"] == ["spend"]
    # The lists are what a search would look up.
    key = configured_identity().key
    assert all(
        real_nearest(agent_id=alice.agent.pk, identity_key=key, dimensions=512, words=[word]).get(word, []) == near
        for word, near in lists().items()
    )
    # A search reads them: no lookup for a word the memory holds, one for a word it lacks.
    settings.MEMORYHUB_SEARCH_EXPANSION_MIN_IDF = 0.5
    lookups.clear()
    assert explained(alice, "the spend")[0]["memory/hose.md"]["expansion"] == {"spend": ["costs"]}
    assert lookups == []
    assert explained(alice, "the budget")[0]["memory/office.md"]["expansion"] == {"budget": ["costs", "spend"]}
    assert lookups == [["budget"]]
    # A rare word without a word near enough: nothing to search for, nothing looked up.
    assert expansion.expansion_plan(agent_id=alice.agent.pk, identity_key=key, query="the tomatoes") is None
    # Lists of other settings are not read: the search looks up until the task works them out again.
    settings.MEMORYHUB_SEARCH_EXPANSION_NEIGHBOURS = 1
    lookups.clear()
    assert explained(alice, "the spend")[0]["memory/hose.md"]["expansion"] == {"spend": ["costs"]}
    assert lookups == [["spend"]]
    assert memory_words_sync().neighbours_found == len(lists())
    lookups.clear()
    explained(alice, "the spend")
    assert lookups == []
    # Not worked out (a word whose list was dropped): looked up at search.
    MemoryWord.objects.filter(agent=alice.agent, word="spend").update(neighbours=None)
    lookups.clear()
    assert explained(alice, "the spend")[0]["memory/hose.md"]["expansion"] == {"spend": ["costs"]}
    assert lookups == [["spend"]]


def test_the_lexemes_searched_with_the_question_lift_it_as_a_second_query_would(alice, index_files, settings):
    """keyword_candidates(also=...) gives, in one statement, what ``lifted`` gives of the question's keyword
    query and a second one of the words; for a large agent it leaves them out (the caller sends the second
    query)."""
    from search.expansion import lifted
    from search.keyword import keyword_candidates
    from search.types import SearchFilters

    hose = "# Hose\n\nThe costs of the new garden hose were small; the spend on water was smaller.\n"
    index_files(alice, {"memory/office.md": OFFICE, "memory/garden.md": GARDEN, "memory/hose.md": hose})

    def search(query, limit=10, **also):
        return keyword_candidates(agent_id=alice.agent.pk, query=query, filters=SearchFilters(), limit=limit, **also)

    def scored(result):
        return [
            (hit.chunk_id, round(hit.score, 9), hit.expansion_score and round(hit.expansion_score, 9), round(hit.bm25, 9))
            for hit in result.hits
        ]

    question, lexemes = "what did the garden water cost?", ["spend", "chair"]  # "spend chairs"
    expected = lifted(search(question), search("spend chairs"), weight=0.3, limit=10)
    found = search(question, also=lambda: lexemes, also_weight=0.3)
    assert scored(found) == scored(expected) and len(found.hits) == 3
    assert found.lexemes == search(question).lexemes and found.idf == search(question).idf  # the question's own
    office = next(hit for hit in found.hits if hit.expansion_score and hit.score == hit.expansion_score)
    assert office.bm25 == 0.0  # found by the words alone
    # The best ``limit`` of each query, as lifted takes them (here the question's best and the words' best),
    # and of those the best ``limit``: no more candidates than the question's search alone.
    both = lifted(search(question, limit=1), search("spend chairs", limit=1), weight=0.3)
    expected = lifted(search(question, limit=1), search("spend chairs", limit=1), weight=0.3, limit=1)
    assert len(both.hits) == 2 and scored(expected) == scored(both)[:1]
    assert scored(search(question, limit=1, also=lambda: lexemes, also_weight=0.3)) == scored(expected)
    # Without lexemes (or without weight), the question's own search; a large agent's never asks for them.
    assert scored(search(question, also=lambda: lexemes, also_weight=0.0)) == scored(search(question))
    assert all(hit.expansion_score is None for hit in search(question, also=lambda: [], also_weight=0.3).hits)
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 0

    def never():
        raise AssertionError("a large agent's search asked for the lexemes")

    assert scored(search(question, also=never, also_weight=0.3)) == scored(search(question))


@pytest.mark.django_db(transaction=True)
def test_a_small_agents_worked_out_neighbours_are_searched_in_the_keyword_half(alice, index_files, settings, monkeypatch):
    """Committed (the keyword half runs on a helper, and waits there for the plan read on the request's
    thread): every rare word's neighbours worked out and the agent searched exactly, the keyword half
    searches them with the question, and no second query is sent; the answer is the second query's (a large
    agent, or a word to look up, still sends one)."""
    import search.services as services

    second_queries = []
    real_query = services.expansion_query

    def counted(**kwargs):
        second_queries.append(kwargs["plan"].words)
        return real_query(**kwargs)

    monkeypatch.setattr(services, "expansion_query", counted)
    index_files(alice, {"memory/office.md": OFFICE, "memory/garden.md": GARDEN, "memory/hose.md": HOSE})
    memory_words_sync()
    settings.MEMORYHUB_SEARCH_EXPANSION_MIN_IDF = 0.5

    def answer():
        found, response = explained(alice, "the spend")
        return [(r.path, r.start_line, round(r.score, 9)) for r in response.results], found["memory/hose.md"]["expansion"]

    in_the_half = answer()
    assert in_the_half[1] == {"spend": ["costs"]} and second_queries == []
    settings.MEMORYHUB_SEARCH_PARALLEL_HALVES = 0  # no helper: the keyword half runs here, after the plan
    assert answer() == in_the_half and second_queries == []
    settings.MEMORYHUB_SEARCH_PARALLEL_HALVES = 2
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 2  # this agent (3 chunks) is large now
    assert answer() == in_the_half and second_queries == [["spend"]]
    # Its words counted fewer chunks than it has (the task has not read the newest yet): the keyword half
    # finds it large and leaves the neighbours out, and the second query runs after it.
    MemoryWordsState.objects.filter(agent=alice.agent).update(chunks=2)
    assert answer() == in_the_half and second_queries == [["spend"], ["spend"]]
    MemoryWordsState.objects.filter(agent=alice.agent).update(chunks=3)
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 2_000
    MemoryWord.objects.filter(agent=alice.agent, word="spend").update(neighbours=None)  # to look up
    assert answer() == in_the_half and second_queries == [["spend"], ["spend"], ["spend"]]


@pytest.mark.django_db(transaction=True)
def test_a_stalled_plan_answers_503_at_the_statement_timeout_and_frees_the_keyword_half_waiting_for_it(
    alice, index_files, settings, lock_table
):
    """The plan stalls (its words' state locked by another connection): the checks' statement, which reads
    it, ends at the statement timeout and the search answers 503, as for any stalled check. The keyword half,
    which waits for the plan on its helper, is let go at once, not held to the search's deadline."""
    from search import beside
    from search.deadline import SearchUnavailable

    index_files(alice, {"memory/office.md": OFFICE, "memory/garden.md": GARDEN, "memory/hose.md": HOSE})
    memory_words_sync()
    settings.MEMORYHUB_SEARCH_EXPANSION_MIN_IDF = 0.5
    found, _ = explained(alice, "the spend")
    assert found["memory/hose.md"]["expansion"] == {"spend": ["costs"]}  # searched in the keyword half

    settings.MEMORYHUB_SEARCH_STATEMENT_TIMEOUT_MS = 500
    settings.MEMORYHUB_SEARCH_DEADLINE_MS = 8_000
    lock_table(MemoryWordsState._meta.db_table)  # read by the plan alone: not by either half
    started = time.monotonic()
    with pytest.raises(SearchUnavailable):
        explained(alice, "the spend")
    assert time.monotonic() - started < 4  # the statement timeout's 0.5 s, not the lock's 30 s nor the deadline
    _, free = beside._helpers()
    for _ in range(40):  # the keyword half's helper free within 2 s, not at the deadline's 8 s
        if free._value == settings.MEMORYHUB_SEARCH_PARALLEL_HALVES:
            break
        time.sleep(0.05)
    assert free._value == settings.MEMORYHUB_SEARCH_PARALLEL_HALVES


@pytest.mark.django_db(transaction=True)
def test_a_search_fallen_back_to_keyword_only_keeps_the_neighbours_it_finds_without_the_query_vector(
    alice, index_files, settings, synonyms
):
    """The query's embedding fails: the search answers by keyword only, and a held word's neighbours are
    searched all the same, whichever way: in the keyword half (worked out, a small agent), by the second
    query (a large agent), or looked up from the word's own vector. (A word the memory lacks needs the
    query's embedding: it is not expanded, test_a_provider_failure_leaves_the_words_...)"""
    index_files(alice, {"memory/office.md": OFFICE, "memory/garden.md": GARDEN, "memory/hose.md": HOSE})
    memory_words_sync()
    settings.MEMORYHUB_SEARCH_EXPANSION_MIN_IDF = 0.5
    synonyms.embed_query_windows = lambda texts: (_ for _ in ()).throw(ProviderTransientError("down"))
    synonyms.embed_query = synonyms.embed_query_windows

    def answer():
        found, response = explained(alice, "the spend")
        assert response.mode == "keyword" and "provider failed" in response.message
        return [(r.path, r.start_line) for r in response.results], found["memory/hose.md"]["expansion"]

    in_the_half = answer()
    assert in_the_half[1] == {"spend": ["costs"]}
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 2  # this agent (3 chunks) is large now: the second query
    assert answer() == in_the_half
    MemoryWord.objects.filter(agent=alice.agent, word="spend").update(neighbours=None)  # looked up
    assert answer() == in_the_half


@pytest.mark.django_db(transaction=True)
def test_the_plan_is_read_in_the_round_trip_of_the_checks(alice, index_files, settings, monkeypatch):
    """The plan costs the search no statement of its own: it is read with the checks (pending files, the
    agent's vectors), which the search sends before its query embedding and vector half anyway."""
    from django.db.backends.postgresql.base import Cursor

    index_files(alice, {"memory/office.md": OFFICE, "memory/garden.md": GARDEN, "memory/hose.md": HOSE})
    memory_words_sync()
    settings.MEMORYHUB_SEARCH_EXPANSION_MIN_IDF = 0.5
    sent = []
    execute = Cursor.execute

    def record(cursor, query, *args, **kwargs):
        sent.append(query)
        return execute(cursor, query, *args, **kwargs)

    monkeypatch.setattr(Cursor, "execute", record)
    found, _ = explained(alice, "the spend")
    monkeypatch.undo()
    assert found["memory/hose.md"]["expansion"] == {"spend": ["costs"]}
    reading_the_plan = [query for query in sent if MemoryWordsState._meta.db_table in query]
    assert len(reading_the_plan) == 1 and "indexing_memoryfile" in reading_the_plan[0]
