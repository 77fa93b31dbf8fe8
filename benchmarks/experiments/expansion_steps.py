"""Measurement (docs/search.md, "Keyword expansion, built"): what each step of keyword expansion costs
(search/expansion.py), timed one at a time, with the halves in sequence, on the meetings of a
``bench_variants --reuse TAG`` run (its agents must exist, their words read):

- the keyword half (``keyword_candidates``), for comparison;
- the gate (``expansion_plan``: the question words' lexeme counts read in the memory's words);
- the nearest-word lookup (``nearest_words``) of the rare words;
- the second keyword query, for the questions whose rare words have a neighbour.

The rare words the memory lacks are embedded outside the timing (the service embeds them with the
query). Run from the checkout, with the embedder the agents were indexed with:

    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 TAG=s41 \\
        .venv/bin/python manage.py shell < benchmarks/experiments/expansion_steps.py
"""

import os
import statistics
import time

from agents.models import Agent
from benchmarks.bench_data import dev_sets_load
from benchmarks.management.commands.bench_search import DEFAULT_DATA
from indexing.embedding_identity import configured_identity
from indexing.embeddings import get_provider
from search import expansion
from search.keyword import keyword_candidates
from search.types import SearchFilters

TAG = os.environ.get("TAG", "s41")
MEETINGS, QUESTIONS = 12, 10  # the first meetings, and the first questions of each

identity, provider = configured_identity(), get_provider()
meetings = next(d for path in DEFAULT_DATA for d in dev_sets_load(path) if d.name == "meetings")
took: dict[str, list[float]] = {"keyword half": [], "gate": [], "nearest words": [], "second keyword query": []}
rare_counts, asked = [], 0
for number, conversation in enumerate(meetings.conversations[:MEETINGS]):
    agent = Agent.objects.get(slug=f"variants-{TAG}-meetings-{number}")
    for question in conversation.questions[:QUESTIONS]:
        if not expansion.expansion_words(question.text):
            continue
        asked += 1
        started = time.perf_counter()
        keyword_candidates(agent_id=agent.pk, query=question.text, filters=SearchFilters(), limit=100)
        took["keyword half"].append(time.perf_counter() - started)
        started = time.perf_counter()
        plan = expansion.expansion_plan(agent_id=agent.pk, identity_key=identity.key, query=question.text)
        took["gate"].append(time.perf_counter() - started)
        rare = plan.words if plan is not None else []
        vectors = dict(zip(plan.to_embed, provider.embed_documents(list(plan.to_embed)))) if plan and plan.to_embed else {}
        started = time.perf_counter()
        near = expansion.nearest_words(
            agent_id=agent.pk, identity_key=identity.key, dimensions=identity.dimensions, words=rare, vectors=vectors
        )
        took["nearest words"].append(time.perf_counter() - started)
        rare_counts.append(len(rare))
        extra = list(dict.fromkeys(word for found in near.values() for word in found))
        if extra:
            started = time.perf_counter()
            keyword_candidates(agent_id=agent.pk, query=" ".join(extra), filters=SearchFilters(), limit=100)
            took["second keyword query"].append(time.perf_counter() - started)
print(f"{asked} questions, {statistics.mean(rare_counts):.2f} rare words each on average")
for step, seconds in took.items():
    print(f"{step}: p50 {1000 * statistics.median(seconds):.2f} ms over {len(seconds)} questions")
