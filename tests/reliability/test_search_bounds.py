"""Issue 11, case 2: one file cannot make search explode, and no search outlives its deadline.

A file that is one long line is chunked into pieces that all cite that line. Snippets used to send the
whole line to Postgres once per candidate and walk the whole candidate pool; now a line longer than the
snippet budget is windowed before anything is sent, each line is sent at most once, and every query of
a search runs under a statement timeout within the search's deadline. Work is asserted in bytes sent to
Postgres and lines lexed, time only with bounds an order of magnitude apart.
"""

import threading
import time

import pytest
from django.db import connection

from indexing.chunking import chunk_markdown
from indexing.models import MemoryFile
from memoryhub.usage.services import FLUSHER_THREAD_NAME
from search.deadline import SearchDeadline, SearchTimedOut
from search.services import memory_search
from tests.search.conftest import index_files, notes  # noqa: F401 (fixtures)

pytestmark = pytest.mark.usefixtures("eager_tasks", "fake_embeddings")

WORDS = ["harbour", "ledger", "quartz", "meadow", "copper", "violet", "summit", "lantern", "orchard", "pebble"]


def one_line(chars: int) -> str:
    """One line of varied words with "zanzibar" every ~200 words, so many pieces of it match."""
    words, i = [], 0
    while sum(map(len, words)) + len(words) < chars:
        words.append("zanzibar" if i % 200 == 0 else f"{WORDS[(i * 7) % len(WORDS)]}{i % 997}")
        i += 1
    return " ".join(words)


def _text_bytes(value) -> int:
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, dict):
        return sum(_text_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_text_bytes(v) for v in value)
    return 0


class Sent:
    """What a block of code sends to Postgres: bytes of SQL and parameters, and the lines it asks lexemes for."""

    def __init__(self):
        self.bytes = 0
        self.lexed_lines: list[str] = []

    def __call__(self, execute, sql, params, many, context):
        self.bytes += len(sql.encode()) + _text_bytes(params)
        if "unnest(%s::text[])" in sql:  # search.keyword.lines_lexemes
            self.lexed_lines += params[1]
        return execute(sql, params, many, context)


@pytest.fixture
def long_line_agent(alice, index_files):
    line = one_line(150_000)
    index_files(alice, {
        "workspace/dump.json": line,
        "memory/trip.md": "# Trip\n\nWe flew to zanzibar in June.\nThe hotel was near the harbour.\n",
    })
    return alice, line


def test_a_one_line_file_is_chunked_into_pieces_that_cite_its_line():
    # The chunker met this already (indexing/chunking.py, "Over-long lines"); kept here as the first
    # half of the bound: no chunk of such a file is larger than a chunk.
    line = one_line(150_000)
    chunks = chunk_markdown("before\n" + line + "\nafter", max_tokens=400, overlap_tokens=80)
    pieces = [c for c in chunks if c.start_line == 2]
    assert len(pieces) > 50
    assert all(p.end_line == 2 and p.token_count <= 400 and p.text in line for p in pieces)


def test_a_search_of_a_one_line_file_sends_postgres_the_snippet_budget_not_the_line(long_line_agent, settings):
    alice, line = long_line_agent
    sent = Sent()
    with connection.execute_wrapper(sent):
        response = memory_search(agent=alice.agent, query="zanzibar", mode="keyword", max_results=6)
    budget = settings.MEMORYHUB_SEARCH_SNIPPET_CHARS
    from_dump = [r for r in response.results if r.path == "workspace/dump.json"]
    assert len(from_dump) == 1  # one line, shown once
    assert (from_dump[0].start_line, from_dump[0].end_line) == (1, 1)
    assert "zanzibar" in from_dump[0].snippet and len(from_dump[0].snippet) <= budget
    assert any(r.path == "memory/trip.md" for r in response.results)
    # Before: the 150 KB line went to Postgres once per candidate (tens of MB in all).
    assert max(map(len, sent.lexed_lines)) <= budget
    assert sent.bytes < 50_000, f"{sent.bytes} bytes sent for a {len(line)}-character line"


