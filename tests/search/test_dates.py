"""A question that names a date favours the files written then (search/dates.py): the spans a question
names, the day of a file, and the lift through memory_search on real Postgres."""

from datetime import date, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from search.dates import MAX_SPANS, file_day, in_spans, query_spans
from search.keyword import query_lexemes
from search.services import memory_search


@pytest.mark.parametrize(
    "question, spans",
    [
        ("What movie did Joanna watch on 1 May, 2022?", [(date(2022, 5, 1), date(2022, 5, 1), None)]),
        ("What painting did she show on October 13, 2023?", [(date(2023, 10, 13), date(2023, 10, 13), None)]),
        ("What did I decide on 2026-03-03?", [(date(2026, 3, 3), date(2026, 3, 3), None)]),
        ("Where did Joanna travel to in July 2022?", [(date(2022, 7, 1), date(2022, 7, 31), None)]),
        ("When did Melanie go camping in June?", [(None, None, 6)]),
        ("What happened on the 3rd of March?", [(None, None, 3)]),
        ("How often did she go to the beach in 2023?", [(date(2023, 1, 1), date(2023, 12, 31), None)]),
        ("When did Caroline go to the support group?", []),
        ("May I ask what you did at 10 pm?", []),  # "May" the verb, no month
        ("What happened on 31 June, 2023?", []),  # no such day
    ],
)
def test_a_question_names_days_months_and_years(question, spans):
    assert query_spans(question) == spans


FRIDAY = date(2026, 11, 27)


def _days(first: date, last: date) -> list:
    """A relative span as read: from a day early (an agent west of the server's UTC day) to its last day."""
    return [(first - timedelta(days=1), last, None)]


@pytest.mark.parametrize(
    "question, spans",
    [
        ("What did I cook yesterday?", _days(date(2026, 11, 26), date(2026, 11, 26))),
        ("What did we talk about last night?", _days(date(2026, 11, 26), date(2026, 11, 26))),
        ("What is on my list today?", _days(FRIDAY, FRIDAY)),
        ("What did I buy the day before yesterday?", _days(date(2026, 11, 25), date(2026, 11, 25))),
        ("What did I read 3 days ago?", _days(date(2026, 11, 24), date(2026, 11, 24))),
        ("Who called two weeks ago?", _days(date(2026, 11, 9), date(2026, 11, 15))),  # that week, Monday to Sunday
        ("What did we decide last week?", _days(date(2026, 11, 16), date(2026, 11, 22))),
        ("What have I fixed this week?", _days(date(2026, 11, 23), FRIDAY)),  # up to today
        ("What did we ship last month?", _days(date(2026, 10, 1), date(2026, 10, 31))),
        ("What happened a month ago?", _days(date(2026, 10, 1), date(2026, 10, 31))),
        ("Which bugs did I close this year?", _days(date(2026, 1, 1), FRIDAY)),
        ("What did I do last year?", _days(date(2025, 1, 1), date(2025, 12, 31))),
        ("What did I cook on Monday?", _days(date(2026, 11, 23), date(2026, 11, 23))),
        ("What did I cook last Friday?", _days(date(2026, 11, 20), date(2026, 11, 20))),  # not today
        ("What did I cook on Friday?", _days(FRIDAY, FRIDAY)),
        ("What did Melanie paint last May?", [(None, None, 5)]),  # a month's name: any year's May
        ("What did I learn 999 years ago?", []),
        ("When did Caroline go to the support group?", []),
    ],
)
def test_a_question_counts_days_back_from_today(question, spans):
    assert query_spans(question, today=FRIDAY) == spans


def test_relative_days_are_read_only_with_a_today():
    assert query_spans("What did I cook yesterday?") == []
    both = query_spans("Did I cook yesterday what I cooked on 1 May, 2022?", today=FRIDAY)
    assert both == _days(date(2026, 11, 26), date(2026, 11, 26)) + [(date(2022, 5, 1), date(2022, 5, 1), None)]


