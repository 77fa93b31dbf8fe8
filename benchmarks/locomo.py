"""The LoCoMo retrieval-quality protocol (docs/search.md, "Protocol"), as pure functions.

A conversation becomes one agent's memory: session N is `memory/session-NN.md` with line 1
`# Session N (<date>)`, line 2 empty, then one turn per line (`Speaker: text`, plus
` [shares a photo: <caption>]`). Every turn keeps its line, so an evidence id (`D3:5`) names a line.

An evidence turn counts as found when the first 80 characters of its line stand in a snippet of its
file, taking the results' snippets in rank order up to 4,200 characters in all (6 × 700: six results
of 700-character snippets, MemoryHub's defaults). Recall, hit rate and MRR are averaged over questions, overall and per category 1-4
(category 5 has no answer in the conversation and is left out).

`python manage.py bench_search` feeds these functions from the live API.
"""

import math
import re
from dataclasses import asdict, dataclass, field

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
SNIPPET_BUDGET = 4200  # characters of snippets an agent reads per question
MATCH_PREFIX = 80  # characters of a turn's line that must stand in a snippet

_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_SESSION_KEY = re.compile(r"session_(\d+)")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class TurnLine:
    path: str
    line: int  # 1-indexed line of the turn in its file
    text: str  # the whole line as written to the file


@dataclass(frozen=True)
class Question:
    text: str
    category: int | str  # LoCoMo: 1-4; meetings: the domain
    evidence: tuple[str, ...]  # ids of turns of the conversation (LoCoMo: normalised dialogue ids)


@dataclass
class Conversation:
    sample_id: str
    files: dict[str, str]  # path -> content
    turns: dict[str, TurnLine]  # dialogue id ("D3:5") -> its line
    questions: list[Question]  # categories 1-4 with at least one known evidence turn
    skipped_questions: int = 0  # categories 1-4 whose evidence names no turn of the conversation
    part: str = "tune"  # "tune" or "confirm": the fixed split of a dev set (benchmarks/bench_data.py)


@dataclass(frozen=True)
class Snippet:
    path: str
    start_line: int
    end_line: int
    text: str


@dataclass(frozen=True)
class QuestionScore:
    category: int | str
    recall: float
    hit: bool
    reciprocal_rank: float
    evidence: int  # evidence turns of the question
    found: int
    missed_in_shown_file: int = 0  # missed, although a snippet of that file was shown
    missed_near_snippet: int = 0  # of those, the turn's line is within 2 lines of a shown snippet


def _one_line(text: str) -> str:
    return _SPACE.sub(" ", text or "").strip()


def turn_line_text(turn: dict) -> str:
    line = f"{_one_line(turn.get('speaker', ''))}: {_one_line(turn.get('text', ''))}"
    caption = _one_line(turn.get("blip_caption", ""))
    if caption:
        line += f" [shares a photo: {caption}]"
    return line


def session_path(number: int) -> str:
    return f"memory/session-{number:02d}.md"


def conversation_files(conversation: dict) -> tuple[dict[str, str], dict[str, TurnLine]]:
    """The memory files of one LoCoMo conversation and the line of every turn in them."""
    files: dict[str, str] = {}
    turns: dict[str, TurnLine] = {}
    numbers = sorted(
        int(match.group(1))
        for key, value in conversation.items()
        if (match := _SESSION_KEY.fullmatch(key)) and isinstance(value, list) and value
    )
    for number in numbers:
        path = session_path(number)
        date = _one_line(conversation.get(f"session_{number}_date_time", ""))
        lines = [f"# Session {number} ({date})" if date else f"# Session {number}", ""]
        for turn in conversation[f"session_{number}"]:
            text = turn_line_text(turn)
            lines.append(text)
            dia_id = normalise_evidence(turn.get("dia_id", ""))
            if dia_id:
                turns[dia_id[0]] = TurnLine(path=path, line=len(lines), text=text)
        files[path] = "\n".join(lines) + "\n"
    return files, turns


def normalise_evidence(raw: str) -> list[str]:
    """'D3:5' -> ['D3:5']; malformed forms ('D:11:26', 'D8:6; D9:17', 'D3:05') are repaired; junk -> []."""
    return [f"D{int(session)}:{int(turn)}" for session, turn in _EVIDENCE.findall(raw or "")]


