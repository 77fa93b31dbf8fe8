"""What the derived checks of this folder (observations_check.py, daily_notes_check.py) share: the dates
of LoCoMo's sessions, the keys of its ``observation`` field, and running ``manage.py bench_variants`` on
a set built from each conversation of the LoCoMo file instead of the dev sets. Django must be set up
before this is imported (each check does it first: it is run as a script)."""

import json
import re
from collections.abc import Callable
from datetime import date, datetime

from django.core.management import call_command

import benchmarks.management.commands.bench_variants as bench_variants
from benchmarks.bench_data import DevSet, locomo_part
from benchmarks.locomo import Conversation

OBSERVATION = re.compile(r"session_(\d+)_observation")


def session_day(text: str) -> date:
    """'1:56 pm on 8 May, 2023' -> 2023-05-08."""
    day = text.split(" on ", 1)[-1]
    return datetime.strptime(" ".join(day.replace(",", " ").split()), "%d %B %Y").date()


def bench_variants_on_locomo(
    argv: list[str], *, name: str, categories: dict, load: Callable[[dict, str], Conversation]
) -> None:
    """``manage.py bench_variants`` with ``argv``, asking ``load(sample, part)`` of every conversation of
    the LoCoMo file (any other file, the meetings', gives no set), reported as set ``name``."""

    def dev_sets_load(path, **_):
        with open(path) as file:
            data = json.load(file)
        if not isinstance(data, list):
            return []
        conversations = [load(sample, locomo_part(index)) for index, sample in enumerate(data)]
        return [DevSet(name=name, categories=categories, conversations=conversations)]

    bench_variants.dev_sets_load = dev_sets_load
    call_command("bench_variants", *argv)