@pytest.mark.parametrize("month", ["September", "Sept", "Sep", "sept.", "SEPT"])
def test_every_spelling_of_a_month_the_pattern_reads_is_a_month(month):
    assert query_spans(f"What did we do on 3 {month} 2023?") == [(date(2023, 9, 3), date(2023, 9, 3), None)]
    assert query_spans(f"What did we do in {month}?") == [(None, None, 9)]


@given(
    st.text(alphabet=st.sampled_from(list("0123456789 ,.-thsndrJjanuaryMmayDdecSseptofinlst")), max_size=60)
    | st.lists(st.sampled_from(["last", "this", "on", "ago", "a", "999", "12", "day", "days", "week", "weeks", "month",
                                "months", "year", "years", "monday", "sunday", "yesterday", "today", "past"]), max_size=12)
    .map(" ".join),
    st.dates(min_value=date(1901, 1, 1), max_value=date(2200, 12, 31)),
)
def test_any_text_reads_as_spans_without_an_error(text, today):
    for first, last, month in query_spans(text, today=today):
        assert (first is None) == (last is None) == (month is not None)
        assert month is None or 1 <= month <= 12
        assert first is None or first <= last


def test_a_text_naming_many_dates_gives_each_once_and_a_bounded_number():
    assert query_spans("in June, and again in June and in june") == [(None, None, 6)]
    many = " ".join(f"on {day} May, 2023" for day in range(1, 32))
    spans = query_spans(many)
    assert len(spans) == MAX_SPANS and spans[0] == (date(2023, 5, 1), date(2023, 5, 1), None)


def test_a_file_is_dated_by_its_path_or_else_its_title_line():
    assert file_day("memory/2026-03-03.md", "# Notes") == date(2026, 3, 3)
    assert file_day("memory/events/2023-05-08-001.md", "") == date(2023, 5, 8)
    assert file_day("memory/session-10.md", "# Session 10 (7:33 pm on 2 May, 2022)") == date(2022, 5, 2)
    assert file_day("memory/note.md", "# 8 May, 2023") == date(2023, 5, 8)
    assert file_day("MEMORY.md", "# Long-term memory") is None
    assert file_day("memory/2026-02-30.md", "") is None  # no such day, no title date either
    # A dated memory file, as the recency boost reads it: under memory/, a markdown file.
    assert file_day("notes/2023-05-08.md", "") is None and file_day("memory/2023-05-08.txt", "") is None


def test_a_file_tells_of_a_span_written_in_it_or_shortly_after():
    may_first = [(date(2022, 5, 1), date(2022, 5, 1), None)]
    assert in_spans(date(2022, 5, 1), may_first, after_days=14)
    assert in_spans(date(2022, 5, 15), may_first, after_days=14)  # "two weeks ago I ..."
    assert not in_spans(date(2022, 5, 16), may_first, after_days=14)
    assert not in_spans(date(2022, 4, 30), may_first, after_days=14)  # written before it happened
    june = [(None, None, 6)]  # any year's June
    assert in_spans(date(2021, 6, 30), june, after_days=0) and in_spans(date(2023, 7, 5), june, after_days=7)
    assert not in_spans(date(2023, 7, 8), june, after_days=7)


# Two sessions tell the same words on different days; the third is about something else.
SESSIONS = {
    "memory/session-01.md": "# Session 1 (1:56 pm on 8 May, 2023)\n\nAna: We watched a movie at the cinema last night.\n",
    "memory/session-02.md": "# Session 2 (7:10 pm on 2 July, 2023)\n\nAna: We watched a movie at the cinema last night.\n",
    "memory/session-03.md": "# Session 3 (9:00 am on 4 August, 2023)\n\nBen: The garden needs water, and Ana agrees.\n",
}