def conversation_load(sample: dict) -> Conversation:
    files, turns = conversation_files(sample["conversation"])
    questions, skipped = [], 0
    for item in sample.get("qa", []):
        category = item.get("category")
        if category not in CATEGORIES:
            continue
        evidence: list[str] = []
        for raw in item.get("evidence", []):
            for dia_id in normalise_evidence(raw):
                if dia_id in turns and dia_id not in evidence:  # an id the conversation lacks cannot be found
                    evidence.append(dia_id)
        if not evidence:
            skipped += 1
            continue
        questions.append(Question(text=str(item["question"]), category=category, evidence=tuple(evidence)))
    return Conversation(
        sample_id=str(sample.get("sample_id", "")), files=files, turns=turns, questions=questions, skipped_questions=skipped
    )


def snippets_within_budget(results: list[dict], budget: int = SNIPPET_BUDGET) -> list[Snippet]:
    """The results' snippets in rank order, cut where the reader's character budget runs out."""
    shown, left = [], budget
    for result in results:
        if left <= 0:
            break
        text = str(result.get("snippet", ""))[:left]
        left -= len(text)
        shown.append(Snippet(path=result["path"], start_line=int(result["start_line"]), end_line=int(result["end_line"]), text=text))
    return shown


def turn_found_in(turn: TurnLine, snippet: Snippet) -> bool:
    return snippet.path == turn.path and turn.text[:MATCH_PREFIX] in snippet.text


def question_score(*, question: Question, turns: dict[str, TurnLine], results: list[dict]) -> QuestionScore:
    shown = snippets_within_budget(results)
    evidence = [turns[dia_id] for dia_id in question.evidence]
    found = [turn for turn in evidence if any(turn_found_in(turn, snippet) for snippet in shown)]
    first_rank = next(
        (rank for rank, snippet in enumerate(shown, 1) if any(turn_found_in(turn, snippet) for turn in evidence)), None
    )
    missed = [turn for turn in evidence if turn not in found]
    in_shown_file = [turn for turn in missed if any(snippet.path == turn.path for snippet in shown)]
    near = [
        turn for turn in in_shown_file
        if any(snippet.path == turn.path and snippet.start_line - 2 <= turn.line <= snippet.end_line + 2 for snippet in shown)
    ]
    return QuestionScore(
        category=question.category,
        recall=len(found) / len(evidence),
        hit=bool(found),
        reciprocal_rank=1 / first_rank if first_rank else 0.0,
        evidence=len(evidence),
        found=len(found),
        missed_in_shown_file=len(in_shown_file),
        missed_near_snippet=len(near),
    )


def question_details(
    *, set_name: str, conversation: Conversation, question: Question, score: QuestionScore, results: list[dict]
) -> dict:
    """One line of a benchmark's --details file: the question, where its evidence is, its score and the
    results' places (not their snippets)."""
    return {
        "set": set_name, "conversation": conversation.sample_id, "part": conversation.part,
        "question": question.text, "category": question.category,
        "evidence": {key: [conversation.turns[key].path, conversation.turns[key].line] for key in question.evidence},
        "score": asdict(score),
        "results": [{k: r.get(k) for k in ("path", "start_line", "end_line", "score")} for r in results],
    }


@dataclass
class Summary:
    questions: int = 0
    evidence_recall: float = 0.0
    hit_rate: float = 0.0
    mrr: float = 0.0
    evidence_turns: int = 0
    evidence_found: int = 0
    missed_in_shown_file: int = 0
    missed_near_snippet: int = 0
    categories: dict[str, dict] = field(default_factory=dict)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def scores_summary(scores: list[QuestionScore], categories: dict = CATEGORIES) -> Summary:
    summary = Summary(
        questions=len(scores),
        evidence_recall=_mean([s.recall for s in scores]),
        hit_rate=_mean([float(s.hit) for s in scores]),
        mrr=_mean([s.reciprocal_rank for s in scores]),
        evidence_turns=sum(s.evidence for s in scores),
        evidence_found=sum(s.found for s in scores),
        missed_in_shown_file=sum(s.missed_in_shown_file for s in scores),
        missed_near_snippet=sum(s.missed_near_snippet for s in scores),
    )
    for category, name in categories.items():
        of_category = [s for s in scores if s.category == category]
        summary.categories[str(category)] = {
            "name": name,
            "questions": len(of_category),
            "evidence_recall": _mean([s.recall for s in of_category]),
            "hit_rate": _mean([float(s.hit) for s in of_category]),
            "mrr": _mean([s.reciprocal_rank for s in of_category]),
        }
    return summary


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (fraction 0.95 = p95); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]
