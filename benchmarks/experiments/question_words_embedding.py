"""Measurement (docs/search.md, "Keyword expansion, built"): what embedding a question's words for keyword
expansion costs the configured provider, against the question alone: the question alone, its words in a
batch of their own after it (``embed_query_and_words``, the service's way), and question and words in one
padded batch. The first meetings questions of the dev set, each timed 20 times (median):

    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 \\
        .venv/bin/python manage.py shell < benchmarks/experiments/question_words_embedding.py
"""

import statistics
import time

from benchmarks.bench_data import dev_sets_load
from benchmarks.management.commands.bench_search import DEFAULT_DATA
from indexing.embeddings import get_provider
from search.expansion import expansion_words

QUESTIONS, REPEATS = 6, 20

provider = get_provider()
provider.embed_query("warm up")  # loads a local model outside the timing
meetings = next(d for path in DEFAULT_DATA for d in dev_sets_load(path) if d.name == "meetings")
questions = [q.text for conversation in meetings.conversations for q in conversation.questions][:QUESTIONS]
for question in questions:
    words = expansion_words(question)
    ways = {
        "question alone": lambda: provider.embed_query_and_words([question], []),
        "words in a batch of their own": lambda: provider.embed_query_and_words([question], words),
        "one padded batch": lambda: provider.embed_query_windows([question, *words]),
    }
    medians = {}
    for name, embed in ways.items():
        took = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            embed()
            took.append((time.perf_counter() - started) * 1000)
        medians[name] = statistics.median(took)
    print(f"{len(words)} words: " + ", ".join(f"{name} {ms:.1f} ms" for name, ms in medians.items()))