def test_a_question_naming_a_date_favours_the_file_written_then(alice, index_files):
    index_files(alice, SESSIONS)
    undated = memory_search(agent=alice.agent, query="What movie did Ana watch?", max_results=2, explain=True)
    assert {r.path for r in undated.results} == {"memory/session-01.md", "memory/session-02.md"}
    assert all("date_match" not in r.explain for r in undated.results)

    dated = memory_search(agent=alice.agent, query="What movie did Ana watch on 30 June, 2023?", max_results=2, explain=True)
    first, second = dated.results
    assert first.path == "memory/session-02.md" and first.explain["date_match"] is True
    assert second.path == "memory/session-01.md" and second.explain["date_match"] is False
    assert 0 < second.score < first.score <= 1


def test_a_question_about_yesterday_favours_yesterdays_note(alice, index_files):
    today = datetime.now(timezone.utc).date()
    note = "# Notes\n\nCooked a mushroom risotto for dinner with the neighbours.\n"
    index_files(alice, {f"memory/{today - timedelta(days=1)}.md": note, f"memory/{today - timedelta(days=10)}.md": note})
    response = memory_search(agent=alice.agent, query="What did I cook for dinner yesterday?", max_results=2, explain=True)
    first, second = response.results
    assert first.path == f"memory/{today - timedelta(days=1)}.md" and first.explain["date_match"] is True
    assert second.explain["date_match"] is False and second.score < first.score


def test_the_date_weight_is_off_at_zero_and_the_dates_query_is_bounded(alice, index_files, settings, monkeypatch):
    from search import services
    from search.deadline import SearchTimedOut

    index_files(alice, SESSIONS)
    settings.MEMORYHUB_SEARCH_DATE_BOOST = 0
    off = memory_search(agent=alice.agent, query="What movie did Ana watch on 30 June, 2023?", max_results=2, explain=True)
    assert off.results[0].path == "memory/session-01.md"  # the fusion's order: the date is not read
    assert all("date_match" not in r.explain for r in off.results)

    settings.MEMORYHUB_SEARCH_DATE_BOOST = 0.3

    def too_slow(**kwargs):
        raise SearchTimedOut

    monkeypatch.setattr(services, "_file_days", too_slow)  # out of time: the scores stay as fused
    late = memory_search(agent=alice.agent, query="What movie did Ana watch on 30 June, 2023?", max_results=2, explain=True)
    assert [(r.path, r.score) for r in late.results] == [(r.path, r.score) for r in off.results]


def test_a_large_files_title_is_not_read_for_its_date(alice, index_files, settings):
    settings.MEMORYHUB_SEARCH_SNIPPET_FILE_MAX_BYTES = 10  # every session file is larger
    index_files(alice, SESSIONS)
    response = memory_search(agent=alice.agent, query="What movie did Ana watch on 30 June, 2023?", max_results=3, explain=True)
    assert response.results and all("date_match" not in r.explain for r in response.results)


def test_a_pasted_text_naming_a_date_is_not_a_question_about_it(alice, index_files, settings):
    """From MEMORYHUB_SEARCH_DATE_MAX_LEXEMES distinct words on, a query is a pasted stretch of text: the
    dates it names are what it talks about, and its candidates stay as fused."""
    index_files(alice, SESSIONS)
    question = "What movie did Ana watch on 30 June, 2023?"
    settings.MEMORYHUB_SEARCH_DATE_MAX_LEXEMES = len(query_lexemes(question)) + 1
    asked = memory_search(agent=alice.agent, query=question, max_results=2, explain=True)
    assert asked.results[0].path == "memory/session-02.md" and asked.results[0].explain["date_match"] is True

    settings.MEMORYHUB_SEARCH_DATE_MAX_LEXEMES = len(query_lexemes(question))  # as long as a pasted text
    pasted = memory_search(agent=alice.agent, query=question, max_results=2, explain=True)
    assert pasted.results[0].path == "memory/session-01.md"  # the fusion's order
    assert all("date_match" not in r.explain for r in pasted.results)
