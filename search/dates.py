"""Dates named by a question, and the date of a memory file, for questions about a time.

"What movie did Joanna watch on 1 May, 2022?" is answered by a turn that says "last night"; only its
file says when: a dated note's path (``memory/2022-05-02.md``) or its title line ("# Session 10 (7:33 pm
on 2 May, 2022)", "# 2 May, 2022"). A question that names a day, a month or a year asks about the files
written in that span or shortly after it (what happened is told on the day or in the following days).

``query_spans`` reads the spans a question names, or counts from today ("yesterday", "last week");
``file_day`` the day of a file (``path_day`` that of a
dated memory file, which the recency boost reads too); ``in_spans`` whether a file's day falls in one of
them, allowing ``after_days`` for the telling.
"""

from __future__ import annotations

import calendar
import re
from datetime import date, timedelta

MONTHS = {name.lower(): number for number, name in enumerate(calendar.month_name) if name}
MONTHS.update({name.lower(): number for number, name in enumerate(calendar.month_abbr) if name})
MONTHS["sept"] = 9
_MONTH = r"(january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d\d)"
# Longest forms first: each match is taken out of the text before the shorter forms are looked for.
_FORMS = [
    ("dmy", re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}\.?,?\s+{_YEAR}\b")),
    ("mdy", re.compile(rf"\b{_MONTH}\.?\s+{_DAY},?\s+{_YEAR}\b")),
    ("iso", re.compile(r"\b((?:19|20)\d\d)-(\d\d)-(\d\d)\b")),
    ("my", re.compile(rf"\b{_MONTH}\.?,?\s+(?:of\s+)?{_YEAR}\b")),
    ("dm", re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}\b")),
    ("md", re.compile(rf"\b{_MONTH}\.?\s+{_DAY}\b(?!\s*(?:am|pm|%|:))")),
    ("m", re.compile(rf"\b(?:in|during|of|since|by|before|after|early|late|mid|last|this)\s+(?:mid-)?{_MONTH}\b")),
    ("y", re.compile(rf"\b(?:in|during|of|since|by)\s+{_YEAR}\b")),
]
# Days counted back from today. The word "last" before a month is the month form's ("last May": any year's).
_COUNT = r"(\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_COUNTS = {word: n for n, word in enumerate(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
                                              "nine", "ten", "eleven", "twelve"])} | {"a": 1, "an": 1}
_WEEKDAY = r"(monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_WEEKDAYS = {name.lower(): number for number, name in enumerate(calendar.day_name)}
_RELATIVE = [
    ("before_yesterday", re.compile(r"\bthe day before yesterday\b")),
    ("ago", re.compile(rf"\b{_COUNT}\s+(day|week|month|year)s?\s+ago\b")),
    ("yesterday", re.compile(r"\b(?:yesterday|last night)\b")),
    ("today", re.compile(r"\b(?:today|tonight|this (?:morning|afternoon|evening))\b")),
    ("this", re.compile(r"\bthis (week|month|year)\b")),
    ("last", re.compile(r"\b(?:last|previous|past) (week|month|year)\b")),
    ("weekday", re.compile(rf"\b(last|on|this past) {_WEEKDAY}\b")),
]
# A dated memory file (memory/YYYY-MM-DD.md, memory/events/YYYY-MM-DD-003.md): the recency boost's too.
_DATED_MEMORY = re.compile(r"(?:^|/)memory/(?:.*/)?(\d{4})-(\d{2})-(\d{2})[^/]*\.md$")
_TITLE_DAY = re.compile(rf"{_DAY}\s+{_MONTH},?\s+{_YEAR}", re.IGNORECASE)

# (first day, last day, month) — month set and days None for "in July" without a year: any year's July.
Span = tuple[date | None, date | None, int | None]
# A question names a few dates; a pasted text may repeat hundreds, and each candidate is checked against
# every span: the distinct spans are kept, the first MAX_SPANS of them.
MAX_SPANS = 16


def _month_end(year: int, month: int) -> date:
    return date(year, month, calendar.monthrange(year, month)[1])


def _months_back(day: date, months: int) -> tuple[int, int]:
    index = day.year * 12 + day.month - 1 - months
    return index // 12, index % 12 + 1