def test_each_line_is_lexed_at_most_once_per_search(long_line_agent):
    alice, _ = long_line_agent
    sent = Sent()
    with connection.execute_wrapper(sent):
        memory_search(agent=alice.agent, query="zanzibar harbour", mode="keyword", max_results=6)
    # Before: every candidate piece of the long line (and every second snippet) sent it again.
    assert len(sent.lexed_lines) == len(set(sent.lexed_lines)) <= 5, f"{len(sent.lexed_lines)} lines lexed"  # 5 in both files


# --- statement timeout and deadline ----------------------------------------------------------------


@pytest.mark.parametrize("awaiting_vectors", [False, True], ids=["indexed", "awaiting-vectors"])
def test_every_query_of_a_search_runs_under_the_statement_timeout(alice, index_files, notes, settings, awaiting_vectors):
    settings.MEMORYHUB_SEARCH_STATEMENT_TIMEOUT_MS = 1234
    index_files(alice, {"memory/notes.md": notes, "memory/later.md": "We deploy the billing service on Tuesdays.\n"})
    if awaiting_vectors:  # searchable by keyword, vectors still to come: the search also asks about batches
        MemoryFile.objects.filter(agent=alice.agent, path="memory/later.md").update(state=MemoryFile.State.INDEXING)
    # The model check's answer is read at most once a minute per process: read in this search too (as in
    # every test's first search: tests/conftest.py), since index_files searched nothing.
    timeouts = []

    def record(execute, sql, params, many, context):
        # The usage row written after the search (usage/services.py) is bookkeeping, not one of its queries.
        if "statement_timeout" not in sql and "usage_searchevent" not in sql and not sql.startswith(
            ("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK")
        ):
            timeouts.append((connection.connection.execute("SHOW statement_timeout").fetchone()[0], sql[:120]))
        return execute(sql, params, many, context)

    before = connection.connection.execute("SHOW statement_timeout").fetchone()[0]
    with connection.execute_wrapper(record):
        response = memory_search(agent=alice.agent, query="When do we deploy the billing service?")
    assert response.results
    assert ("file(s) are searchable by keyword only" in response.message) == awaiting_vectors
    assert len(timeouts) >= 4
    unbounded = [(t, sql) for t, sql in timeouts if not (t.endswith("ms") and 0 < int(t[:-2]) <= 1234)]
    assert not unbounded, unbounded
    # Nothing of it outlives the search in the caller's transaction.
    assert connection.connection.execute("SHOW statement_timeout").fetchone()[0] == before


def timeouts_of_statements(marker: str, search) -> tuple[list[str], object]:
    """The statement_timeout in force for each statement containing ``marker`` that ``search()`` runs,
    and its answer."""
    timeouts = []

    def record(execute, sql, params, many, context):
        if marker in sql:
            timeouts.append(connection.connection.execute("SHOW statement_timeout").fetchone()[0])
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        response = search()
    return timeouts, response


