"""Experiment (docs/search.md, "Questions over daily notes"): LoCoMo's questions asked of daily notes
instead of the conversation itself, the shape of an agent that keeps ``memory/YYYY-MM-DD.md`` notes.

Not part of the service or of bench_search (the notes are annotations written from the turns, so this
is a check, not a set to tune on). Each session's ``observation`` facts become the lines of that day's
note (``memory/YYYY-MM-DD.md``: ``# 8 May, 2023``, a blank line, ``- fact`` lines; two sessions of one
day share the file); each LoCoMo question (categories 1-4) is asked, and its evidence is the fact lines
citing one of its evidence turns (a question none of whose turns is cited is left out). Same split as
LoCoMo. It runs ``manage.py bench_variants`` on that set alone (reported under the name "locomo"):

    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 python benchmarks/experiments/daily_notes_check.py \\
        --reuse daily --part all --variant 'rrf:MEMORYHUB_SEARCH_FUSION=rrf'
"""

import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

import django  # noqa: E402

django.setup()

from benchmarks.experiments.derived import OBSERVATION, bench_variants_on_locomo, session_day  # noqa: E402
from benchmarks.locomo import CATEGORIES, Conversation, Question, TurnLine, normalise_evidence  # noqa: E402


def daily_notes_load(sample: dict, part: str) -> Conversation:
    conversation = sample["conversation"]
    lines_of: dict[str, list[str]] = {}  # path -> the file's lines
    turns: dict[str, TurnLine] = {}  # fact id -> its line
    facts_of_turn: dict[str, list[str]] = {}
    for number, key in sorted((int(OBSERVATION.fullmatch(key).group(1)), key) for key in sample["observation"]):
        when = conversation.get(f"session_{number}_date_time")
        if not when:
            continue
        day = session_day(when)
        path = f"memory/{day.isoformat()}.md"
        lines = lines_of.setdefault(path, [f"# {day.day} {day:%B}, {day.year}", ""])
        for facts in sample["observation"][key].values():
            for fact, evidence in facts:
                line = "- " + " ".join(str(fact).split())
                lines.append(line)
                fact_id = f"F{len(turns) + 1}"
                turns[fact_id] = TurnLine(path=path, line=len(lines), text=line)
                for turn_id in [evidence] if isinstance(evidence, str) else evidence:
                    for dia_id in normalise_evidence(str(turn_id)):
                        facts_of_turn.setdefault(dia_id, []).append(fact_id)
    questions, skipped = [], 0
    for item in sample.get("qa", []):
        if item.get("category") not in CATEGORIES:
            continue
        evidence = [
            fact for raw in item.get("evidence", []) for dia_id in normalise_evidence(raw) for fact in facts_of_turn.get(dia_id, [])
        ]
        evidence = list(dict.fromkeys(evidence))
        if not evidence:
            skipped += 1
            continue
        questions.append(Question(text=str(item["question"]), category=item["category"], evidence=tuple(evidence)))
    files = {path: "\n".join(lines) + "\n" for path, lines in lines_of.items()}
    return Conversation(
        sample_id=f"{sample['sample_id']}-daily", files=files, turns=turns, questions=questions, part=part,
        skipped_questions=skipped,
    )


if __name__ == "__main__":
    bench_variants_on_locomo(sys.argv[1:], name="locomo", categories=CATEGORIES, load=daily_notes_load)
