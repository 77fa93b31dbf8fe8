"""python manage.py bench_scale — search latency and vector recall on a large synthetic corpus.

Builds a throw-away database (``--database``, on the same server as the configured one) holding one big
agent (``--big`` chunks) and ``--agents - 1`` others sharing the rest of ``--chunks`` (log-normal sizes),
each chunk a line of Zipf-distributed pseudo-words with a clustered, unit-length ``--dims`` vector.
Rows are loaded with COPY (binary for the vectors) with the chunk table's secondary indexes dropped and
rebuilt afterwards, then the per-agent HNSW indexes and the keyword stats of large agents are built by
the `vector_indexes` and `keyword_stats` tasks' code.

It reports load and index build times, database size, and for a big, a middle and a small agent:
vector recall@10 of `search.vector.vector_candidates` against exact search, and p50/p95 latency of the
vector half, the keyword half and — when `search.services.memory_search` exists — each search mode end
to end, then hybrid memory_search against the sum of its halves (timed alone with the benchmark's 10 /
50 candidates, and with the candidate pool memory_search asks each of them for) and the same search
through POST /api/v1/search (Django's test client: the request stack without a socket), and hybrid
memory_search with keyword expansion off and run for every rare word (the measured agents' words read
and embedded by the `memory_words` task's code first). Query embeddings are precomputed (the embedding
call is excluded; a question's words for expansion get the fake provider's vectors). ``--catalog N`` then gives N more agents a
GIN and an HNSW partial index each and measures the big agent again (hybrid search, planning, a new
connection's first statement, a COPY of 7,000 rows): what one table with thousands of partial indexes
costs. For the big agent, the keyword half's top 10 is compared with an unbounded exact BM25 for each
``--keyword-budgets`` value, and its time with the same ranking computed in process by bm25s over the
same chunks' lexemes (the issue's yardstick: the keyword half within 2× of bm25s). The database is dropped at the end unless ``--keep``.

    python manage.py bench_scale                               # the figures of docs/benchmarks.md: 1M chunks, 1,000 agents
    python manage.py bench_scale --chunks 20000 --agents 20 --big 8000 --min-chunks 2000   # seconds
    python manage.py bench_scale --chunks 100000 --agents 20 --big 50000 --catalog 1000     # the catalog's cost
"""

import gc
import hashlib
import json
import math
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

IDENTITY_PROVIDER, IDENTITY_MODEL = "fake", "bench-synthetic"
QUERY_SKIPPED_RANKS = 50
FILE_CHUNKS = 20  # chunks per synthetic file; a chunk is one line of its file
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "gi", "ha", "ju", "be", "fy", "ro", "mu"]


# How many exact BM25 scores are read per query for the tie-aware overlap: every chunk tied with the
# 10th must be among them (a result beyond them scores at most the last one read).
EXACT_TIE_DEPTH = 5000
# Hybrid searches timed beside the default one (report_expansion): keyword expansion off, and run for every
# question word rare enough whatever its neighbours' similarity.
EXPANSION_VARIANTS = {
    "expansion_off": {"MEMORYHUB_SEARCH_EXPANSION_WEIGHT": 0.0},
    "expansion_all": {"MEMORYHUB_SEARCH_EXPANSION_MIN_SIMILARITY": 0.0},
}


def _reaches(score: float, tenth: float) -> bool:
    """Whether an exact score reaches the 10th (float8 sums of the same terms: equal up to rounding)."""
    return score >= tenth - 1e-9 * max(1.0, abs(tenth))


@dataclass(frozen=True)
class ExactTop:
    top10: list[int]
    scores: dict[int, float]  # chunk id -> exact BM25, the EXACT_TIE_DEPTH best
    tenth: float  # the exact 10th score (the last one when fewer than 10 chunks match)
    truncated: bool  # the chunks read all reach the 10th score: ties may go on past them

    def tie_aware_overlap(self, found: list[int]) -> float:
        """Share of the exact top 10's size that ``found`` fills with chunks scoring at least the 10th."""
        if not self.top10:
            return 1.0 if not found else 0.0
        reached = 0
        for chunk_id in found[: len(self.top10)]:
            score = self.scores.get(chunk_id)
            if score is not None and _reaches(score, self.tenth):
                reached += 1
            elif score is None and self.truncated:
                reached += 1
        return reached / len(self.top10)


def bm25s_version() -> str:
    from importlib.metadata import version

    return version("bm25s")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