@pytest.mark.parametrize(
    "path, query, marker",
    [
        # The spread of a long query's results (search/fusion.py diversified) reads its candidates'
        # vector similarities in one more statement; the notes' sections are several candidates.
        ("memory/notes.md", "LONG", "<=> b.e"),
        # A question naming a date (search/dates.py) reads its candidates' file days in one more statement.
        ("memory/2026-03-03.md", "When did we deploy the billing service on 3 March, 2026?", "split_part(left(content"),
    ],
)
def test_the_long_query_and_dated_question_statements_run_under_the_statement_timeout_too(
    alice, index_files, notes, settings, path, query, marker
):
    settings.MEMORYHUB_SEARCH_STATEMENT_TIMEOUT_MS = 1234
    index_files(alice, {path: notes})
    query = " ".join(notes.split()[:120]) if query == "LONG" else query
    timeouts, response = timeouts_of_statements(marker, lambda: memory_search(agent=alice.agent, query=query))
    assert response.results
    assert timeouts == ["1234ms"]  # the statement ran, once, bounded like the others


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_each_statement_carries_the_timeout_in_its_own_round_trip(alice, index_files, notes, settings, monkeypatch):
    from django.db.backends.postgresql.base import Cursor

    settings.MEMORYHUB_SEARCH_STATEMENT_TIMEOUT_MS = 1234
    index_files(alice, {"memory/notes.md": notes})
    assert not connection.in_atomic_block  # as the API runs: autocommit
    # A first search opens the helper's connection (search/beside.py), whose set-up is no statement of a search.
    memory_search(agent=alice.agent, query="When do we deploy the billing service?")
    before = connection.connection.execute("SHOW statement_timeout").fetchone()[0]
    sent = []  # what reaches psycopg, one query string per round trip
    execute = Cursor.execute

    def record(cursor, query, *args, **kwargs):
        # The search's threads (the request's and a helper's), not the usage rows' flusher (usage/services.py).
        if threading.current_thread().name != FLUSHER_THREAD_NAME:
            sent.append(query)
        return execute(cursor, query, *args, **kwargs)

    monkeypatch.setattr(Cursor, "execute", record)

    response = memory_search(agent=alice.agent, query="When do we deploy the billing service?")
    monkeypatch.undo()
    assert response.results
    # The usage row (usage/services.py) is bookkeeping, not one of its queries (with
    # MEMORYHUB_USAGE_FLUSH_SECONDS = 0 it is written on the search's thread).
    statements = [query for query in sent if "usage_searchevent" not in query]
    assert len(statements) >= 4
    assert all(query.startswith("SET LOCAL statement_timeout = 1234; ") for query in statements), [q[:120] for q in statements if not q.startswith("SET LOCAL statement_timeout = 1234; ")]
    assert not any("set_config('statement_timeout'" in query for query in sent)  # no round trip to set or put back
    assert connection.connection.execute("SHOW statement_timeout").fetchone()[0] == before


@pytest.fixture
def short_bounds(settings):
    settings.MEMORYHUB_SEARCH_STATEMENT_TIMEOUT_MS = 500
    settings.MEMORYHUB_SEARCH_DEADLINE_MS = 2000


def test_a_blocked_keyword_search_answers_503_within_its_deadline(alice, index_files, notes, lock_table, short_bounds):
    index_files(alice, {"memory/notes.md": notes})
    lock_table("search_keywordagentstats")  # the keyword half reads it first
    started = time.monotonic()
    response = alice.client.post("/api/v1/search", {"query": "billing", "mode": "keyword"}, format="json")
    took = time.monotonic() - started
    assert response.status_code == 503, response.content
    assert response.json()["error"]["code"] == "search_timeout" and response["Retry-After"] == "1"
    assert took < 15, f"answered after {took:.1f} s"  # before: waited for the lock (30 s here, for ever in life)


# The file table is read by the search's first statement (its checks), the stats by the keyword half.
@pytest.mark.parametrize("table", ["indexing_memoryfile", "search_keywordagentstats"])
@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_a_blocked_search_answers_503_too(alice, index_files, notes, lock_table, short_bounds, table):
    index_files(alice, {"memory/notes.md": notes})
    lock_table(table)
    before = connection.connection.execute("SHOW statement_timeout").fetchone()[0]
    started = time.monotonic()
    response = alice.client.post("/api/v1/search", {"query": "billing", "mode": "keyword"}, format="json")
    assert response.status_code == 503, response.content
    assert time.monotonic() - started < 15
    # The connection is usable and its statement timeout is its own again.
    assert connection.connection.execute("SHOW statement_timeout").fetchone()[0] == before


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_a_blocked_usage_row_does_not_hold_the_answer_back(alice, index_files, notes, lock_table, short_bounds):
    index_files(alice, {"memory/notes.md": notes})
    lock_table("usage_searchevent")
    started = time.monotonic()
    response = alice.client.post("/api/v1/search", {"query": "billing"}, format="json")
    assert response.status_code == 200 and response.json()["results"]
    assert time.monotonic() - started < 15  # the row's statement is cancelled at the statement timeout, not the lock's 30 s