def relative_spans(text: str, *, today: date) -> tuple[list[Span], str]:
    """The spans of the days a lower-case question counts from ``today`` ("yesterday", "3 days ago", "last
    week", "on Monday": the last Monday up to today), and the text without them. Each span starts a day
    early: ``today`` is the server's (UTC), and an agent west of it names its notes by a day before."""
    spans: list[Span] = []
    for form, pattern in _RELATIVE:
        for match in pattern.finditer(text):
            groups = match.groups()
            if form == "before_yesterday":
                first = last = today - timedelta(days=2)
            elif form == "yesterday":
                first = last = today - timedelta(days=1)
            elif form == "today":
                first = last = today
            elif form == "weekday":
                back = (today.weekday() - _WEEKDAYS[groups[1]]) % 7
                first = last = today - timedelta(days=back or (7 if groups[0] == "last" else 0))
            else:
                count = 0 if form == "this" else 1
                unit = groups[0]
                if form == "ago":
                    count, unit = (int(groups[0]) if groups[0].isdigit() else _COUNTS[groups[0]]), groups[1]
                if unit == "day":
                    first = last = today - timedelta(days=count)
                elif unit == "week":  # Monday to Sunday
                    first = today - timedelta(days=today.weekday() + 7 * count)
                    last = first + timedelta(days=6)
                elif unit == "month":
                    year, month = _months_back(today, count)
                    first, last = date(year, month, 1), _month_end(year, month)
                else:
                    first, last = date(today.year - count, 1, 1), date(today.year - count, 12, 31)
            if first.year < 1900:  # "999 years ago"
                continue
            spans.append((first - timedelta(days=1), min(last, today), None))
        text = pattern.sub(" ", text)
    return spans, text


def query_spans(query: str, *, today: date | None = None) -> list[Span]:
    """The days, months and years a question names, as distinct spans (at most MAX_SPANS); [] when it
    names none. With ``today``, also the days it counts from today (``relative_spans``)."""
    text = query.lower()
    spans: list[Span] = []
    if today is not None:
        spans, text = relative_spans(text, today=today)
    for form, pattern in _FORMS:
        for match in pattern.finditer(text):
            groups = match.groups()
            try:
                if form == "dmy":
                    day = date(int(groups[2]), MONTHS[groups[1]], int(groups[0]))
                    spans.append((day, day, None))
                elif form == "mdy":
                    day = date(int(groups[2]), MONTHS[groups[0]], int(groups[1]))
                    spans.append((day, day, None))
                elif form == "iso":
                    day = date(int(groups[0]), int(groups[1]), int(groups[2]))
                    spans.append((day, day, None))
                elif form == "my":
                    year, month = int(groups[1]), MONTHS[groups[0]]
                    spans.append((date(year, month, 1), _month_end(year, month), None))
                elif form in ("dm", "md"):
                    day, month = (groups[0], groups[1]) if form == "dm" else (groups[1], groups[0])
                    if not 1 <= int(day) <= 31:
                        continue
                    spans.append((None, None, MONTHS[month]))
                elif form == "m":
                    spans.append((None, None, MONTHS[groups[0]]))
                else:
                    year = int(groups[0])
                    spans.append((date(year, 1, 1), date(year, 12, 31), None))
            except ValueError:  # "31 June"
                continue
        text = pattern.sub(" ", text)
    return list(dict.fromkeys(spans))[:MAX_SPANS]


def path_day(path: str) -> date | None:
    """The day of a dated memory file (``memory/YYYY-MM-DD.md``, in any folder under memory/), or None."""
    match = _DATED_MEMORY.search(path)
    if not match:
        return None
    try:
        return date(*(int(part) for part in match.groups()))
    except ValueError:
        return None


def file_day(path: str, title: str) -> date | None:
    """The day a file was written: its path's (``path_day``), else the last "D Month, YYYY" of its title."""
    day = path_day(path)
    if day is not None:
        return day
    found = _TITLE_DAY.findall(title or "")
    if found:
        day, month, year = found[-1]
        try:
            return date(int(year), MONTHS[month.lower()], int(day))
        except ValueError:
            return None
    return None


def in_spans(day: date, spans: list[Span], *, after_days: int) -> bool:
    """Whether a file written on ``day`` tells of one of the spans: written within it, or at most
    ``after_days`` after its end (for a month without a year: any year's)."""
    for first, last, month in spans:
        if month is not None:
            for year in (day.year, day.year - 1):
                try:
                    first_day, last_day = date(year, month, 1), _month_end(year, month)
                except ValueError:
                    continue
                if first_day <= day <= last_day + timedelta(days=after_days):
                    return True
        elif first <= day <= last + timedelta(days=after_days):
            return True
    return False
