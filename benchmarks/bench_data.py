"""The two dev sets of the search-quality benchmark, loaded into one shape (benchmarks/locomo.py's
Conversation: files, the line of every evidence turn, questions), each with a fixed tune/confirm split.

- **LoCoMo** (a list of conversations; Maharana et al., ACL 2024): one agent per conversation, its
  sessions written as `memory/session-NN.md` (benchmarks/locomo.py). Categories 1-4.
- **Meetings** (QMSum, Zhong et al., NAACL 2021, with turn-level evidence from QMSum_SummaryEvidence):
  `{"workspaces": [{"id", "files": {path: text}, "questions": [{"question", "evidence": [[path, line]],
  "category"}]}]}`, one agent per workspace, files given ready-made. Categories are the meeting domains.

- **Dialogue** (derived from the LoCoMo file, another shape): each event of LoCoMo's ``event_summary``
  is a short dated note in a file of its own (``memory/events/YYYY-MM-DD-NN.md``: a date heading, a
  blank line, the note), and each session's whole dialogue is one query whose evidence is the notes
  of that session's events. The query is a long stretch of dialogue, the memories short notes: a
  ranking that leans on shared words or on the query's first sentences loses here. Same split as LoCoMo.

The split is fixed so that a figure tuned on one part can be checked on the other: LoCoMo conversations
0-2 tune, 3-4 confirm; meeting workspaces whose index is 3 or 6 modulo 7 confirm (10 of 35: 2 academic,
6 product, 2 committee), the other 25 tune. Tune on the tune parts of both sets; read the confirm parts
last.
"""

import json
import re
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from benchmarks.locomo import CATEGORIES, Conversation, Question, TurnLine, conversation_load, turn_line_text

DIALOGUE_CATEGORIES = {"events": "events"}
_EVENT_SESSION = re.compile(r"events_session_(\d+)")
MAX_DIALOGUE_QUERY_CHARS = 10_000  # the search API's query limit
MEETING_DOMAINS = {"academic": "academic", "product": "product", "committee": "committee"}
PARTS = ("tune", "confirm", "all")


@dataclass
class DevSet:
    name: str  # "locomo" or "meetings"
    categories: dict  # category key -> name, for the per-category table
    conversations: list[Conversation]


def locomo_part(index: int) -> str:
    return "confirm" if index >= 3 else "tune"


def meetings_part(index: int) -> str:
    return "confirm" if index % 7 in (3, 6) else "tune"


def meetings_load(data: dict) -> list[Conversation]:
    conversations = []
    for index, workspace in enumerate(data["workspaces"]):
        files = dict(workspace["files"])
        lines = {path: text.split("\n") for path, text in files.items()}
        turns: dict[str, TurnLine] = {}
        questions, skipped = [], 0
        for item in workspace["questions"]:
            evidence = []
            for path, line in item.get("evidence", []):
                key = f"{path}:{line}"
                if path in lines and 1 <= line <= len(lines[path]) and lines[path][line - 1].strip():
                    turns[key] = TurnLine(path=path, line=line, text=lines[path][line - 1])
                    if key not in evidence:
                        evidence.append(key)
            if not evidence:
                skipped += 1
                continue
            questions.append(Question(text=str(item["question"]), category=str(item.get("category", "")), evidence=tuple(evidence)))
        conversations.append(
            Conversation(sample_id=str(workspace["id"]), files=files, turns=turns, questions=questions,
                         skipped_questions=skipped, part=meetings_part(index))
        )
    return conversations


def _event_date(text: str) -> str:
    """'8 May, 2023' -> '2023-05-08' (LoCoMo's event dates); '' when it is not such a date."""
    try:
        return datetime.strptime(" ".join(text.replace(",", " ").split()), "%d %B %Y").date().isoformat()
    except ValueError:
        return ""


def dialogue_load(sample: dict) -> Conversation:
    """The dialogue-shaped set of one LoCoMo conversation (see the module docstring)."""
    conversation = sample["conversation"]
    files: dict[str, str] = {}
    turns: dict[str, TurnLine] = {}
    questions = []
    sessions = sorted(
        (int(match.group(1)), events)
        for key, events in (sample.get("event_summary") or {}).items()
        if (match := _EVENT_SESSION.fullmatch(key)) and isinstance(events, dict)
    )
    for number, events in sessions:
        day = _event_date(str(events.get("date", "")))
        notes = [" ".join(str(note).split()) for speaker, items in events.items() if speaker != "date" for note in items or []]
        dialogue = conversation.get(f"session_{number}") or []
        if not day or not dialogue or not any(notes):
            continue
        evidence = []
        for note in filter(None, notes):
            path = f"memory/events/{day}-{len(files) + 1:03d}.md"
            files[path] = f"# {events['date']}\n\n{note}\n"
            turns[path] = TurnLine(path=path, line=3, text=note)
            evidence.append(path)
        query = "\n".join(turn_line_text(turn) for turn in dialogue)[:MAX_DIALOGUE_QUERY_CHARS]
        questions.append(Question(text=query, category="events", evidence=tuple(evidence)))
    return Conversation(sample_id=f"{sample.get('sample_id', '')}-events", files=files, turns=turns, questions=questions)


def dev_sets_load(path: str | Path, *, dialogue: bool = True) -> list[DevSet]:
    """The dev sets of one file, recognised by its shape: a LoCoMo file gives the LoCoMo set and (with
    ``dialogue``) the dialogue-shaped set derived from it; a meetings file the meetings set.
    ValueError for anything else."""
    data = json.loads(Path(path).read_text())
    if isinstance(data, list):
        conversations = [replace(conversation_load(sample), part=locomo_part(i)) for i, sample in enumerate(data)]
        sets = [DevSet(name="locomo", categories=CATEGORIES, conversations=conversations)]
        derived = [replace(dialogue_load(sample), part=locomo_part(i)) for i, sample in enumerate(data)] if dialogue else []
        if any(c.questions for c in derived):  # a LoCoMo file without event summaries has none
            sets.append(DevSet(name="dialogue", categories=DIALOGUE_CATEGORIES, conversations=[c for c in derived if c.questions]))
        return sets
    if isinstance(data, dict) and isinstance(data.get("workspaces"), list):
        return [DevSet(name="meetings", categories=MEETING_DOMAINS, conversations=meetings_load(data))]
    raise ValueError("neither a LoCoMo list of conversations nor a meetings file with 'workspaces'")


def dev_set_load(path: str | Path) -> DevSet:
    """The first dev set of a file (LoCoMo or meetings); see dev_sets_load."""
    return dev_sets_load(path, dialogue=False)[0]
