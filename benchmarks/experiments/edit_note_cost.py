"""Experiment (docs/search.md, "An edit that takes words out is noted as a deletion is"): what the check
of an edit's removed words costs the indexing. A throw-away agent's file of ``LINES`` lines is indexed
with the fake provider, then edited ``EDITS`` times each way: an append; a line changed in the middle; a
line put first, which moves the chunks' lines, so that old chunks go though none of their words does
(each line holds a word of its own: the check reads every chunk's words). Each edit's indexing
is timed whole, and ``_words_removed_note`` (the check) alone, wrapped where indexing/services.py calls
it. Prints the medians, and how many edits of each kind were noted.

    python manage.py shell < benchmarks/experiments/edit_note_cost.py
"""

import statistics
import time
import uuid

from django.test import override_settings

import indexing.services as services
from agents.deletion import agent_delete_here
from agents.services import agent_create
from indexing.writes import file_ingest
from search.models import MemoryWordsState

LINES, EDITS = 2000, 20
took: list[float] = []
check_before = services._words_removed_note


def check(**kwargs):
    started = time.perf_counter()
    try:
        return check_before(**kwargs)
    finally:
        took.append(time.perf_counter() - started)


def letters(number: int) -> str:
    """``number`` in letters (0 → "a", 26 → "ba"): a word of its own for each line."""
    out = ""
    while True:
        number, digit = divmod(number, 26)
        out = chr(97 + digit) + out
        if not number:
            return out


def line(number: int, word: str = "lantern") -> str:
    return f"Note {number}: the {word} by the gate of {letters(number)}ville needs oil before the evening watch."


with override_settings(MEMORYHUB_EMBEDDING_PROVIDER="fake", CELERY_TASK_ALWAYS_EAGER=True):
    agent = agent_create(slug=f"edit-note-{uuid.uuid4().hex[:6]}")
    MemoryWordsState.objects.create(agent=agent)
    services._words_removed_note = check
    try:
        lines = [line(n) for n in range(LINES)]
        file_ingest(agent=agent, path="memory/log.md", content="\n".join(lines) + "\n")
        for kind in ("append", "change", "insert"):
            whole, took[:] = [], []
            noted = 0
            for edit in range(EDITS):
                if kind == "append":
                    lines.append(line(LINES + edit))
                elif kind == "change":
                    lines[len(lines) // 2] = line(edit, word=f"torch{chr(97 + edit)}")
                else:
                    lines.insert(0, line(edit))
                MemoryWordsState.objects.filter(agent=agent).update(text_removed=False)
                started = time.perf_counter()
                file_ingest(agent=agent, path="memory/log.md", content="\n".join(lines) + "\n")
                whole.append(time.perf_counter() - started)
                noted += MemoryWordsState.objects.get(agent=agent).text_removed
            print(
                f"{kind}: {EDITS} edits of a {len(lines)}-line file, noted {noted}; indexing p50 "
                f"{statistics.median(whole) * 1000:.1f} ms, the check p50 {statistics.median(took) * 1000:.2f} ms"
            )
    finally:
        services._words_removed_note = check_before
        agent_delete_here(agent_id=agent.pk)
