"""Experiment (docs/search.md, "Vector feedback: not kept", its last paragraph): how much of the protocol's
4,200-character budget the default answers use, per dev set, and how deep the evidence they miss sits.
Every question is asked twice on the agents ``bench_variants --reuse TAG`` left: with the defaults, and for
50 results (the API's limit) with no character budget, where each missed evidence turn first shows.

    TAG=s47 MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 python manage.py shell \\
        < benchmarks/experiments/budget_use.py
"""

import os
import statistics
from collections import Counter
from dataclasses import dataclass, field

from agents.models import Agent
from benchmarks.bench_data import dev_sets_load
from benchmarks.locomo import snippets_within_budget, turn_found_in
from benchmarks.management.commands.bench_variants import DEFAULT_DATA
from search.services import memory_search

TAG = os.environ.get("TAG", "s47")
DEPTHS = ((0, 6, "1-6"), (6, 12, "7-12"), (12, 25, "13-25"), (25, 50, "26-50"))


def as_results(response) -> list[dict]:
    return [
        {"path": r.path, "start_line": r.start_line, "end_line": r.end_line, "snippet": r.snippet, "score": r.score}
        for r in response.results
    ]


def depth(rank: int | None) -> str:
    """The band of DEPTHS a 0-based rank falls in, or "none" (not in the 50)."""
    return next((name for low, high, name in DEPTHS if rank is not None and low <= rank < high), "none")


@dataclass
class Tally:
    used: list[int] = field(default_factory=list)  # characters shown per answer
    results: list[int] = field(default_factory=list)  # results shown per answer
    missed: Counter = field(default_factory=Counter)  # missed evidence turns by depth()
    evidence: int = 0

    def report(self, name: str) -> str:
        bands = ", ".join(f"{band} {self.missed[band] / self.evidence:.3f}" for band in [*(b for *_, b in DEPTHS), "none"])
        return (
            f"{name}: {len(self.used)} questions; characters shown p50 {statistics.median(self.used):.0f}, "
            f"mean {statistics.mean(self.used):.0f}; results mean {statistics.mean(self.results):.2f}; "
            f"{self.evidence} evidence turns, missed {sum(self.missed.values()) / self.evidence:.3f}, "
            f"first found at ranks: {bands}"
        )


for path in DEFAULT_DATA:
    for dev in dev_sets_load(path):
        # Per set, and LoCoMo's multi-hop questions (category 1) apart.
        groups: dict[str, Tally] = {}
        for number, conversation in enumerate(dev.conversations):
            agent = Agent.objects.get(slug=f"variants-{TAG}-{dev.name}-{number}")
            for question in conversation.questions:
                shown = snippets_within_budget(as_results(memory_search(agent=agent, query=question.text)))
                deep = snippets_within_budget(
                    as_results(memory_search(agent=agent, query=question.text, max_results=50)), budget=10**9
                )
                names = [dev.name] + (["locomo multi-hop"] if dev.name == "locomo" and question.category == 1 else [])
                for name in names:
                    tally = groups.setdefault(name, Tally())
                    tally.used.append(sum(len(snippet.text) for snippet in shown))
                    tally.results.append(len(shown))
                    for dia_id in question.evidence:
                        turn = conversation.turns[dia_id]
                        tally.evidence += 1
                        if not any(turn_found_in(turn, snippet) for snippet in shown):
                            rank = next((i for i, snippet in enumerate(deep) if turn_found_in(turn, snippet)), None)
                            tally.missed[depth(rank)] += 1
        for name, tally in groups.items():
            print(tally.report(name))
