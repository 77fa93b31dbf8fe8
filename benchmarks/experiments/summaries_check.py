"""Experiment (docs/search.md, "Long queries score with their own BM25 parameters"): long queries over
chunked transcripts. Each of LoCoMo's ``session_summary`` texts (its first sentence, which names the
date the file's header holds, left out) is asked of the LoCoMo agents that ``manage.py bench_variants
--reuse TAG`` indexed; the answer is the summary's session file. Reported per part: the MRR of that file
and the share of the six results that come from it, for the defaults and each variant.

    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 python benchmarks/experiments/summaries_check.py \\
        LOCOMO_FILE TAG 'before:MEMORYHUB_SEARCH_BM25_LONG_QUERY_LEXEMES=0' [--mode keyword]
"""

import json
import os
import re
import statistics
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

import django  # noqa: E402

django.setup()

from django.test import override_settings  # noqa: E402

from agents.models import Agent  # noqa: E402
from benchmarks.bench_data import locomo_part  # noqa: E402
from benchmarks.locomo import session_path  # noqa: E402
from benchmarks.management.commands.bench_variants import UNHURRIED, variant_parse  # noqa: E402
from search.services import memory_search  # noqa: E402

_SUMMARY = re.compile(r"session_(\d+)_summary")


def summaries_score(data: list, *, tag: str, mode: str | None) -> dict[str, tuple[float, float]]:
    """Per part: (MRR of the summary's session file, mean share of the results from it)."""
    scores: dict[str, list[tuple[float, float]]] = {}
    for index, sample in enumerate(data):
        agent = Agent.objects.get(slug=f"variants-{tag}-locomo-{index}")
        for key, text in sample.get("session_summary", {}).items():
            target = session_path(int(_SUMMARY.fullmatch(key).group(1)))
            results = memory_search(agent=agent, query=text.split(". ", 1)[-1], mode=mode).results
            ranks = [rank for rank, result in enumerate(results, 1) if result.path == target]
            share = sum(result.path == target for result in results) / max(len(results), 1)
            scores.setdefault(locomo_part(index), []).append((1 / ranks[0] if ranks else 0.0, share))
    return {part: (statistics.mean(r for r, _ in s), statistics.mean(h for _, h in s)) for part, s in scores.items()}


if __name__ == "__main__":
    args = sys.argv[1:]
    mode = None
    if "--mode" in args:
        at = args.index("--mode")
        mode = args[at + 1]
        del args[at : at + 2]
    path, tag, *specs = args
    with open(path) as file:
        data = json.load(file)
    for name, values in [("default", {})] + [variant_parse(spec) for spec in specs]:
        with override_settings(**{**UNHURRIED, **values}):
            scored = summaries_score(data, tag=tag, mode=mode)
        print(name.ljust(12), " | ".join(f"{part}: MRR {mrr:.3f}, share {share:.3f}" for part, (mrr, share) in scored.items()))
