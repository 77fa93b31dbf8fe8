"""The keyword document: what the keyword index holds for a chunk, and how a query is read the same way.

One module for both sides: the indexer stores ``to_tsvector(KEYWORD_CONFIG, keyword_document(text))``
(the generated ``search_vector`` column, indexing/models.py) and search turns a query into lexemes with
the same configuration and the same document function (search/keyword.py). Change either here and both
sides change together (existing chunks keep their old document until they are indexed again).

PostgreSQL's parsers do not segment Chinese, Japanese or Korean text: a run of CJK characters becomes
one huge token that no query word matches (openclaw#20730). We append overlapping character bigrams
of every CJK run, the classic approach of CJK search engines, and do the same to queries, so a
two-character query word matches wherever it occurs.
"""

import re

# The text search configuration of the keyword index: English stemming and stop words. Changing it
# needs a migration that regenerates Chunk.search_vector (its expression names this configuration).
KEYWORD_CONFIG = "english"

_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")


def cjk_bigrams(text: str) -> list[str]:
    grams = []
    for run in _CJK_RUN.findall(text):
        if len(run) == 1:
            grams.append(run)
        grams.extend(run[i : i + 2] for i in range(len(run) - 1))
    return grams


def keyword_document(text: str) -> str:
    """The text the keyword index sees for a chunk: the text itself plus its CJK bigrams."""
    grams = cjk_bigrams(text)
    return f"{text}\n{' '.join(grams)}" if grams else text
