"""Experiment (docs/search.md, "A hit inside a stretch gets a wider snippet"): LoCoMo's conversations with
each conversation's sessions in one file, as an agent that keeps all of its memory in one file would.

Not part of the service or of bench_search: it checks the wide snippets given to an answer whose best
candidates all come from one file. The meetings are the only dev set whose memories are one file each,
and a meeting's answers are stretches of its transcript; here the same questions as LoCoMo's are answered
by a turn or two of one long file, the case where fewer, wider snippets could cost places. Each
conversation's session files (benchmarks/locomo.py) are joined in order into ``memory/conversation.md``,
one blank line between sessions, and every evidence turn keeps its line. Same split as LoCoMo. It runs
``manage.py bench_variants`` on that set alone (reported under the name "locomo"):

    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 python benchmarks/experiments/single_file_check.py \\
        --reuse single --part all \\
        --variant 'narrow:MEMORYHUB_SEARCH_SNIPPET_STRETCH=1'
"""

import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

import django  # noqa: E402

django.setup()

from dataclasses import replace  # noqa: E402

from benchmarks.experiments.derived import bench_variants_on_locomo  # noqa: E402
from benchmarks.locomo import CATEGORIES, Conversation, TurnLine, conversation_load  # noqa: E402

PATH = "memory/conversation.md"


def single_file_load(sample: dict, part: str) -> Conversation:
    """The conversation of ``sample`` with all of its sessions in one file, its turns' lines moved with them."""
    conversation = conversation_load(sample)
    lines: list[str] = []
    first_line: dict[str, int] = {}  # session path -> the line of the joined file its line 1 became
    for path in sorted(conversation.files):
        if lines:
            lines.append("")
        first_line[path] = len(lines) + 1
        lines.extend(conversation.files[path].rstrip("\n").split("\n"))
    turns = {
        turn_id: TurnLine(path=PATH, line=first_line[turn.path] + turn.line - 1, text=turn.text)
        for turn_id, turn in conversation.turns.items()
    }
    return replace(
        conversation, sample_id=f"{conversation.sample_id}-single", files={PATH: "\n".join(lines) + "\n"}, turns=turns, part=part
    )


if __name__ == "__main__":
    bench_variants_on_locomo(sys.argv[1:], name="locomo", categories=CATEGORIES, load=single_file_load)