class Command(BaseCommand):
    help = "Scale benchmark of search: synthetic corpus, vector recall@10 vs exact, p50/p95 of each half and mode."

    def add_arguments(self, parser):
        parser.add_argument("--chunks", type=int, default=1_000_000, help="Chunks in the database, all agents (default 1,000,000).")
        parser.add_argument("--agents", type=int, default=1000, help="Agents, the big one included (default 1,000).")
        parser.add_argument("--big", type=int, default=100_000, help="Chunks of the big agent (default 100,000).")
        parser.add_argument("--dims", type=int, default=384, help="Vector dimensions (default 384).")
        parser.add_argument("--queries", type=int, default=50, help="Queries per agent and measurement (default 50).")
        parser.add_argument("--words", type=int, default=40, help="Words per chunk (default 40).")
        parser.add_argument("--min-chunks", type=int, default=None, help="Override MEMORYHUB_VECTOR_HNSW_MIN_CHUNKS.")
        parser.add_argument("--database", default="memoryhub_bench_scale", help="Throw-away database to build (dropped first).")
        parser.add_argument("--keep", action="store_true", help="Keep the database afterwards (drop it by hand).")
        parser.add_argument(
            "--keyword-budgets", default="100,300,1000",
            help="SCORE_BUDGET values whose top 10 is compared with exact BM25 for the big agent (comma-separated).",
        )
        parser.add_argument(
            "--catalog", type=int, default=0,
            help="Catalog mode: after the other figures, give this many more agents a GIN and an HNSW partial index "
            "of their own (as keyword_stats and vector_indexes do for large agents) and measure the big agent again "
            "(0 = off).",
        )
        parser.add_argument(
            "--catalog-rounds", type=int, default=1,
            help="Catalog mode: measure without and with the extra indexes this many times, alternating (the "
            "indexes are dropped and rebuilt between rounds: cheap on a partitioned table, minutes on one table).",
        )
        parser.add_argument(
            "--build-probe", default="",
            help="Build-probe mode, instead of everything else: grow the table to each of these row counts "
            "(comma-separated, e.g. 100000,1000000; 1,000 more agents per step) and time the GIN and HNSW index "
            "builds of a new agent of --probe-chunks chunks at each.",
        )
        parser.add_argument("--probe-chunks", type=int, default=5000, help="Chunks of the build probe's agent (default 5,000).")
        parser.add_argument("--seed", type=int, default=20261123)

    def handle(self, *args, **options):
        try:
            import numpy  # noqa: F401
        except ImportError:
            raise CommandError("bench_scale needs numpy: pip install -e '.[dev]'") from None
        if options["big"] >= options["chunks"] or options["agents"] < 3:
            raise CommandError("need --big < --chunks and at least 3 agents")
        settings.MEMORYHUB_EMBEDDING_PROVIDER = IDENTITY_PROVIDER
        settings.MEMORYHUB_EMBEDDING_MODEL = IDENTITY_MODEL
        settings.MEMORYHUB_EMBEDDING_DIMENSIONS = options["dims"]
        if options["min_chunks"] is not None:
            settings.MEMORYHUB_VECTOR_HNSW_MIN_CHUNKS = options["min_chunks"]
        self.options = options
        with self.bench_database(options["database"], keep=options["keep"]):
            self.run()

    # --- the throw-away database -------------------------------------------------------------------

    @contextmanager
    def bench_database(self, name: str, *, keep: bool):
        if not name.replace("_", "").isalnum():
            raise CommandError("--database: letters, digits and _ only")
        original = connection.settings_dict["NAME"]
        if name == original:
            raise CommandError("--database must differ from the configured database")
        self._drop_create(name, create=True)
        connection.close()
        connection.settings_dict["NAME"] = name
        try:
            call_command("migrate", verbosity=0)
            yield
        finally:
            connection.close()
            connection.settings_dict["NAME"] = original
            if keep:
                self.stdout.write(f"kept database {name} (DROP DATABASE {name}; when done)")
            else:
                self._drop_create(name, create=False)
                self.stdout.write(f"dropped database {name}")

    def _drop_create(self, name: str, *, create: bool) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            if create:
                cursor.execute(f'CREATE DATABASE "{name}"')

    # --- the run -----------------------------------------------------------------------------------

    def run(self):
        import numpy as np

        from search.vector import vector_plan
        from search.vector_index import vector_indexes_sync

        opts = self.options
        rng = np.random.default_rng(opts["seed"])
        if opts["build_probe"]:
            self.vocabulary = self.make_vocabulary(rng)
            self.build_probe(rng, [int(n) for n in opts["build_probe"].split(",") if n.strip()])
            return
        sizes = self.agent_sizes(rng)
        self.vocabulary = self.make_vocabulary(rng)
        agent_ids = self.create_agents(len(sizes))
        self.out(f"corpus: {sum(sizes):,} chunks, {len(sizes):,} agents (big {sizes[0]:,}, "
                 f"median {int(statistics.median(sizes)):,}), {opts['dims']} dims, {opts['words']} words per chunk")

        dropped = self.drop_chunk_indexes()
        started = time.monotonic()
        centers = self.load(rng, agent_ids, sizes)
        load_seconds = time.monotonic() - started
        self.out(f"load (COPY): {load_seconds:.1f} s ({sum(sizes) / load_seconds:,.0f} chunks/s)")

        started = time.monotonic()
        with connection.cursor() as cursor:
            cursor.execute("SET maintenance_work_mem = '1GB'")
            for name, definition in dropped:
                cursor.execute(definition)
            btree_gin_seconds = time.monotonic() - started
            cursor.execute("ANALYZE")
        self.out(f"btree + GIN indexes ({', '.join(name for name, _ in dropped)}): {btree_gin_seconds:.1f} s")

        started = time.monotonic()
        with connection.cursor() as cursor:
            cursor.execute("SET maintenance_work_mem = '1GB'")
        outcome = vector_indexes_sync()
        hnsw_seconds = time.monotonic() - started
        big_index = next((s for n, s in outcome.seconds.items() if n.startswith(f"chunk_hnsw_a{agent_ids[0]}_")), 0.0)
        self.out(f"HNSW indexes: {len(outcome.created)} agents with >= {settings.MEMORYHUB_VECTOR_HNSW_MIN_CHUNKS:,} chunks "
                 f"in {hnsw_seconds:.1f} s (big agent's alone {big_index:.1f} s)")
        from search.keyword_stats import keyword_stats_sync

        started = time.monotonic()
        stats = keyword_stats_sync()
        big_gin = stats.index_seconds.get(f"chunk_gin_a{agent_ids[0]}", 0.0)
        self.out(f"keyword stats (per-lexeme df) and GIN indexes: {len(stats.refreshed)} agents with > "
                 f"{settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS:,} chunks in {time.monotonic() - started:.1f} s "
                 f"(stats {sum(stats.seconds.values()):.1f} s, indexes {sum(stats.index_seconds.values()):.1f} s; "
                 f"big agent's index alone {big_gin:.1f} s)")
        # A live table is vacuumed by autovacuum as it grows; a freshly COPY'd one is not, and autovacuum
        # would start on it in the middle of the measurements (and every first read sets hint bits).
        started = time.monotonic()
        with connection.cursor() as cursor:
            cursor.execute("VACUUM (ANALYZE) indexing_chunk")
            cursor.execute("VACUUM (ANALYZE) indexing_memoryfile")
        self.out(f"VACUUM (ANALYZE) of the chunk and file tables: {time.monotonic() - started:.1f} s")
        self.report_sizes()

        # The big agent, the largest of the others (HNSW if above the threshold), and a median one (exact).
        order = sorted(range(1, len(sizes)), key=lambda i: sizes[i])
        picks = [("big", 0), ("middle", order[-1]), ("small", order[len(order) // 2])]
        self.searcher = self.end_to_end_searcher()
        if self.searcher is not None:
            self.memory_words([agent_ids[position] for _, position in picks])
        gc.freeze()  # as memoryhub/wsgi.py does after start-up: no full collection of start-up objects mid-search
        rows = []
        self.measured = [agent_ids[position] for _, position in picks]
        for label, position in picks:
            agent_id, size = agent_ids[position], sizes[position]
            queries = self.query_vectors(rng, centers[position], opts["queries"])
            texts = self.query_texts(rng, opts["queries"])
            plan = vector_plan(
                agent_id=agent_id, dimensions=opts["dims"], identity_key=self.identity_key, filters=self.no_filters(), limit=10
            ).kind
            recall = self.recall(agent_id, queries)
            row = {"agent": f"{label} ({size:,} chunks, {plan})", "recall": recall}
            # Each query through every measured function, query by query in a rotating order, after one
            # untimed pass of all of them: every timing is of a query whose pages the server has read before
            # (a query's first run costs more: with the default 128 MB of shared_buffers its pages come
            # from the OS cache), so a search and its halves are compared in the same state and load.
            pairs = list(zip(texts, queries))
            functions = {
                "vector": lambda pair: self.vector_half(agent_id, pair[1]),
                "keyword": lambda pair: self.keyword_half(agent_id, pair[0]),
            }
            if self.searcher is not None:
                for mode in ("hybrid", "vector", "keyword"):
                    functions[f"e2e_{mode}"] = lambda pair, mode=mode: self.searcher(agent_id, pair, mode)
                # Keyword expansion (search/expansion.py): off, and with every rare word brought its 3 nearest
                # words whatever their similarity (these pseudo-words have no meaning: few are within the
                # default 0.6), so that the second keyword query runs for nearly every question.
                for name, values in EXPANSION_VARIANTS.items():
                    functions[name] = lambda pair, values=values: self.searcher(agent_id, pair, "hybrid", values)
                # The halves as memory_search runs them (its candidate pool), and the same search over HTTP.
                functions["vector_pool"] = lambda pair: self.vector_half(agent_id, pair[1], limit=self.pool)
                functions["keyword_pool"] = lambda pair: self.keyword_half(agent_id, pair[0], limit=self.pool)
                functions["http"] = self.http_searcher(agent_id)
            row.update(zip(functions, self.timed_alternately(list(functions.values()), pairs, warm_all=True)))
            rows.append(row)
        self.report(rows)
        if self.searcher is not None:
            self.report_overhead(rows)
            self.report_expansion(rows)

        # Filtered vector searches of the big agent: a selective filter (searched exactly) and a broad one
        # (HNSW with the filter; without iterative scans, with a proportionally larger ef_search).
        from indexing.attributes import AttributeFilter
        from search.types import SearchFilters

        agent_id = agent_ids[0]
        queries = self.query_vectors(rng, centers[0], opts["queries"])
        self.out("")
        self.out("| big agent, vector half with a filter | plan | recall@10 | p50 / p95 |")
        self.out("|---|---|---|---|")
        from search.vector import _count_matching

        for label, filters in (
            ("path_prefix memory/000/", SearchFilters(path_prefix="memory/000/")),
            ("sources workspace", SearchFilters(sources=("workspace",))),
            ("attribute rank eq 0", SearchFilters(attributes=AttributeFilter.parse({"type": "eq", "key": "rank", "value": 0}))),
            (
                "attributes team in [t0, t1] and rank lt 8",
                SearchFilters(attributes=AttributeFilter.parse({"type": "and", "filters": [
                    {"type": "in", "key": "team", "value": ["t0", "t1"]}, {"type": "lt", "key": "rank", "value": 8},
                ]})),
            ),
        ):
            kept = _count_matching(
                agent_id=agent_id, dims=opts["dims"], identity_key=self.identity_key, filters=filters, cap=sizes[0]
            )
            label += f" ({kept / sizes[0]:.0%} of its chunks)"
            plan = vector_plan(agent_id=agent_id, dimensions=opts["dims"], identity_key=self.identity_key, filters=filters, limit=10)
            recall = self.recall(agent_id, queries, filters)
            timings = self.timed(lambda q: self.vector_half(agent_id, q, filters), queries)
            self.out(f"| {label} | {plan.kind}, ef_search {plan.ef_search or '-'} | {recall:.3f} | {self.p(timings)} |")

        self.keyword_budgets(agent_id, self.query_texts(rng, opts["queries"]))
        if opts["catalog"]:
            self.catalog(rng, agent_ids[0], centers[0], opts["catalog"])

    # --- build-probe mode --------------------------------------------------------------------------

    PROBE_FILLER_AGENTS = 1000

    def build_probe(self, rng, targets: list[int]) -> None:
        """How long one --probe-chunks agent's GIN and HNSW index builds take (the services' own DDL, built
        CONCURRENTLY as the tasks build them) when the table holds each of ``targets`` rows: on one table
        a build reads every row, on a table partitioned by agent only the agent's partition."""
        from indexing.partitions import agent_chunk_table, chunk_partitions
        from search.ddl import concurrently_clause
        from search.keyword_stats import agent_keyword_index_create
        from search.vector_index import agent_vector_index_create

        dims, probe_chunks, loaded, results = self.options["dims"], self.options["probe_chunks"], 0, []
        for step, target in enumerate(targets):
            filler = target - loaded - probe_chunks
            if filler < 1:
                raise CommandError(f"--build-probe: {target:,} rows leave no room for other agents after the step before")
            agents = min(self.PROBE_FILLER_AGENTS, filler)
            ids = self.create_agents(agents + 1, prefix=f"probe{step}")
            each = filler // agents
            sizes = [each] * agents
            sizes[0] += filler - sum(sizes)
            dropped = self.drop_chunk_indexes()
            with connection.cursor() as cursor:
                cursor.execute("SELECT coalesce(max(id), 0) FROM indexing_memoryfile")
                (file_id_start,) = cursor.fetchone()
            started = time.monotonic()
            self.load(rng, ids, sizes + [probe_chunks], file_id_start=file_id_start)
            with connection.cursor() as cursor:
                cursor.execute("SET maintenance_work_mem = '1GB'")
                for _, definition in dropped:
                    cursor.execute(definition)
                cursor.execute("VACUUM (ANALYZE) indexing_chunk")
                cursor.execute("RESET maintenance_work_mem")  # the tasks build with the server's setting
            loaded = target
            probe = ids[-1]
            table = agent_chunk_table(agent_id=probe)
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT count(*) FROM {table}")
                (table_rows,) = cursor.fetchone()
            self.out(f"table at {target:,} rows: loaded and indexed in {time.monotonic() - started:.1f} s")
            timings = {}
            for label, build in (
                ("gin", lambda: agent_keyword_index_create(agent_id=probe, concurrently=concurrently_clause())),
                ("hnsw", lambda: agent_vector_index_create(agent_id=probe, dimensions=dims, concurrently=concurrently_clause())),
            ):
                started = time.perf_counter()
                build()
                timings[label] = time.perf_counter() - started
            results.append((target, table, table_rows, timings))
        partitions = chunk_partitions()
        self.out("")
        self.out(f"| chunk table ({f'{partitions} partitions by agent' if partitions else 'one table'}) | rows the build reads "
                 f"(the agent's {'partition' if partitions else 'table'}) | GIN build, {probe_chunks:,}-chunk agent | HNSW build |")
        self.out("|---|---|---|---|")
        for target, table, table_rows, timings in results:
            self.out(f"| {target:,} rows | {table_rows:,} ({table}) | {timings['gin']:.2f} s | {timings['hnsw']:.2f} s |")
        if len(results) > 1:
            first, last = results[0][3], results[-1][3]
            self.out(f"ratio {results[-1][0]:,} / {results[0][0]:,} rows: GIN {last['gin'] / first['gin']:.2f}, "
                     f"HNSW {last['hnsw'] / first['hnsw']:.2f}, both {sum(last.values()) / sum(first.values()):.2f}")

    # --- catalog mode ------------------------------------------------------------------------------

    def catalog(self, rng, big_id: int, big_centers, extra: int) -> None:
        """The big agent's hybrid search, the planning of one of its statements, the first statement on a
        new connection and a COPY of 7,000 chunk rows, measured with the indexes the run built, then again
        after ``extra`` more agents got a GIN and an HNSW partial index each (the same DDL as
        search/keyword_stats.py and search/vector_index.py; the agents hold no rows, which changes nothing
        for planning, locking or a COPY: every partial index's predicate is checked on every row)."""
        from agents.deletion import agent_delete_here
        from agents.models import Agent
        from indexing.partitions import chunk_partitions
        from search.keyword_stats import agent_keyword_index_create, agent_keyword_index_name
        from search.vector_index import agent_vector_index_create, agent_vector_index_name

        opts, dims = self.options, self.options["dims"]
        team_id = Agent.objects.get(pk=big_id).team_id
        pairs = list(zip(self.query_texts(rng, opts["queries"]), self.query_vectors(rng, big_centers, opts["queries"])))

        def measure() -> dict:
            figures = {"hybrid": self.timed(lambda pair: self.searcher(big_id, pair, "hybrid"), pairs) if self.searcher else []}
            plans = []
            with connection.cursor() as cursor:
                for text, _ in pairs[:20]:
                    cursor.execute(
                        "EXPLAIN (ANALYZE, FORMAT JSON) SELECT id FROM indexing_chunk "
                        "WHERE agent_id = %s AND search_vector @@ plainto_tsquery('simple', %s) LIMIT 10",
                        [big_id, text],
                    )
                    plans.append(cursor.fetchone()[0][0]["Planning Time"])
            figures["planning"] = plans
            firsts = []
            for _ in range(5):
                connection.close()
                connection.ensure_connection()
                started = time.perf_counter()
                with connection.cursor() as cursor:
                    cursor.execute("SELECT id FROM indexing_chunk WHERE agent_id = %s LIMIT 1", [big_id])
                    cursor.fetchall()
                firsts.append((time.perf_counter() - started) * 1000)
            figures["first"] = firsts
            agent = Agent.objects.create(slug=f"bench-copy-{time.monotonic_ns()}", name="copy", team_id=team_id)
            with connection.cursor() as cursor:
                cursor.execute("SELECT coalesce(max(id), 0) FROM indexing_memoryfile")
                (file_id_start,) = cursor.fetchone()
            started = time.perf_counter()
            self.load(rng, [agent.pk], [7000], file_id_start=file_id_start)
            figures["copy_s"] = time.perf_counter() - started
            agent_delete_here(agent_id=agent.pk)
            return figures

        before_count = self.chunk_index_count()
        ids = [a.pk for a in Agent.objects.bulk_create(
            [Agent(slug=f"bench-catalog-{i:05d}", name=f"catalog {i}", team_id=team_id) for i in range(extra)]
        )]

        def build() -> float:
            started = time.monotonic()
            for agent_id in ids:
                agent_keyword_index_create(agent_id=agent_id)
                agent_vector_index_create(agent_id=agent_id, dimensions=dims)
            return time.monotonic() - started

        # Rounds alternate without and with the extra indexes (dropped and rebuilt between them), so a
        # change of load on a shared machine falls on both sides.
        befores, afters = [], []
        for round_number in range(opts["catalog_rounds"]):
            if round_number:
                with connection.cursor() as cursor:
                    for agent_id in ids:
                        cursor.execute(f'DROP INDEX "{agent_keyword_index_name(agent_id)}"')
                        cursor.execute(f'DROP INDEX "{agent_vector_index_name(agent_id=agent_id, dimensions=dims)}"')
            befores.append(measure())
            seconds = build()
            if not round_number:
                build_seconds = seconds  # the first build is the one reported
            afters.append(measure())
        before = {key: [v for m in befores for v in m[key]] for key in ("hybrid", "planning", "first")}
        after = {key: [v for m in afters for v in m[key]] for key in ("hybrid", "planning", "first")}
        before["copy_s"] = statistics.median(m["copy_s"] for m in befores)
        after["copy_s"] = statistics.median(m["copy_s"] for m in afters)
        self.out("")
        partitions = chunk_partitions()
        layout = f"{partitions} partitions by agent" if partitions else "one table"
        self.out(f"catalog: {2 * extra:,} more partial indexes ({extra:,} agents x GIN + HNSW) built in {build_seconds:.1f} s "
                 f"({build_seconds / (2 * extra) * 1000:.0f} ms each: each reads "
                 f"{'its agent' + chr(39) + 's partition' if partitions else 'the whole chunk table'}); chunk table: {layout}; "
                 f"{opts['catalog_rounds']} round(s) without and with them")
        self.out(f"| big agent | {before_count} indexes on the chunk table | {self.chunk_index_count():,} indexes | ratio |")
        self.out("|---|---|---|---|")
        for label, key in (("hybrid memory_search", "hybrid"), ("planning of one keyword statement", "planning"),
                           ("first statement on a new connection", "first")):
            if not before[key]:
                continue
            b50, a50 = percentile(before[key], 0.5), percentile(after[key], 0.5)
            b95, a95 = percentile(before[key], 0.95), percentile(after[key], 0.95)
            self.out(f"| {label}, p50 / p95 | {b50:.2f} / {b95:.2f} ms | {a50:.2f} / {a95:.2f} ms | {a50 / b50:.2f} / {a95 / b95:.2f} |")
        copy_label = "COPY of 7,000 chunk rows (one new agent)" + (", median of the rounds" if opts["catalog_rounds"] > 1 else "")
        self.out(f"| {copy_label} | {before['copy_s']:.2f} s | {after['copy_s']:.2f} s | "
                 f"{after['copy_s'] / before['copy_s']:.2f} |")

    def chunk_index_count(self) -> int:
        """Indexes of the chunk table, a partitioned one's shared indexes counted once (as on one table)."""
        from indexing.partitions import CHUNK_TABLES

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                f"WHERE i.indrelid IN ({CHUNK_TABLES}) AND NOT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = c.oid)"
            )
            return cursor.fetchone()[0]

    def keyword_budgets(self, agent_id: int, texts: list[str]) -> None:
        """How much of an exact BM25 top 10 the keyword half keeps for a large agent, per row budget
        (SCORE_BUDGET: about how many chunks search/keyword.py's first pass reads, before the second
        reads those the bar it sets cannot rule out), how often it proves its top 10 exact, and its
        time against bm25s computing the same ranking in process.

        Two measures: the plain overlap (the ids of the budgeted top 10 that are ids of the exact top 10)
        and the tie-aware one, where a budgeted result counts when its exact BM25 score reaches the exact
        10th score. Many chunks can tie at the 10th score (40-word chunks holding the rarest word once),
        and which of them an ORDER BY keeps is arbitrary: the plain overlap counts such a swap as a miss."""
        from unittest import mock

        from search import keyword

        budgets = [int(b) for b in self.options["keyword_budgets"].split(",") if b.strip()]
        if not budgets:
            return

        def top10(text):
            return [hit.chunk_id for hit in self.keyword_half(agent_id, text).hits[:10]]

        exact_from = settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS
        settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 10**12
        try:
            with mock.patch.object(keyword, "_stats_plan", return_value=None):
                exact = {text: self.exact_scores(agent_id, text) for text in texts}
        finally:
            settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = exact_from
        in_process = self.bm25s_baseline(agent_id, texts)

        def agreement(found: dict[str, list[int]]) -> tuple[float, float]:
            """(plain, tie-aware) overlap of each query's top 10 in ``found`` with the exact one, averaged."""
            plain = statistics.mean(len(set(found[t]) & set(exact[t].top10)) / max(1, len(exact[t].top10)) for t in texts)
            return plain, statistics.mean(exact[t].tie_aware_overlap(found[t]) for t in texts)

        rows, yardstick = [], []
        for budget in budgets:
            with mock.patch.object(keyword, "SCORE_BUDGET", budget):
                results = {t: self.keyword_half(agent_id, t) for t in texts}
                # With bm25s alternated query by query, so that both see the same load.
                timings, *beside = self.timed_alternately(
                    [lambda t: self.keyword_half(agent_id, t)] + ([in_process[1]] if in_process else []), texts
                )
            beside = beside[0] if beside else []
            yardstick += beside
            overlap, tie_aware = agreement({t: [hit.chunk_id for hit in results[t].hits[:10]] for t in texts})
            proven = [results[t].exact for t in texts if hasattr(results[t], "exact")]
            default = " (default)" if budget == keyword.SCORE_BUDGET else ""
            ratio = f"{statistics.median(timings) / statistics.median(beside):.2f}" if beside else "-"
            rows.append(f"| budget {budget:,}{default} | {overlap:.3f} | {tie_aware:.3f} | "
                        f"{f'{statistics.mean(proven):.2f}' if proven else '-'} | {self.p(timings)} | {ratio} |")
        self.out("")
        self.out("| big agent, keyword half | top-10 overlap with exact BM25 | tie-aware overlap | proven exact "
                 "| p50 / p95 | p50 ÷ bm25s p50 |")
        self.out("|---|---|---|---|---|---|")
        if in_process is not None:
            overlap, tie_aware = agreement({t: in_process[1](t)[:10] for t in texts})
            self.out(f"| bm25s {bm25s_version()} in process (k1 {settings.MEMORYHUB_SEARCH_BM25_K1}, b {settings.MEMORYHUB_SEARCH_BM25_B}, the same lexemes) "
                     f"| {overlap:.3f} | {tie_aware:.3f} | - | {self.p(yardstick)} | 1.00 |")
        for row in rows:
            self.out(row)
        deep = sum(1 for t in texts if exact[t].truncated)
        if deep:
            self.out(f"({deep} of {len(texts)} queries tie at the 10th score beyond the {EXACT_TIE_DEPTH:,} exact scores "
                     "read; every result past them is counted as reaching it)")

    def bm25s_baseline(self, agent_id: int, texts: list[str]):
        """The same ranking in process with bm25s, the yardstick of the keyword half's cost: (seconds to
        read and index the agent's chunks, a function from a query to its 50 best chunk ids), or None
        without bm25s.

        Fair as far as it goes: each chunk is the lexemes of its stored tsvector, each repeated as often
        as it occurs (the tokens and term frequencies the SQL scores), the query is the lexemes
        search.keyword.query_lexemes gives it, outside the timing (tokenising a few words in Python is tens
        of microseconds), same k1, b and IDF ("lucene": ln(1 + (N - df + 0.5) / (df + 0.5))). Its
        document length is the token count of the tsvector where the SQL uses the chunk's token_count;
        the synthetic chunks have the same for both. Each retrieval asks for 50 results, as the keyword
        half's timing does, on one thread (n_threads=0), and includes its Python call overhead."""
        try:
            import bm25s
        except ImportError:
            self.out("(bm25s not installed: pip install -e '.[dev]'; no in-process baseline)")
            return None
        from search import keyword

        started = time.monotonic()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT c.id, (SELECT array_agg(u.lexeme) FROM unnest(c.search_vector) u, "
                "generate_series(1, coalesce(array_length(u.positions, 1), 1))) "
                "FROM indexing_chunk c WHERE c.agent_id = %s ORDER BY c.id",
                [agent_id],
            )
            rows = cursor.fetchall()
        ids = [row[0] for row in rows]
        retriever = bm25s.BM25(k1=settings.MEMORYHUB_SEARCH_BM25_K1, b=settings.MEMORYHUB_SEARCH_BM25_B, method="lucene")
        retriever.index([row[1] or [] for row in rows], show_progress=False)
        vocabulary = retriever.vocab_dict
        queries = {t: [lexeme for lexeme in keyword.query_lexemes(t) if lexeme in vocabulary] for t in texts}
        self.out(f"bm25s {bm25s_version()}: {len(ids):,} chunks read and indexed in {time.monotonic() - started:.1f} s")

        def retrieve(text: str, k: int = 50) -> list[int]:
            tokens = queries[text]
            if not tokens:
                return []
            k = min(k, len(ids))
            documents, scores = retriever.retrieve([tokens], k=k, show_progress=False, n_threads=0)
            return [ids[d] for d, score in zip(documents[0].tolist(), scores[0].tolist()) if score > 0]

        return time.monotonic() - started, retrieve

    def exact_scores(self, agent_id: int, text: str) -> "ExactTop":
        """The unbounded exact BM25 ranking of ``text``, deep enough to hold every chunk tied with the 10th."""
        from search.keyword import keyword_candidates

        hits = keyword_candidates(agent_id=agent_id, query=text, filters=self.no_filters(), limit=EXACT_TIE_DEPTH).hits
        return ExactTop(
            top10=[hit.chunk_id for hit in hits[:10]],
            scores={hit.chunk_id: hit.bm25 for hit in hits},
            tenth=hits[min(10, len(hits)) - 1].bm25 if hits else 0.0,
            truncated=len(hits) == EXACT_TIE_DEPTH and len(hits) > 10 and _reaches(hits[-1].bm25, hits[min(10, len(hits)) - 1].bm25),
        )

    def out(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    @property
    def identity_key(self) -> str:
        return f"{IDENTITY_PROVIDER}:{IDENTITY_MODEL}:{self.options['dims']}"

    def no_filters(self):
        from search.types import SearchFilters

        return SearchFilters()

    # --- corpus --------------------------------------------------------------------------------------

    def agent_sizes(self, rng) -> list[int]:
        opts = self.options
        rest, others = opts["chunks"] - opts["big"], opts["agents"] - 1
        weights = rng.lognormal(0.0, 1.0, others)
        sizes = [max(1, int(w)) for w in weights / weights.sum() * rest]
        sizes[int(weights.argmax())] += rest - sum(sizes)  # rounding leftovers
        return [opts["big"], *sizes]

    def make_vocabulary(self, rng) -> list[str]:
        words = set()
        while len(words) < 20_000:
            words.add("".join(rng.choice(SYLLABLES, size=int(rng.integers(2, 5)))))
        vocabulary = sorted(words)
        rng.shuffle(vocabulary)
        return vocabulary

    def word_ranks(self, rng, count: int):
        """Zipf-distributed word positions in the vocabulary (rank 1 = most frequent)."""
        import numpy as np

        ranks = rng.zipf(1.3, count)
        return np.minimum(ranks, len(self.vocabulary)) - 1

    def create_agents(self, count: int, prefix: str = "bench") -> list[int]:
        from agents.models import Agent
        from agents.services import team_default

        team = team_default()
        agents = Agent.objects.bulk_create([Agent(slug=f"{prefix}-{i:05d}", name=f"{prefix} {i}", team=team) for i in range(count)])
        return [agent.id for agent in agents]

    def drop_chunk_indexes(self) -> list[tuple[str, str]]:
        """Drop the chunk table's secondary indexes (on a partitioned table, with each partition's copy);
        returns their names and the statements that rebuild them."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT c.relname, pg_get_indexdef(c.oid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE i.indrelid = 'indexing_chunk'::regclass AND NOT i.indisprimary"
            )
            indexes = [(name, definition.replace(" ON ONLY ", " ON ", 1)) for name, definition in cursor.fetchall()]
            for name, _ in indexes:
                cursor.execute(f'DROP INDEX "{name}"')
        return indexes

    def load(self, rng, agent_ids: list[int], sizes: list[int], *, file_id_start: int = 0):
        """COPY files and chunks agent by agent; returns each agent's cluster centres (for queries)."""
        import numpy as np
        from pgvector.psycopg import register_vector

        dims, words_per_chunk = self.options["dims"], self.options["words"]
        now = datetime.now(timezone.utc)
        raw = connection.connection
        register_vector(raw)
        centers_by_agent = []
        file_id = file_id_start
        loaded = 0
        next_report = 100_000
        with raw.cursor() as cursor:
            for agent_id, size in zip(agent_ids, sizes):
                # Topics: clusters of ~100 chunks around a random centre, as notes on one subject are.
                centers = rng.standard_normal((max(1, size // 100), dims), dtype=np.float32)
                assignment = rng.integers(0, len(centers), size)
                vectors = centers[assignment] + rng.standard_normal((size, dims), dtype=np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                centers_by_agent.append(centers)
                ranks = self.word_ranks(rng, size * words_per_chunk).reshape(size, words_per_chunk)
                texts = [" ".join(self.vocabulary[r] for r in row) for row in ranks.tolist()]
                files = math.ceil(size / FILE_CHUNKS)
                first_file = file_id + 1
                with cursor.copy(
                    "COPY indexing_memoryfile (id, agent_id, path, source, content, content_hash, size, state, "
                    "indexed_hash, last_error, created_at, updated_at, indexed_at, attributes) FROM STDIN"
                ) as copy:
                    for number in range(files):
                        file_id += 1
                        content = "\n".join(texts[number * FILE_CHUNKS : (number + 1) * FILE_CHUNKS])
                        digest = hashlib.sha256(content.encode()).hexdigest()
                        copy.write_row(
                            (file_id, agent_id, f"memory/{number // 100:03d}/note-{number:05d}.md",
                             "workspace" if number % 4 == 3 else "memory", content,
                             digest, len(content.encode()), "indexed", digest, "", now, now, now,
                             # Attributes for the filtered rows: team t0/t1/t2 (a third each), rank 0-9.
                             json.dumps({"team": f"t{number % 3}", "rank": number % 10}))
                        )
                with cursor.copy(
                    "COPY indexing_chunk (agent_id, file_id, ordinal, start_line, end_line, text, text_hash, token_count, "
                    "search_text, embedding, embedding_identity, embedding_dimensions, created_at) FROM STDIN WITH (FORMAT BINARY)"
                ) as copy:
                    copy.set_types(
                        ["int8", "int8", "int4", "int4", "int4", "text", "text", "int4", "text", "vector", "text", "int2", "timestamptz"]
                    )
                    for position, text in enumerate(texts):
                        line = position % FILE_CHUNKS + 1
                        copy.write_row(
                            (agent_id, first_file + position // FILE_CHUNKS, line - 1, line, line, text,
                             hashlib.sha256(text.encode()).hexdigest(), words_per_chunk, text, vectors[position],
                             self.identity_key, dims, now)
                        )
                loaded += size
                if loaded >= next_report:
                    self.out(f"  loaded {loaded:,} chunks")
                    next_report += 100_000
            cursor.execute(
                "SELECT setval(pg_get_serial_sequence('indexing_memoryfile', 'id'), %s)", [file_id]
            )
        return centers_by_agent

    def query_vectors(self, rng, centers, count: int) -> list[list[float]]:
        """Queries drawn like the agent's own chunks: near one of its topics."""
        import numpy as np

        picks = centers[rng.integers(0, len(centers), count)]
        queries = picks + rng.standard_normal(picks.shape, dtype=np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        return queries.tolist()

    def query_texts(self, rng, count: int) -> list[str]:
        """Natural-language-like queries: 3–8 words of the same Zipf vocabulary, without its 50 most
        frequent words (a real question's stop words are dropped by the text-search configuration; these
        pseudo-words are not stop words, so they are left out here instead)."""
        texts = []
        for _ in range(count):
            ranks = self.word_ranks(rng, int(rng.integers(3, 9))) + QUERY_SKIPPED_RANKS
            ranks[ranks >= len(self.vocabulary)] = len(self.vocabulary) - 1
            texts.append(" ".join(self.vocabulary[r] for r in ranks.tolist()))
        return texts

    # --- measurements ------------------------------------------------------------------------------

    @property
    def pool(self) -> int:
        """The candidates memory_search asks each half for (with the default max_results)."""
        return max(settings.MEMORYHUB_SEARCH_CANDIDATE_POOL, 2 * settings.MEMORYHUB_SEARCH_MAX_RESULTS)

    def vector_half(self, agent_id: int, query: list[float], filters=None, limit: int = 10):
        from search.vector import vector_candidates

        return vector_candidates(
            agent_id=agent_id, query_embedding=query, identity=self.identity_key, dimensions=self.options["dims"],
            filters=filters or self.no_filters(), limit=limit,
        )

    def keyword_half(self, agent_id: int, text: str, limit: int = 50):
        """search-core's keyword half when present; else its query shape: OR of the words, ranked."""
        try:
            from search.keyword import keyword_candidates
        except ImportError:
            keyword_candidates = None
        if keyword_candidates is not None:
            from agents.models import Agent

            try:
                return keyword_candidates(agent_id=agent_id, query=text, filters=self.no_filters(), limit=limit)
            except TypeError:
                return keyword_candidates(agent=Agent(id=agent_id), query=text, filters=self.no_filters(), limit=limit)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT c.id, ts_rank_cd(c.search_vector, q) AS rank FROM indexing_chunk c, "
                "to_tsquery('english', %s) q WHERE c.agent_id = %s AND c.search_vector @@ q ORDER BY rank DESC LIMIT 50",
                [" | ".join(text.split()), agent_id],
            )
            return cursor.fetchall()

    def end_to_end_searcher(self):
        try:
            from search.services import memory_search
        except ImportError:
            return None
        from unittest import mock

        from agents.models import Agent
        from indexing.embeddings import FakeProvider

        vectors = self.query_vectors_by_text = {}
        agents: dict[int, Agent] = {}

        real_embed_query = FakeProvider.embed_query

        def embed_query(provider, text):  # a question's words for expansion: the fake's own vectors
            return vectors[text] if text in vectors else real_embed_query(provider, text)

        self.embed_query = embed_query

        def search(agent_id, pair, mode, values=None):
            text, vector = pair
            vectors[text] = vector
            if agent_id not in agents:  # as a request has it, from its token: not part of the search
                agents[agent_id] = Agent.objects.get(id=agent_id)
            before = {name: getattr(settings, name) for name in values or {}}
            for name, value in (values or {}).items():
                setattr(settings, name, value)
            try:
                with mock.patch.object(FakeProvider, "embed_query", embed_query):
                    return memory_search(agent=agents[agent_id], query=text, mode=mode)
            finally:
                for name, value in before.items():
                    setattr(settings, name, value)

        return search

    def http_searcher(self, agent_id: int):
        """POST /api/v1/search (hybrid) through Django's whole request stack (the test client: no socket),
        with a read token of the agent's: the same search as memory_search plus authentication, rate
        limits, (de)serialisation and the middleware."""
        from unittest import mock

        from django.test import Client

        from agents.models import Agent
        from agents.services import agent_token_create
        from indexing.embeddings import FakeProvider

        from memoryhub.ratelimit import Rate

        if "testserver" not in settings.ALLOWED_HOSTS and "*" not in settings.ALLOWED_HOSTS:
            settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
        # Every query is asked back to back (a warm-up pass, then timed): far past 600 a minute on a small
        # corpus. The limits stay checked (their cost is part of the overhead), at a rate never reached.
        never = Rate(10**9, 60)
        settings.MEMORYHUB_RATE_LIMITS = {kind: never for kind in settings.MEMORYHUB_RATE_LIMITS}
        settings.MEMORYHUB_TEAM_RATE_LIMIT = never
        _, raw = agent_token_create(agent=Agent.objects.get(id=agent_id), scopes=["read"], label="bench_scale")
        client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")

        def search(pair):
            text, vector = pair
            self.query_vectors_by_text[text] = vector
            with mock.patch.object(FakeProvider, "embed_query", self.embed_query):
                response = client.post("/api/v1/search", data={"query": text, "mode": "hybrid"}, content_type="application/json")
            if response.status_code != 200:
                raise CommandError(f"POST /api/v1/search answered {response.status_code}: {response.content[:300]!r}")
            return response

        return search

    def timed(self, function, inputs) -> list[float]:
        return self.timed_alternately([function], inputs)[0]

    def timed_alternately(self, functions, inputs, *, warm_all: bool = False) -> list[list[float]]:
        """Milliseconds of each function on each input, the functions one after the other on each input
        (so that they see the same load), starting with the next function at each input (so that none is
        always the first to read an input's pages), after a warm-up on the first five inputs, or on all
        of them with ``warm_all``."""
        for value in inputs if warm_all else inputs[:5]:  # warm the caches and the connection
            for function in functions:
                function(value)
        timings = [[] for _ in functions]
        order = list(range(len(functions)))
        for i, value in enumerate(inputs):
            for k in order[i % len(order):] + order[: i % len(order)]:
                started = time.perf_counter()
                functions[k](value)
                timings[k].append((time.perf_counter() - started) * 1000)
        return timings

    def recall(self, agent_id: int, queries, filters=None) -> float:
        from search.vector import _exact_search, vector_literal

        found = 0
        for query in queries:
            approximate = {hit.chunk_id for hit in self.vector_half(agent_id, query, filters)}
            exact = _exact_search(
                agent_id=agent_id, dims=self.options["dims"], identity_key=self.identity_key,
                filters=filters or self.no_filters(), query=vector_literal(query), limit=10,
            )
            found += len(approximate & {hit.chunk_id for hit in exact})
        return found / (10 * len(queries))

    def report_sizes(self) -> None:
        from indexing.partitions import CHUNK_TABLES

        with connection.cursor() as cursor:
            # Summed over the partitions when the table is partitioned (indexing/partitions.py).
            cursor.execute(
                f"WITH tables(relid) AS ({CHUNK_TABLES}) "
                "SELECT pg_database_size(current_database()), "
                "(SELECT sum(pg_total_relation_size(relid)) FROM tables), (SELECT sum(pg_relation_size(relid)) FROM tables), "
                "(SELECT coalesce(sum(pg_relation_size(indexrelid)), 0) FROM pg_stat_user_indexes "
                " WHERE relid IN (SELECT relid FROM tables) AND indexrelname LIKE 'chunk\\_hnsw\\_%%'), "
                "pg_relation_size('chunk_search_vector_gin') + (SELECT coalesce(sum(pg_relation_size(inhrelid)), 0) "
                " FROM pg_inherits WHERE inhparent = 'chunk_search_vector_gin'::regclass), "
                "(SELECT coalesce(sum(pg_relation_size(indexrelid)), 0) FROM pg_stat_user_indexes "
                " WHERE relid IN (SELECT relid FROM tables) AND indexrelname LIKE 'chunk\\_gin\\_a%%')"
            )
            database, chunks_total, chunks_heap, hnsw, gin, agent_gin = cursor.fetchone()
        mb = 1024 * 1024
        self.out(f"database size: {database / mb:,.0f} MB (chunk table {chunks_heap / mb:,.0f} MB, with TOAST and indexes "
                 f"{chunks_total / mb:,.0f} MB; HNSW indexes {hnsw / mb:,.0f} MB; GIN {gin / mb:,.0f} MB, "
                 f"per-agent GIN {agent_gin / mb:,.0f} MB)")

    def report(self, rows) -> None:
        header = "| agent | vector recall@10 | vector half p50 / p95 | keyword half p50 / p95 |"
        if self.searcher:
            header += " memory_search hybrid | memory_search vector | memory_search keyword |"
        self.out("")
        self.out(header)
        self.out("|" + "---|" * (header.count("|") - 1))
        for row in rows:
            cells = [row["agent"], f"{row['recall']:.3f}", self.p(row["vector"]), self.p(row["keyword"])]
            if self.searcher:
                cells += [self.p(row[f"e2e_{mode}"]) for mode in ("hybrid", "vector", "keyword")]
            self.out("| " + " | ".join(cells) + " |")

    def report_overhead(self, rows) -> None:
        """Hybrid memory_search against the sum of its halves (p50s of the same run), and HTTP on top."""
        p50 = statistics.median
        self.out("")
        self.out(f"| agent | hybrid p50 | vector + keyword half p50 (10 / 50 candidates) | hybrid ÷ halves | halves at the "
                 f"search's pool ({self.pool} / {self.pool}) | hybrid ÷ those | POST /api/v1/search p50 / p95 | HTTP overhead p50 |")
        self.out("|---|---|---|---|---|---|---|---|")
        for row in rows:
            hybrid = p50(row["e2e_hybrid"])
            halves = p50(row["vector"]) + p50(row["keyword"])
            pool = p50(row["vector_pool"]) + p50(row["keyword_pool"])
            self.out(
                f"| {row['agent']} | {hybrid:.1f} ms | {p50(row['vector']):.1f} + {p50(row['keyword']):.1f} = {halves:.1f} ms "
                f"| **{hybrid / halves:.2f}×** | {p50(row['vector_pool']):.1f} + {p50(row['keyword_pool']):.1f} = {pool:.1f} ms "
                f"| **{hybrid / pool:.2f}×** | {self.p(row['http'])} | {p50(row['http']) - hybrid:+.1f} ms |"
            )

    def memory_words(self, agent_ids: list[int]) -> None:
        """The measured agents' words for keyword expansion, read, embedded (the fake's vectors) and their
        neighbours worked out by the `memory_words` task's code, timed; then each agent's lexemes counted
        again from its chunks, as after an edit (search/expansion.py's ``lexemes_recount``), timed."""
        from search.expansion import lexemes_recount, memory_words_sync

        started = time.monotonic()
        outcome = memory_words_sync(agent_ids=agent_ids)
        with connection.cursor() as cursor:
            cursor.execute("SELECT agent_id, count(*) FROM search_memoryword GROUP BY agent_id")
            self.word_counts = dict(cursor.fetchall())
            cursor.execute("VACUUM (ANALYZE) search_memoryword")
        self.out(f"memory words (keyword expansion) of the 3 measured agents: {outcome.words_added:,} words from "
                 f"{outcome.chunks_read:,} chunks, embedded, {outcome.neighbours_found:,} words' neighbours worked "
                 f"out, in {time.monotonic() - started:.1f} s")
        recounts = []
        for agent_id in agent_ids:
            started = time.monotonic()
            lexemes_recount(agent_id)
            recounts.append(f"{time.monotonic() - started:.2f} s")
        self.out(f"lexemes counted again from each measured agent's chunks (as after an edit): {', '.join(recounts)}")

    def report_expansion(self, rows) -> None:
        """Hybrid memory_search with keyword expansion off, as configured, and run for every rare word."""
        self.out("")
        self.out("| agent | memory words | hybrid, expansion off | hybrid (default settings) | hybrid, every rare word expanded |")
        self.out("|---|---|---|---|---|")
        for row, agent_id in zip(rows, self.measured):
            self.out(f"| {row['agent']} | {self.word_counts.get(agent_id, 0):,} | {self.p(row['expansion_off'])} "
                     f"| {self.p(row['e2e_hybrid'])} | {self.p(row['expansion_all'])} |")

    @staticmethod
    def p(timings: list[float]) -> str:
        return f"{percentile(timings, 0.5):.1f} / {percentile(timings, 0.95):.1f} ms"
