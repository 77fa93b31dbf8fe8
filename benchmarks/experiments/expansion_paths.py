"""Count (docs/search.md, "Worked-out neighbours searched in the keyword half"): which way keyword expansion
takes for each dev question, on the agents of a ``bench_variants --reuse TAG`` run (their words read and
their neighbours worked out), as search/services.py decides it from ``expansion_plan``:

- nothing expanded (no rare word, or none with a word near enough);
- in the keyword half: every rare word's neighbours worked out, the agent searched by keyword exactly;
- a second keyword query: a rare word to embed (the memory lacks it) or to look up, or a large agent.

Run from the checkout, with the embedder the agents were indexed with:

    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 TAG=s44 \\
        .venv/bin/python manage.py shell < benchmarks/experiments/expansion_paths.py
"""

import os
from collections import Counter

from django.conf import settings

from agents.models import Agent
from benchmarks.bench_data import dev_sets_load
from benchmarks.management.commands.bench_search import DEFAULT_DATA
from indexing.embedding_identity import configured_identity
from search.expansion import expansion_plan

TAG = os.environ.get("TAG", "s44")
key = configured_identity().key
for path in DEFAULT_DATA:
    for dev in dev_sets_load(path):
        ways: Counter = Counter()
        for number, conversation in enumerate(dev.conversations):
            agent = Agent.objects.get(slug=f"variants-{TAG}-{dev.name}-{number}")
            for question in conversation.questions:
                plan = expansion_plan(agent_id=agent.pk, identity_key=key, query=question.text)
                if plan is None:
                    ways["nothing expanded"] += 1
                elif plan.searched is not None and plan.chunks <= settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS:
                    ways["in the keyword half"] += 1
                else:
                    ways["a second keyword query"] += 1
        print(f"{dev.name}: {sum(ways.values())} questions: " + ", ".join(f"{way} {n}" for way, n in ways.most_common()))
