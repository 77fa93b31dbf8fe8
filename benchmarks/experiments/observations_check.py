"""Experiment (docs/search.md, "A second derivation of the dialogue shape"): the default fusion against
RRF on dialogue-shaped data built from LoCoMo's ``observation`` field instead of its event summaries.

Not part of the service or of bench_search (its notes share the turns' words, so it is a check, not a
set to tune on). Each observation (a short fact citing one turn) becomes a dated note in a file of its
own; each stretch of ``STRETCH`` (16) consecutive turns of a session is a query whose evidence is the
notes citing a turn in it. Same split as LoCoMo. It runs ``manage.py bench_variants`` on that set
alone (reported under the name "dialogue"):

    STRETCH=16 MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 python benchmarks/experiments/observations_check.py \\
        --reuse obs16 --part all \\
        --variant 'rrf:MEMORYHUB_SEARCH_FUSION=rrf' --variant 'minmax:MEMORYHUB_SEARCH_FUSION=minmax'
    # and with --mode vector / --mode keyword for each half alone

The figures in docs/search.md were measured at commit 7c183ee.
"""

import os
import re
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

import django  # noqa: E402

django.setup()

from benchmarks.bench_data import DIALOGUE_CATEGORIES  # noqa: E402
from benchmarks.experiments.derived import OBSERVATION, bench_variants_on_locomo, session_day  # noqa: E402
from benchmarks.locomo import Conversation, Question, TurnLine, turn_line_text  # noqa: E402

STRETCH = int(os.environ.get("STRETCH", "16"))
_SESSION = re.compile(r"session_\d+")


def observations_load(sample: dict, part: str, *, stretch: int = STRETCH) -> Conversation:
    conversation = sample["conversation"]
    files: dict[str, str] = {}
    turns: dict[str, TurnLine] = {}
    notes_of_turn: dict[str, list[str]] = {}
    for key, by_speaker in sample["observation"].items():
        number = int(OBSERVATION.fullmatch(key).group(1))
        when = conversation.get(f"session_{number}_date_time")
        if not when:
            continue
        day = session_day(when)
        for facts in by_speaker.values():
            for fact, evidence in facts:
                text = " ".join(str(fact).split())
                path = f"memory/observations/{day.isoformat()}-{len(files) + 1:04d}.md"
                files[path] = f"# {day.day} {day:%B}, {day.year}\n\n{text}\n"
                turns[path] = TurnLine(path=path, line=3, text=text)
                for turn_id in [evidence] if isinstance(evidence, str) else evidence:
                    notes_of_turn.setdefault(str(turn_id), []).append(path)
    questions = []
    for key in sorted(k for k in conversation if _SESSION.fullmatch(k)):
        dialogue = conversation[key]
        for start in range(0, len(dialogue), stretch):
            turns_asked = dialogue[start : start + stretch]
            evidence = list(dict.fromkeys(p for turn in turns_asked for p in notes_of_turn.get(turn.get("dia_id", ""), [])))
            if evidence:
                text = "\n".join(turn_line_text(turn) for turn in turns_asked)
                questions.append(Question(text=text, category="events", evidence=tuple(evidence)))
    return Conversation(sample_id=f"{sample['sample_id']}-observations", files=files, turns=turns, questions=questions, part=part)


if __name__ == "__main__":
    bench_variants_on_locomo(sys.argv[1:], name="dialogue", categories=DIALOGUE_CATEGORIES, load=observations_load)
