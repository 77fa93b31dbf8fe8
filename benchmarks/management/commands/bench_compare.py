"""Two runs' answers compared question by question: the ``--details`` files of bench_search or bench_variants.

    python manage.py bench_compare BEFORE.jsonl AFTER.jsonl [--list N]

Reads two files of one line per question (benchmarks/locomo.py question_details), matched by set,
conversation and question, and prints per set and part: how many questions each file holds, how many have
other results (paths, lines or scores), how many gained and lost evidence recall, and the mean recall of
each. ``--list N`` also prints the N changed questions that moved recall most, with both runs' results.
A change meant to leave search as it was ("behaviour unchanged") shows 0 changed questions; the exit
status is 0 either way, and 2 when the files do not hold the same questions.
"""

import json
from collections import defaultdict
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError


def details_read(path: Path) -> dict[tuple, dict]:
    """The questions of a details file by (set, conversation, question); a question asked twice keeps its first line."""
    rows: dict[tuple, dict] = {}
    try:
        with open(path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    key = (row["set"], row["conversation"], row["question"])
                    row["score"]["recall"]
                except (ValueError, KeyError, TypeError) as exc:
                    raise CommandError(f"{path}, line {number}: not a question of a --details file ({exc})") from None
                rows.setdefault(key, row)
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from None
    return rows


def details_compare(before: dict[tuple, dict], after: dict[tuple, dict]) -> dict:
    """Per (set, part): questions, changed, won, lost, recall before and after; plus the changed keys and the
    keys found in one file only."""
    groups: dict[tuple[str, str], dict] = defaultdict(
        lambda: {"questions": 0, "changed": 0, "won": 0, "lost": 0, "recall_before": 0.0, "recall_after": 0.0}
    )
    changed = []
    for key in before.keys() & after.keys():
        a, b = before[key], after[key]
        group = groups[(key[0], a.get("part", ""))]
        group["questions"] += 1
        group["recall_before"] += a["score"]["recall"]
        group["recall_after"] += b["score"]["recall"]
        if a["results"] != b["results"]:
            group["changed"] += 1
            changed.append(key)
        delta = b["score"]["recall"] - a["score"]["recall"]
        if delta > 0:
            group["won"] += 1
        elif delta < 0:
            group["lost"] += 1
    for group in groups.values():
        if group["questions"]:
            group["recall_before"] /= group["questions"]
            group["recall_after"] /= group["questions"]
    only = sorted(before.keys() ^ after.keys())
    return {"groups": dict(sorted(groups.items())), "changed": changed, "only_in_one": only}


class Command(BaseCommand):
    help = "Compare two --details files of bench_search / bench_variants question by question."

    def add_arguments(self, parser):
        parser.add_argument("before", help="the first run's details file (DIR/<variant>.jsonl)")
        parser.add_argument("after", help="the second run's details file")
        parser.add_argument("--list", type=int, default=0, metavar="N", help="print the N changed questions that moved most")

    def handle(self, *args, **options):
        before, after = details_read(Path(options["before"])), details_read(Path(options["after"]))
        compared = details_compare(before, after)
        self.stdout.write(f"{'set':<10} {'part':<8} {'questions':>9} {'changed':>8} {'won':>5} {'lost':>5}  recall before → after")
        for (set_name, part), group in compared["groups"].items():
            self.stdout.write(
                f"{set_name:<10} {part:<8} {group['questions']:>9} {group['changed']:>8} {group['won']:>5} {group['lost']:>5}"
                f"  {group['recall_before']:.3f} → {group['recall_after']:.3f}"
            )
        total = sum(group["changed"] for group in compared["groups"].values())
        self.stdout.write(f"{total} of {len(before.keys() & after.keys())} questions have other results")
        moved = sorted(
            compared["changed"],
            key=lambda key: (-abs(after[key]["score"]["recall"] - before[key]["score"]["recall"]), key),
        )
        for key in moved[: options["list"]]:
            delta = after[key]["score"]["recall"] - before[key]["score"]["recall"]
            self.stdout.write(f"\n{delta:+.2f}  {key[0]} {key[1]}: {key[2]}")
            for label, row in (("before", before[key]), ("after", after[key])):
                places = ", ".join(f"{r['path']}:{r['start_line']}-{r['end_line']}" for r in row["results"])
                self.stdout.write(f"  {label:<6} {places}")
        if compared["only_in_one"]:
            self.stderr.write(f"{len(compared['only_in_one'])} questions are in one file only (first: {compared['only_in_one'][0]})")
            raise SystemExit(2)
