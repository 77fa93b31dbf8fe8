"""Experiment (docs/search.md, "Snippet lines chosen by meaning"): a snippet's lines chosen by what they
mean as well as by the query words they hold, measured in the ``bench_variants`` harness and not built
into the service.

Today a snippet is the run of a hit's lines holding the most query-word weight (search/snippets.py); a
chunk found by meaning alone starts at its first line. Here every line of a hit's region is also
embedded (the service's provider, one call per batch of new lines, each distinct line once per run) and
scored by its cosine similarity to the query's first window vector. Variant settings, read only here:

- ``MEMORYHUB_SEARCH_EXP_LINE_MEANING=w``: each line's score becomes its keyword score plus
  ``w × S × max(0, cos - best + margin) / margin`` where ``best`` is the region's best cosine, ``S`` the
  summed IDF of the query's lexemes (1 without any) and ``margin`` ``MEMORYHUB_SEARCH_EXP_LINE_MARGIN``
  (default 0.05): the lines that mean the query most get up to ``w`` of a line holding every query word.
- ``MEMORYHUB_SEARCH_EXP_LINE_ONLY_MEANING=1``: the same, only for regions where no line holds a query
  word (the hits found by meaning alone).

    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 python benchmarks/experiments/line_meaning.py \\
        --reuse s39 --part tune --variant 'lm0.5:MEMORYHUB_SEARCH_EXP_LINE_MEANING=0.5'

Arguments after the script name are bench_variants' own.
"""

import os
import sys
import threading

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402

_state = threading.local()
_line_vectors: dict[str, list[float]] = {}


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


def _vectors(provider, texts: list[str]) -> list[list[float]]:
    missing = sorted({t for t in texts if t not in _line_vectors})
    if missing:
        for text, vector in zip(missing, provider.embed_documents(missing)):
            _line_vectors[text] = vector
    return [_line_vectors[t] for t in texts]


def meaning_scores(*, lines: list[str], keyword_scores: list[float], query_vector, idf_total: float,
                   weight: float, margin: float, provider) -> list[float]:
    vectors = _vectors(provider, [line if line.strip() else " " for line in lines])
    cosines = [_dot(query_vector, v) if line.strip() else -1.0 for line, v in zip(lines, vectors)]
    best = max(cosines)
    return [
        k + weight * idf_total * max(0.0, c - best + margin) / margin
        for k, c in zip(keyword_scores, cosines)
    ]


def main(argv: list[str]) -> None:
    from django.core.management import call_command

    import search.services as services
    from indexing.embeddings import get_provider

    results_before, build_before = services._results, services.snippet_build

    def results(*, agent_id, query="", keyword=None, **rest):
        _state.agent_id, _state.query, _state.keyword = agent_id, query, keyword
        return results_before(agent_id=agent_id, query=query, keyword=keyword, **rest)

    def snippet_build(*, file_lines, region, scores, **rest):
        weight = getattr(settings, "MEMORYHUB_SEARCH_EXP_LINE_MEANING", 0.0)
        only_meaning = getattr(settings, "MEMORYHUB_SEARCH_EXP_LINE_ONLY_MEANING", 0)
        a, b = region
        if weight and b > a and getattr(_state, "query", "") and not (only_meaning and any(s > 0 for s in scores)):
            provider = get_provider()
            query_vector = services.query_embedding(provider=provider, text=_state.query, agent_id=_state.agent_id, timeout=60)[0]
            keyword = _state.keyword
            idf_total = sum(keyword.idf.get(lexeme, 1.0) for lexeme in keyword.lexemes) or 1.0
            scores = meaning_scores(
                lines=file_lines.lines[a : b + 1], keyword_scores=scores, query_vector=query_vector,
                idf_total=idf_total, weight=weight,
                margin=getattr(settings, "MEMORYHUB_SEARCH_EXP_LINE_MARGIN", 0.05), provider=provider,
            )
        return build_before(file_lines=file_lines, region=region, scores=scores, **rest)

    services._results, services.snippet_build = results, snippet_build
    call_command("bench_variants", *argv)


if __name__ == "__main__":
    main(sys.argv[1:])
