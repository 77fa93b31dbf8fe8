"""The two dev sets of the search-quality benchmark, loaded into one shape (benchmarks/locomo.py's
Conversation: files, the line of every evidence turn, questions), each with a fixed tune/confirm split.

- **LoCoMo** (a list of conversations; Maharana et al., ACL 2024): one agent per conversation, its
  sessions written as `memory/session-NN.md` (benchmarks/locomo.py). Categories 1-4.
- **Meetings** (QMSum, Zhong et al., NAACL 2021, with turn-level evidence from QMSum_SummaryEvidence):
  `{"workspaces": [{"id", "files": {path: text}, "questions": [{"question", "evidence": [[path, line]],
  "category"}]}]}`, one agent per workspace, files given ready-made. Categories are the meeting domains.

The split is fixed so that a figure tuned on one part can be checked on the other: LoCoMo conversations
0-2 tune, 3-4 confirm; meeting workspaces whose index is 3 or 6 modulo 7 confirm (10 of 35: 2 academic,
6 product, 2 committee), the other 25 tune. Tune on the tune parts of both sets; read the confirm parts
last.
"""

from dataclasses import dataclass, replace
from pathlib import Path
import json

from benchmarks.locomo import CATEGORIES, Conversation, Question, TurnLine, conversation_load

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


def dev_set_load(path: str | Path) -> DevSet:
    """Either dev set, recognised by its shape. ValueError for anything else."""
    data = json.loads(Path(path).read_text())
    if isinstance(data, list):
        conversations = [replace(conversation_load(sample), part=locomo_part(i)) for i, sample in enumerate(data)]
        return DevSet(name="locomo", categories=CATEGORIES, conversations=conversations)
    if isinstance(data, dict) and isinstance(data.get("workspaces"), list):
        return DevSet(name="meetings", categories=MEETING_DOMAINS, conversations=meetings_load(data))
    raise ValueError("neither a LoCoMo list of conversations nor a meetings file with 'workspaces'")