@pytest.mark.django_db(transaction=True)
def test_a_statement_that_cannot_carry_the_timeout_in_its_string_is_bounded_too(lock_table):
    # Several parameter sets (or server-side binding) cannot take the setting ahead of the statement in
    # one string: the statement runs in a transaction of its own after it.
    connection.ensure_connection()
    before = connection.connection.execute("SHOW statement_timeout").fetchone()[0]
    lock_table("usage_searchevent")
    started = time.monotonic()
    with pytest.raises(SearchTimedOut):
        with SearchDeadline(statement_timeout_ms=300).queries(), connection.cursor() as cursor:
            cursor.executemany("SELECT count(*) FROM usage_searchevent WHERE id > %s", [(0,), (1,)])
    assert time.monotonic() - started < 15
    assert connection.connection.execute("SHOW statement_timeout").fetchone()[0] == before


def test_a_hybrid_search_answers_what_it_has_when_one_half_is_blocked(alice, index_files, notes, lock_table, short_bounds):
    index_files(alice, {"memory/notes.md": notes})
    lock_table("search_keywordagentstats")
    started = time.monotonic()
    response = memory_search(agent=alice.agent, query="When do we deploy the billing service?")
    assert time.monotonic() - started < 15
    assert response.results and response.results[0].path == "memory/notes.md"
    assert response.mode == "vector"
    assert "time limit" in response.message


# --- a large file costs a search what a small one does ----------------------------------------------


class Statements:
    """The SQL statements a block of code sends, and the values Postgres sent back for each (as text)."""

    def __init__(self):
        self.sql: list[tuple[str, object]] = []
        self.received: list[list[bytes]] = []

    def __call__(self, execute, sql, params, many, context):
        self.sql.append((sql, params))
        result = execute(sql, params, many, context)
        pgresult = context["cursor"].cursor.pgresult  # what came back, before anyone fetches it
        values = []
        if pgresult is not None:
            for row in range(pgresult.ntuples):
                values += [pgresult.get_value(row, column) or b"" for column in range(pgresult.nfields)]
        self.received.append(values)
        return result


def test_hits_whose_lines_are_shown_cost_no_batch_of_queries(long_line_agent):
    alice, _ = long_line_agent
    statements = Statements()
    with connection.execute_wrapper(statements):
        response = memory_search(agent=alice.agent, query="zanzibar", mode="keyword", max_results=6)
    assert [r.path for r in response.results].count("workspace/dump.json") == 1
    # Every piece of the one line matches; once line 1 is shown, the others are dropped without reading
    # them in batches (before: a batch of queries per max_results pieces, through the whole pool).
    batches = [sql for sql, _ in statements.sql if "unnest(%s::text[])" in sql]
    assert len(batches) <= 2, f"{len(batches)} snippet batches"
    work = [sql for sql, _ in statements.sql if not sql.startswith(("SAVEPOINT", "RELEASE", "SELECT set_config", "SELECT current_setting"))]
    assert len(work) <= 12, "\n".join(sql[:80] for sql in work)


def test_a_file_larger_than_the_whole_file_limit_shows_its_chunks_text(long_line_agent, settings):
    alice, line = long_line_agent
    settings.MEMORYHUB_SEARCH_SNIPPET_FILE_MAX_BYTES = 10_000  # the 150 KB dump is large, trip.md small
    dump = alice.agent.files.get(path="workspace/dump.json")
    statements = Statements()
    with connection.execute_wrapper(statements):
        response = memory_search(agent=alice.agent, query="zanzibar", mode="keyword", max_results=6)
    by_path = {r.path: r for r in response.results}
    assert "zanzibar" in by_path["workspace/dump.json"].snippet
    assert (by_path["workspace/dump.json"].start_line, by_path["workspace/dump.json"].end_line) == (1, 1)
    assert by_path["workspace/dump.json"].snippet.strip("…") in line
    assert "zanzibar" in by_path["memory/trip.md"].snippet  # a small file is still read whole
    received = [value for values in statements.received for value in values]
    trip = alice.agent.files.get(path="memory/trip.md").content.encode()
    assert trip in received, "the small file's content is read"
    assert max(map(len, received)) < 10_000, "the large file was read whole"
    assert dump.size > 10_000
