"""MemoryHub settings. Every value comes from the environment; `.env.example` lists them all.

A bad value stops the process at start-up with a message naming the variable (see memoryhub/env.py).
"""

import importlib.util
import ipaddress
import re
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from django.core.exceptions import ImproperlyConfigured
from kombu import Queue

from memoryhub.embedding_models import known_model
from memoryhub.env import env_bool, env_choice, env_float, env_int, env_list, env_str
from memoryhub.observability import BACKGROUND_QUEUE_SUFFIX
from memoryhub.ratelimit import rate_parse

BASE_DIR = Path(__file__).resolve().parent.parent

# --- Core Django -----------------------------------------------------------------------------
# DEBUG defaults to on for a development checkout; docker-compose and the Dockerfile turn it off.
DEBUG = env_bool("DEBUG", True)
SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off (or give SECRET_KEY_FILE)")
    SECRET_KEY = "insecure-development-key-do-not-use-in-production"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("MEMORYHUB_CSRF_TRUSTED_ORIGINS", [])
PORT = env_int("PORT", 8000, minimum=1, maximum=65535)

INSTALLED_APPS = [
    "memoryhub.apps.MemoryHubAdminConfig",  # django.contrib.admin with the dashboard (admin console)
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "agents",
    "indexing",
    "search",
    "integrations",  # the agent tools and MCP
    "memoryhub.usage",  # usage over time in the admin (its own app label: usage)
]
# The benchmark harness (benchmarks/) is a development tool: a checkout has it, the image does not.
if importlib.util.find_spec("benchmarks") is not None:
    INSTALLED_APPS.append("benchmarks")

MIDDLEWARE = [
    "memoryhub.postgresql.wait_limit.WaitLimitMiddleware",  # no wait for the database without end
    "agents.throttles.RateLimitedTokensMiddleware",  # 429 before anything else for a token told to wait
    "django.middleware.security.SecurityMiddleware",
    "memoryhub.middleware.ApiJsonErrorsMiddleware",  # JSON 404/500/503 on /api/ and /mcp, in every mode
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# Serves the admin's static files under gunicorn: collected ones in production, straight from the apps
# in DEBUG (`make run`), so no collectstatic step is needed there.
MIDDLEWARE.insert(MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1, "whitenoise.middleware.WhiteNoiseMiddleware")
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG

ROOT_URLCONF = "memoryhub.urls"
WSGI_APPLICATION = "memoryhub.wsgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# Raw tokens are shown to operators through a message: keep messages server-side, never in a cookie.
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"


# --- Database: always PostgreSQL with pgvector ---------------------------------------------------
def _database_from_url(url: str, *, name: str = "DATABASE_URL") -> dict:
    parsed = urlparse(url)
    if parsed.scheme not in ("postgres", "postgresql"):
        raise ImproperlyConfigured(f"{name} must be a postgres:// URL, got scheme {parsed.scheme!r}")
    query = {key: values[-1] for key, values in parse_qs(parsed.query).items()}
    host = query.pop("host", None) or parsed.hostname or ""
    return {
        "NAME": unquote(parsed.path.lstrip("/")) or "memoryhub",
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": host,
        "PORT": str(parsed.port or ""),
        "OPTIONS": query,
    }


# Postgres keeps the plan of a statement it prepares itself, per connection: a foreign key's check (when a
# file is deleted, `SELECT 1 FROM indexing_chunk WHERE agent_id = $1 AND file_id = $2 FOR KEY SHARE`),
# a PL/pgSQL function's statements (the capture trigger of an online repartition, indexing/partitions.py).
# At a statement's sixth run it plans it once more for any agent, over every partition of the chunk table,
# locking all of them and their indexes; when that plan is estimated the cheaper (while most partitions
# are empty) it keeps it, and every later run locks every partition again. force_custom_plan plans each run for its
# values, pruned to the agent's partition (≈ 0.06 ms of planning per key check; Django's own statements
# are not prepared: parameters are bound on the client). Sent when a connection starts (libpq `options`), so
# it holds for the service's connections only, primary and replicas, pooled or not, embedded or
# DATABASE_URL. A pooler that refuses start-up options (PgBouncer, unless plan_cache_mode is in its
# track_extra_parameters): MEMORYHUB_DB_FORCE_CUSTOM_PLANS=0 and `ALTER ROLE <user> SET plan_cache_mode =
# force_custom_plan` instead. docs/scale.md, "Partitioning by agent".
MEMORYHUB_DB_FORCE_CUSTOM_PLANS = env_bool("MEMORYHUB_DB_FORCE_CUSTOM_PLANS", True)


# The longest a web request waits for one answer of the database (a query, a commit, a pooled connection's
# check) before it ends with 503 database_unavailable: a database that hangs (its processes stopped, a network
# dropping replies) answers nothing, and its own statement_timeout cannot fire. A search's deadline is far
# shorter; Celery tasks and commands have no such limit. 0 = none. (memoryhub/postgresql/wait_limit.py)
MEMORYHUB_DB_ANSWER_TIMEOUT = env_float("MEMORYHUB_DB_ANSWER_TIMEOUT", 30.0, minimum=0)
# The longest a new connection may take to open (libpq's connect_timeout; psycopg takes no less than 2),
# unless DATABASE_URL sets its own: a hung server accepts the connection and never finishes the handshake.
MEMORYHUB_DB_CONNECT_TIMEOUT = env_int("MEMORYHUB_DB_CONNECT_TIMEOUT", 10, minimum=2)
# How often the server checks, while a statement runs, that the service's connection is still there
# (PostgreSQL's client_connection_check_interval, 14 and later; set when a connection opens). A request that
# stopped waiting (MEMORYHUB_DB_ANSWER_TIMEOUT, a killed worker) closes its connection,
# and without the check its statement ran on to its end. 0 = no check. (memoryhub/postgresql/base.py)
MEMORYHUB_DB_CLIENT_CHECK_SECONDS = env_float("MEMORYHUB_DB_CLIENT_CHECK_SECONDS", 2.0, minimum=0)


def _connection_options(options: dict) -> dict:
    """A connection's OPTIONS with plan_cache_mode added to its start-up options (the URL's own `options`
    are kept; a plan_cache_mode the URL sets wins)."""
    if not MEMORYHUB_DB_FORCE_CUSTOM_PLANS or "plan_cache_mode" in options.get("options", ""):
        return options
    startup = " ".join(filter(None, [options.get("options", "").strip(), "-c plan_cache_mode=force_custom_plan"]))
    return {**options, "options": startup}


DATABASE_URL = env_str("DATABASE_URL")
EMBEDDED_POSTGRES_DIR = Path(env_str("MEMORYHUB_EMBEDDED_POSTGRES_DIR") or BASE_DIR / ".pgdata")
if DATABASE_URL:
    _database = {"ENGINE": "memoryhub.postgresql", **_database_from_url(DATABASE_URL)}
else:
    from memoryhub import embedded_postgres

    if not embedded_postgres.is_installed():  # the Docker image leaves it out: it always has a DATABASE_URL
        raise ImproperlyConfigured(
            "DATABASE_URL is not set and the embedded PostgreSQL is not installed: set DATABASE_URL, or install "
            "the `embedded` extra (pip install -e '.[embedded]'; make run and make test do)."
        )
    # The embedded server starts on the first connection (memoryhub/embedded_db), never at import.
    _database = {"ENGINE": "memoryhub.embedded_db", "NAME": "memoryhub", "USER": "", "PASSWORD": "",
                 "HOST": "", "PORT": "", "OPTIONS": {}, "EMBEDDED_DATA_DIR": str(EMBEDDED_POSTGRES_DIR)}
DATABASES = {
    "default": {
        "CONN_MAX_AGE": env_int("MEMORYHUB_DB_CONN_MAX_AGE", 60, minimum=0),
        "CONN_HEALTH_CHECKS": True,
        **_database,
        "OPTIONS": {"connect_timeout": MEMORYHUB_DB_CONNECT_TIMEOUT, **_connection_options(_database["OPTIONS"])},
    }
}
# A bounded pool of connections per web process (gunicorn's config turns it on with one connection per
# thread: memoryhub/gunicorn_conf.py). 0 = no pool: one persistent connection per thread, as the Celery
# workers use (a pool must not cross their fork). A request that waits longer than the timeout for a
# connection is answered 503 server_busy with Retry-After.
MEMORYHUB_DB_POOL_SIZE = env_int("MEMORYHUB_DB_POOL_SIZE", 0, minimum=0, maximum=100)
MEMORYHUB_DB_POOL_TIMEOUT = env_float("MEMORYHUB_DB_POOL_TIMEOUT", 10.0, minimum=0.1)
# While its attempts to connect fail, psycopg_pool spaces them out (1, 2, 4, 8 … s) for up to its
# reconnect_timeout (300 s by default), so after a long outage its next attempt could come a minute after the
# database was back, every request answered 503 meanwhile (17 s and counting after a 70 s outage, in
# tests/reliability/test_database_down.py). An attempt given up after this many seconds is followed by a new
# one, whose first try is at once, as soon as a request waits for a connection.
POOL_RECONNECT_SECONDS = 5.0
if MEMORYHUB_DB_POOL_SIZE:
    # The pool keeps the connections (Django must not), and checks each one it hands out
    # (CONN_HEALTH_CHECKS), so a connection broken by a database restart is replaced, not used.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        **DATABASES["default"]["OPTIONS"],
        "pool": {
            "min_size": 1, "max_size": MEMORYHUB_DB_POOL_SIZE, "timeout": MEMORYHUB_DB_POOL_TIMEOUT, "max_idle": 300,
            "reconnect_timeout": POOL_RECONNECT_SECONDS,
        },
    }

# Read replicas (memoryhub/replicas.py): searches read from streaming replicas of the database, each one
# a postgres:// URL in DATABASE_REPLICA_URLS (comma-separated), as aliases replica_1, replica_2, …, with
# the primary's connection settings (pool included). Writes and every other read stay on the primary. A
# replica that is unreachable, or lags more than DATABASE_REPLICA_MAX_LAG_SECONDS (0 = no limit), is left
# alone for DATABASE_REPLICA_RETRY_SECONDS while searches read from the primary.
DATABASE_REPLICA_URLS = env_list("DATABASE_REPLICA_URLS", [])
DATABASE_REPLICA_MAX_LAG_SECONDS = env_float("DATABASE_REPLICA_MAX_LAG_SECONDS", 30.0, minimum=0)
DATABASE_REPLICA_RETRY_SECONDS = env_float("DATABASE_REPLICA_RETRY_SECONDS", 30.0, minimum=0)
# How long a search may wait to reach a replica (to connect, or for a pooled connection) before it reads
# the primary instead: a replica host that is down must cost a search seconds, not the TCP timeout.
DATABASE_REPLICA_CONNECT_TIMEOUT = env_int("DATABASE_REPLICA_CONNECT_TIMEOUT", 2, minimum=1)
MEMORYHUB_DB_REPLICA_ALIASES = []
for _number, _url in enumerate(DATABASE_REPLICA_URLS, start=1):
    _replica = _database_from_url(_url, name=f"DATABASE_REPLICA_URLS (entry {_number})")
    _replica_pool = (
        {"pool": {**DATABASES["default"]["OPTIONS"]["pool"], "timeout": min(MEMORYHUB_DB_POOL_TIMEOUT, DATABASE_REPLICA_CONNECT_TIMEOUT)}}
        if MEMORYHUB_DB_POOL_SIZE else {}
    )
    DATABASES[f"replica_{_number}"] = {
        "ENGINE": "memoryhub.postgresql",
        "CONN_MAX_AGE": DATABASES["default"]["CONN_MAX_AGE"],
        "CONN_HEALTH_CHECKS": True,
        **_replica,
        "OPTIONS": {"connect_timeout": DATABASE_REPLICA_CONNECT_TIMEOUT, **_connection_options(_replica["OPTIONS"]), **_replica_pool},
        # The test runner creates no database on a replica: its alias reads the test database.
        "TEST": {"MIRROR": "default"},
    }
    MEMORYHUB_DB_REPLICA_ALIASES.append(f"replica_{_number}")
DATABASE_ROUTERS = ["memoryhub.replicas.ReadReplicaRouter"]

# --- Celery on Redis -----------------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None  # jobs record their own state in IndexJob rows
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SOFT_TIME_LIMIT = env_int("MEMORYHUB_TASK_SOFT_TIME_LIMIT", 600, minimum=1)
CELERY_TASK_TIME_LIMIT = env_int("MEMORYHUB_TASK_TIME_LIMIT", 660, minimum=1)
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# The worker's CPU priority below the web's (nice increment, 0-19; 0 = as the web): indexing is
# background work, and on a machine shared with the web processes a tenant's flood of uploads must not
# slow the other tenants' searches. Raised once at worker start; the pool's processes inherit it.
MEMORYHUB_WORKER_NICE = env_int("MEMORYHUB_WORKER_NICE", 10, minimum=0, maximum=19)
# The queue every task is sent to and every worker reads: give each deployment that shares a Redis its own.
CELERY_TASK_DEFAULT_QUEUE = env_str("MEMORYHUB_TASK_QUEUE") or "celery"
# Re-indexing and the periodic sweeps' work (re-embedding after a model change, failed files tried again)
# go to a second queue, "<queue>.background" (indexing/recovery.py job_queue). A worker started without
# --queues reads both, in turn (kombu's round-robin), so an upload waits behind at most one background
# job per worker process, not behind every agent's re-index.
CELERY_TASK_QUEUES = [
    Queue(name, routing_key=name) for name in (CELERY_TASK_DEFAULT_QUEUE, f"{CELERY_TASK_DEFAULT_QUEUE}{BACKGROUND_QUEUE_SUFFIX}")
]
# With acks_late, a message a worker took but never acknowledged (the worker was killed) goes back to
# the queue once this many seconds have passed: longer than any task may run (MEMORYHUB_TASK_TIME_LIMIT),
# or a slow task would be handed to a second worker while it still runs. The lease below usually
# recovers a dead worker's files far sooner.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("MEMORYHUB_TASK_TIME_LIMIT", 660, minimum=1) + 240,
    # Publishing from a web request must not hang when Redis is unreachable (the outbox takes over): nor when
    # it accepts the connection and never answers (a stopped process, a network dropping the replies), where
    # a publish waited for the reply without end (tests/reliability/test_broker_down.py). A worker's wait for
    # its next task (BRPOP, kombu's brpop_timeout: 1 s) stays within it.
    "socket_connect_timeout": 2,
    "socket_timeout": 2,
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Without a broker (`make run` on a machine without Redis), tasks run in the web process.
CELERY_TASK_ALWAYS_EAGER = env_bool("MEMORYHUB_TASKS_EAGER", False)
CELERY_TASK_EAGER_PROPAGATES = False

# --- Embeddings ----------------------------------------------------------------------------------
OPENAI_API_KEY = env_str("OPENAI_API_KEY")
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL")
# The native providers (indexing/embedding_http.py). An unset base URL means the provider's public API
# (Ollama: http://127.0.0.1:11434); set one for a proxy, a regional endpoint or a local fake.
GEMINI_API_KEY = env_str("GEMINI_API_KEY")
GEMINI_BASE_URL = env_str("GEMINI_BASE_URL")
VOYAGE_API_KEY = env_str("VOYAGE_API_KEY")
VOYAGE_BASE_URL = env_str("VOYAGE_BASE_URL")
COHERE_API_KEY = env_str("COHERE_API_KEY")
COHERE_BASE_URL = env_str("COHERE_BASE_URL")
OLLAMA_BASE_URL = env_str("OLLAMA_BASE_URL")


def _auto_provider() -> str:
    """`auto`: the first configured of openai, gemini, voyage, local (installed), else none. Decided once,
    at start: a provider that fails later is not swapped for the next one, since its vectors would not be
    comparable with the index's (queries fall back to keywords, indexing retries; README "Outages")."""
    if OPENAI_API_KEY or OPENAI_BASE_URL:
        return "openai"
    if GEMINI_API_KEY or GEMINI_BASE_URL:
        return "gemini"
    if VOYAGE_API_KEY or VOYAGE_BASE_URL:
        return "voyage"
    if importlib.util.find_spec("sentence_transformers") is not None:
        return "local"
    return "none"


# `auto` (the default) resolves at start; the resolved name is MEMORYHUB_EMBEDDING_PROVIDER and
# MEMORYHUB_EMBEDDING_PROVIDER_CHOSEN says how it was chosen ("auto" or "setting") for the run banner,
# `status` and the admin. `fake` is the deterministic, call-counting provider of the test suite.
_EMBEDDING_PROVIDER_SETTING = env_choice(
    "MEMORYHUB_EMBEDDING_PROVIDER",
    "auto",
    ["auto", "openai", "gemini", "voyage", "cohere", "ollama", "local", "none", "fake"],
)
MEMORYHUB_EMBEDDING_PROVIDER_CHOSEN = "auto" if _EMBEDDING_PROVIDER_SETTING == "auto" else "setting"
MEMORYHUB_EMBEDDING_PROVIDER = _auto_provider() if _EMBEDDING_PROVIDER_SETTING == "auto" else _EMBEDDING_PROVIDER_SETTING
_DEFAULT_MODELS = {
    "openai": ("text-embedding-3-small", 1536),
    # gemini-embedding-001 is 3072-dimensional natively and trained to be cut to 1536 or 768; 768 keeps
    # the vectors under pgvector's 2,000-dimension limit for HNSW indexes.
    "gemini": ("gemini-embedding-001", 768),
    "voyage": ("voyage-3.5", 1024),
    "cohere": ("embed-v4.0", 1536),
    "ollama": ("nomic-embed-text", 768),
    "local": ("all-MiniLM-L6-v2", 384),
    "fake": ("fake-hash", 64),
    "none": ("", None),
}
# The input window of each provider's models in cl100k tokens: text past it never reaches the vector.
# OpenAI's embedding models read 8,191 cl100k tokens; gemini-embedding-001 2,048; Voyage's 3.5 models
# 32,000; Cohere's embed-v4.0 128k (its v3 models 512, known by name); Ollama cuts at the model's context,
# 2,048 for nomic-embed-text as Ollama loads it by default. all-MiniLM-L6-v2 (and most
# sentence-transformers models) read 256 word pieces, 254 of them text; chat and meeting text has
# 1.02-1.03 word pieces per cl100k token (both dev sets, measured with the model's tokenizer), so 220
# leaves room for denser text.
_DEFAULT_INPUT_TOKENS = {
    "openai": 8191, "gemini": 2048, "voyage": 32000, "cohere": 8191, "ollama": 2048,
    "local": 220, "fake": 8191, "none": 8191,
}
MEMORYHUB_EMBEDDING_MODEL = env_str("MEMORYHUB_EMBEDDING_MODEL") or _DEFAULT_MODELS[MEMORYHUB_EMBEDDING_PROVIDER][0]
# A model the service knows by name (memoryhub/embedding_models.py: all-MiniLM-L6-v2, bge-*, e5-*, ...)
# brings its own window and native size, whichever provider reaches it: all-MiniLM-L6-v2 behind an
# OpenAI-compatible server reads 256 word pieces, not OpenAI's 8,191 tokens.
_KNOWN_MODEL = known_model(MEMORYHUB_EMBEDDING_MODEL)
# Changing the dimensions (or the model) changes the index identity: chunks embedded under the old
# identity are ignored by vector search and re-embedded in the background; keyword search keeps
# working meanwhile. The embedding column is dimension-less, so no schema migration is needed.
MEMORYHUB_EMBEDDING_DIMENSIONS = env_int(
    "MEMORYHUB_EMBEDDING_DIMENSIONS",
    (_KNOWN_MODEL and _KNOWN_MODEL.dimensions) or _DEFAULT_MODELS[MEMORYHUB_EMBEDDING_PROVIDER][1],
    minimum=1,
    maximum=16000,
)
if MEMORYHUB_EMBEDDING_PROVIDER != "none" and MEMORYHUB_EMBEDDING_DIMENSIONS is None:
    raise ImproperlyConfigured("MEMORYHUB_EMBEDDING_DIMENSIONS must be set for this provider")
# The model's revision, part of the index identity: set it (or change it) when the model behind
# MEMORYHUB_EMBEDDING_MODEL changed while its name stayed (a server redeployed with another model under
# the same name, a moved tag): every chunk is embedded again, and no vector of the old model is taken from
# the embedding cache. The periodic model check (MEMORYHUB_EMBEDDING_CHECK_INTERVAL) finds such a change.
MEMORYHUB_EMBEDDING_REVISION = env_str("MEMORYHUB_EMBEDDING_REVISION").strip()
if not re.fullmatch(r"[A-Za-z0-9._-]{0,40}", MEMORYHUB_EMBEDDING_REVISION):
    raise ImproperlyConfigured("MEMORYHUB_EMBEDDING_REVISION may hold up to 40 letters, digits, '.', '_' and '-'")

# --- Chunking ------------------------------------------------------------------------------------
MEMORYHUB_CHUNK_TOKENS = env_int("MEMORYHUB_CHUNK_TOKENS", 400, minimum=32, maximum=8000)
MEMORYHUB_CHUNK_OVERLAP = env_int("MEMORYHUB_CHUNK_OVERLAP", 80, minimum=0, maximum=4000)
# Embed and keyword-index every chunk with its file's title (a first line "# ...") in front, so a turn
# of a dated session carries the date (indexing/services.py file_title). Off: no better on the dev
# sets (docs/search.md).
MEMORYHUB_CHUNK_TITLE_CONTEXT = env_bool("MEMORYHUB_CHUNK_TITLE_CONTEXT", False)
if MEMORYHUB_CHUNK_OVERLAP >= MEMORYHUB_CHUNK_TOKENS:
    raise ImproperlyConfigured("MEMORYHUB_CHUNK_OVERLAP must be smaller than MEMORYHUB_CHUNK_TOKENS")

# --- Ingestion: limits and quotas (indexing) --------------------------------------------------
# Largest file accepted by PUT files/<path> or one sync entry (bytes of UTF-8 content) -> 413.
MEMORYHUB_MAX_FILE_BYTES = env_int("MEMORYHUB_MAX_FILE_BYTES", 5 * 1024 * 1024, minimum=1)
# Largest POST sync request body (bytes) -> 413.
MEMORYHUB_MAX_SYNC_BYTES = env_int("MEMORYHUB_MAX_SYNC_BYTES", 64 * 1024 * 1024, minimum=1)
# Most entries in one POST sync -> 413.
MEMORYHUB_MAX_SYNC_FILES = env_int("MEMORYHUB_MAX_SYNC_FILES", 10_000, minimum=1)
# Per-agent quotas: number of files and total bytes of content stored -> 413 with the numbers.
MEMORYHUB_MAX_FILES_PER_AGENT = env_int("MEMORYHUB_MAX_FILES_PER_AGENT", 20_000, minimum=1)
MEMORYHUB_MAX_BYTES_PER_AGENT = env_int("MEMORYHUB_MAX_BYTES_PER_AGENT", 1024 * 1024 * 1024, minimum=1)
# Per-team limits, defaults for every team (a superuser overrides them per team in the admin): files and
# bytes stored by all the team's agents together -> 413, agents in the team -> refused on creation.
# 0 = no limit. The team "default", which holds the agents from before teams, starts without limits.
MEMORYHUB_TEAM_MAX_FILES = env_int("MEMORYHUB_TEAM_MAX_FILES", 200_000, minimum=0)
MEMORYHUB_TEAM_MAX_BYTES = env_int("MEMORYHUB_TEAM_MAX_BYTES", 10 * 1024 * 1024 * 1024, minimum=0)
MEMORYHUB_TEAM_MAX_AGENTS = env_int("MEMORYHUB_TEAM_MAX_AGENTS", 100, minimum=0)
# Django refuses bodies over this with a bare 400 before MemoryHub sees them; keep it above our own
# limits (a JSON-escaped file can be a few times its UTF-8 size) so the 413 comes from MemoryHub.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(MEMORYHUB_MAX_SYNC_BYTES, 6 * MEMORYHUB_MAX_FILE_BYTES) + 64 * 1024
# Retries of an indexing job after a transient provider error (exponential backoff, capped below).
MEMORYHUB_INDEX_MAX_RETRIES = env_int("MEMORYHUB_INDEX_MAX_RETRIES", 5, minimum=0, maximum=100)
# Longest wait between two of those retries (seconds).
MEMORYHUB_INDEX_RETRY_BACKOFF_MAX = env_int("MEMORYHUB_INDEX_RETRY_BACKOFF_MAX", 600, minimum=1)
# Seconds between runs of the periodic maintenance task (stuck/failed work, index identity changes).
MEMORYHUB_INDEX_MAINTENANCE_INTERVAL = env_int("MEMORYHUB_INDEX_MAINTENANCE_INTERVAL", 300, minimum=10)
# A file or job still indexing or queued after this many seconds is considered stuck and re-queued.
MEMORYHUB_INDEX_STUCK_AFTER = env_int("MEMORYHUB_INDEX_STUCK_AFTER", 900, minimum=60)
if MEMORYHUB_INDEX_STUCK_AFTER <= CELERY_TASK_TIME_LIMIT:
    raise ImproperlyConfigured("MEMORYHUB_INDEX_STUCK_AFTER must exceed MEMORYHUB_TASK_TIME_LIMIT (a live job is not stuck)")
# A file whose indexing failed is retried by the periodic task after this many seconds.
MEMORYHUB_INDEX_RETRY_FAILED_AFTER = env_int("MEMORYHUB_INDEX_RETRY_FAILED_AFTER", 900, minimum=60)
# ... and after twice that following a second failure, and so on; after this many failures in a row the
# file stays failed until its content changes or an operator re-indexes it (each retry costs embedding calls).
MEMORYHUB_INDEX_FAILED_MAX_ATTEMPTS = env_int("MEMORYHUB_INDEX_FAILED_MAX_ATTEMPTS", 8, minimum=1, maximum=1000)
# A worker touches the files it is indexing every MEMORYHUB_INDEX_LEASE_SECONDS / 3 seconds; a file
# still "indexing" without a touch for MEMORYHUB_INDEX_LEASE_SECONDS belonged to a worker that died
# (killed, out of memory, machine lost) and goes back to the queue.
MEMORYHUB_INDEX_LEASE_SECONDS = env_int("MEMORYHUB_INDEX_LEASE_SECONDS", 60, minimum=6)
# Rows an agent's background deletion deletes per transaction (agents/deletion.py): each batch holds its
# locks and its share of the write-ahead log only this long, and a worker killed midway loses one batch.
MEMORYHUB_AGENT_DELETE_BATCH_ROWS = env_int("MEMORYHUB_AGENT_DELETE_BATCH_ROWS", 5000, minimum=1, maximum=100_000)
# Seconds between runs of the recovery task: abandoned files, jobs the broker never received (the
# outbox), and failed files retried once a probe shows the embedding provider answers again.
MEMORYHUB_INDEX_RECOVERY_INTERVAL = env_int("MEMORYHUB_INDEX_RECOVERY_INTERVAL", 15, minimum=1)
CELERY_BEAT_SCHEDULE = {
    "indexing-maintenance": {
        "task": "indexing.tasks.index_maintenance_task",
        "schedule": float(MEMORYHUB_INDEX_MAINTENANCE_INTERVAL),
    },
    "indexing-recovery": {
        "task": "indexing.tasks.index_recovery_task",
        "schedule": float(MEMORYHUB_INDEX_RECOVERY_INTERVAL),
        "options": {"expires": float(MEMORYHUB_INDEX_RECOVERY_INTERVAL)},  # ticks missed while down are not piled up
    },
}


# --- Embedding providers: batching, retries (indexing) ------------------------------------------
# Inputs per embedding request (OpenAI allows up to 2048) and tokens per request (OpenAI allows 300k).
MEMORYHUB_EMBEDDING_BATCH_SIZE = env_int("MEMORYHUB_EMBEDDING_BATCH_SIZE", 256, minimum=1, maximum=2048)
MEMORYHUB_EMBEDDING_BATCH_TOKENS = env_int("MEMORYHUB_EMBEDDING_BATCH_TOKENS", 100_000, minimum=1, maximum=300_000)
# Whose embedding cache a vector goes into (and a query's vector, in the search's query cache): `agent`
# (each agent its own: no agent learns, through its jobs' cache hits or a search's time, whether another
# agent's memory holds a text or what another agent asked) or `shared` (one cache for every agent: a text
# several agents hold is embedded once, and that is visible to each of them).
MEMORYHUB_EMBEDDING_CACHE_SCOPE = env_choice("MEMORYHUB_EMBEDDING_CACHE_SCOPE", "agent", ["agent", "shared"])
# The model's input window in cl100k tokens (8191 for OpenAI's models, 220 for local all-MiniLM-L6-v2):
# chunks are never larger (MEMORYHUB_CHUNK_TOKENS is capped to it, so every line a vector is credited
# with was read by the model), and longer inputs are cut to it before they are sent. Default: the
# model's window when it is known by name (_KNOWN_MODEL), within what the provider's API takes (the
# local provider has no limit of its own: its 220 is all-MiniLM-L6-v2's); else the provider's.
_window = _DEFAULT_INPUT_TOKENS[MEMORYHUB_EMBEDDING_PROVIDER]
if _KNOWN_MODEL:
    _window = _KNOWN_MODEL.window if MEMORYHUB_EMBEDDING_PROVIDER == "local" else min(_KNOWN_MODEL.window, _window)
MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS = env_int("MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS", _window, minimum=32)
# Measure the window of a model not known by name on a remote provider (a self-hosted model behind
# OPENAI_BASE_URL under a name of its own), instead of taking the provider's: two requests the first time
# a worker indexes, stored in the database (indexing/window_probe.py). Off when
# MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS is set: the setting is the window then.
MEMORYHUB_EMBEDDING_WINDOW_PROBE = env_bool(
    "MEMORYHUB_EMBEDDING_WINDOW_PROBE", not env_str("MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS").strip()
)
# Retries of one request on 429, 5xx, timeouts and connection errors, before the error is raised.
MEMORYHUB_EMBEDDING_MAX_RETRIES = env_int("MEMORYHUB_EMBEDDING_MAX_RETRIES", 5, minimum=0, maximum=20)
# Backoff before retry n is base * 2**n seconds (with jitter, capped at the max delay and honouring Retry-After).
MEMORYHUB_EMBEDDING_RETRY_BASE_DELAY = env_float("MEMORYHUB_EMBEDDING_RETRY_BASE_DELAY", 0.5, minimum=0)
MEMORYHUB_EMBEDDING_RETRY_MAX_DELAY = env_float("MEMORYHUB_EMBEDDING_RETRY_MAX_DELAY", 30.0, minimum=0)
# Seconds one embedding request may take.
MEMORYHUB_EMBEDDING_TIMEOUT = env_float("MEMORYHUB_EMBEDDING_TIMEOUT", 60.0, minimum=0.1)
# Whether to send `dimensions` to the openai provider: auto = only for OpenAI's text-embedding-3 models when
# MEMORYHUB_EMBEDDING_DIMENSIONS differs from the model's native size (other servers often reject it).
MEMORYHUB_EMBEDDING_SEND_DIMENSIONS = env_choice(
    "MEMORYHUB_EMBEDDING_SEND_DIMENSIONS", "auto", ["auto", "always", "never"]
)
# Load the `local` model when a process starts, before it forks (the gunicorn master with
# memoryhub/gunicorn_conf.py, the Celery worker before its pool): the first search after a start is then
# as fast as the next, and the children share one copy of the model's pages (README, "Embedding providers").
MEMORYHUB_EMBEDDING_WARM_UP = env_bool("MEMORYHUB_EMBEDDING_WARM_UP", True)
# Seconds the `fake` test provider sleeps per request (0: a zero-latency embedder for benchmarks).
MEMORYHUB_EMBEDDING_FAKE_LATENCY = env_float("MEMORYHUB_EMBEDDING_FAKE_LATENCY", 0.0, minimum=0)
# Bulk work (a sync or re-index job, re-embedding after a model change) of at least this many chunks
# (one pass needing that many new embeddings, or the job's files in flight, estimated by size) goes through the provider's asynchronous batch API (openai: /v1/batches;
# gemini: asyncBatchEmbedContent) at half the price, results within the provider's window (up to 24 h);
# keyword search finds the files meanwhile. 0: never (every embedding synchronous). Uploads always stay
# synchronous. indexing/embedding_batches.py; docs/providers.md "Batch embedding".
MEMORYHUB_EMBEDDING_BATCH_API_THRESHOLD = env_int("MEMORYHUB_EMBEDDING_BATCH_API_THRESHOLD", 1000, minimum=0)
# Seconds between two polls of one batch in flight (the collector runs on this interval, beat).
MEMORYHUB_EMBEDDING_BATCH_API_POLL_INTERVAL = env_int("MEMORYHUB_EMBEDDING_BATCH_API_POLL_INTERVAL", 60, minimum=1)
CELERY_BEAT_SCHEDULE["indexing-embedding-batches"] = {
    "task": "indexing.tasks.embedding_batches_collect_task",
    "schedule": float(MEMORYHUB_EMBEDDING_BATCH_API_POLL_INTERVAL),
    "options": {"expires": float(MEMORYHUB_EMBEDDING_BATCH_API_POLL_INTERVAL)},
}
# Seconds between two checks that the model still gives the index's vectors: a few chunks' texts are
# embedded again and compared with their stored vectors (indexing/model_check.py; one small request).
# A model changed behind its name is logged as an error and shown in the admin and in `status`, and while
# a quarter or more of the checked chunks do not match, searches answer by keywords. 0: never.
MEMORYHUB_EMBEDDING_CHECK_INTERVAL = env_int("MEMORYHUB_EMBEDDING_CHECK_INTERVAL", 3600, minimum=0)
if MEMORYHUB_EMBEDDING_CHECK_INTERVAL:
    CELERY_BEAT_SCHEDULE["indexing-model-check"] = {
        "task": "indexing.tasks.model_check_task",
        "schedule": float(MEMORYHUB_EMBEDDING_CHECK_INTERVAL),
        "options": {"expires": float(MEMORYHUB_EMBEDDING_CHECK_INTERVAL)},
    }

# --- Search (search) -----------------------------------------------------------------------------
# How the two halves are fused (search/fusion.py): adaptive (minmax with each weight multiplied by
# 1 + how peaked its half's scores are for this query: what held on the dev sets, see docs/search.md),
# minmax (the vector half's scores stretched over this query's candidates, best 1 and worst 0, then
# the weighted mean), weighted (the mean of cosine similarity and BM25 scaled to the query's best keyword
# hit), or rrf (reciprocal rank fusion, scaled so rank 1 in both halves is 1.0).
MEMORYHUB_SEARCH_FUSION = env_choice("MEMORYHUB_SEARCH_FUSION", "adaptive", ["adaptive", "minmax", "weighted", "rrf"])
# Weights of the vector and keyword halves (both fusion methods). With 0.5/0.5 the best keyword hit
# without any vector support scores 0.5, well above the default min_score.
MEMORYHUB_SEARCH_VECTOR_WEIGHT = env_float("MEMORYHUB_SEARCH_VECTOR_WEIGHT", 0.5, minimum=0, maximum=1)
MEMORYHUB_SEARCH_KEYWORD_WEIGHT = env_float("MEMORYHUB_SEARCH_KEYWORD_WEIGHT", 0.5, minimum=0, maximum=1)
if MEMORYHUB_SEARCH_VECTOR_WEIGHT + MEMORYHUB_SEARCH_KEYWORD_WEIGHT <= 0:
    raise ImproperlyConfigured("MEMORYHUB_SEARCH_VECTOR_WEIGHT and MEMORYHUB_SEARCH_KEYWORD_WEIGHT cannot both be 0")
# The k of RRF: larger values flatten the difference between ranks.
MEMORYHUB_SEARCH_RRF_K = env_int("MEMORYHUB_SEARCH_RRF_K", 60, minimum=1, maximum=1000)
# Results scoring below this (on the 0..1 scale above) are dropped unless the request says otherwise.
MEMORYHUB_SEARCH_MIN_SCORE = env_float("MEMORYHUB_SEARCH_MIN_SCORE", 0.1, minimum=0, maximum=1)
# Results per search when the request does not say, and the most a request may ask for.
MEMORYHUB_SEARCH_MAX_RESULTS = env_int("MEMORYHUB_SEARCH_MAX_RESULTS", 6, minimum=1, maximum=1000)
MEMORYHUB_SEARCH_MAX_RESULTS_LIMIT = env_int("MEMORYHUB_SEARCH_MAX_RESULTS_LIMIT", 50, minimum=1, maximum=1000)
if MEMORYHUB_SEARCH_MAX_RESULTS > MEMORYHUB_SEARCH_MAX_RESULTS_LIMIT:
    raise ImproperlyConfigured("MEMORYHUB_SEARCH_MAX_RESULTS must not exceed MEMORYHUB_SEARCH_MAX_RESULTS_LIMIT")
# Longest snippet in characters; snippets fill it with the best lines and their neighbours.
MEMORYHUB_SEARCH_SNIPPET_CHARS = env_int("MEMORYHUB_SEARCH_SNIPPET_CHARS", 700, minimum=80, maximum=20_000)
# A hit inside a stretch of matching text (the chunks around it in its file score at least as well as
# itself: a meeting's topic, a story told over several turns) gets a snippet of up to SNIPPET_STRETCH x
# SNIPPET_CHARS; an answer's snippets hold at most max_results x SNIPPET_CHARS in all, so it then ends with
# fewer results. 1 = every snippet SNIPPET_CHARS. Measured in docs/search.md.
MEMORYHUB_SEARCH_SNIPPET_STRETCH = env_float("MEMORYHUB_SEARCH_SNIPPET_STRETCH", 2.0, minimum=1, maximum=10)
# The best of a run of at least this many chunks touching one another in one file, among the answer's
# 2 x max_results best candidates, is inside a stretch too (a topic discussed at length: fusion.stretch_runs).
# 0 = off. Measured with 220-token chunks (all-MiniLM-L6-v2's window) in docs/search.md.
MEMORYHUB_SEARCH_STRETCH_RUN = env_int("MEMORYHUB_SEARCH_STRETCH_RUN", 5, minimum=0, maximum=1000)
# Files up to this size (bytes) are read whole for snippets, so a snippet can extend past its chunk into
# neighbouring lines; a larger file shows its chunks' own text, so its searches cost what a small file's do.
MEMORYHUB_SEARCH_SNIPPET_FILE_MAX_BYTES = env_int("MEMORYHUB_SEARCH_SNIPPET_FILE_MAX_BYTES", 262_144, minimum=0)
# Candidates taken from each half before fusion (at least twice max_results).
MEMORYHUB_SEARCH_CANDIDATE_POOL = env_int("MEMORYHUB_SEARCH_CANDIDATE_POOL", 100, minimum=1, maximum=10_000)
# Helper threads per process that run a hybrid search's keyword half beside its vector half (search/beside.py),
# each with a database connection of its own; 0 = the halves always run one after the other.
MEMORYHUB_SEARCH_PARALLEL_HALVES = env_int("MEMORYHUB_SEARCH_PARALLEL_HALVES", 2, minimum=0, maximum=64)
# Boost for recent dated memory files (memory/YYYY-MM-DD.md): 0 = off; b makes a file's score fall from
# 1x (today) towards (1 - b)x with its age, halving the gap every HALF_LIFE_DAYS. Undated files are evergreen.
MEMORYHUB_SEARCH_RECENCY_BOOST = env_float("MEMORYHUB_SEARCH_RECENCY_BOOST", 0.0, minimum=0, maximum=1)
MEMORYHUB_SEARCH_RECENCY_HALF_LIFE_DAYS = env_float("MEMORYHUB_SEARCH_RECENCY_HALF_LIFE_DAYS", 30.0, minimum=0.1)
# Agents with at most this many chunks are searched by keyword exactly (every chunk holding a query word
# scored, df counted at query time). Bigger ones are searched with bounded work (search/keyword.py): df
# from background stats, a GIN index of their own, and only the chunks of their rarest query words scored.
MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = env_int("MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS", 2_000, minimum=0)
# Those agents' per-lexeme document frequencies are counted (and their GIN index built) in the background
# by the `keyword_stats` task (search/keyword_stats.py) every INTERVAL seconds, and recounted when their
# chunk count moved by more than DRIFT (a fraction) since the last count.
MEMORYHUB_SEARCH_KEYWORD_STATS_DRIFT = env_float("MEMORYHUB_SEARCH_KEYWORD_STATS_DRIFT", 0.02, minimum=0, maximum=1)
MEMORYHUB_SEARCH_KEYWORD_STATS_INTERVAL = env_int("MEMORYHUB_SEARCH_KEYWORD_STATS_INTERVAL", 300, minimum=10)
# Okapi BM25 of the keyword half (search/keyword.py): K1 is how soon repeating a word stops counting,
# B how much a chunk longer than the agent's average is penalised (0: not at all). Measured on the dev
# sets in docs/search.md.
MEMORYHUB_SEARCH_BM25_K1 = env_float("MEMORYHUB_SEARCH_BM25_K1", 1.2, minimum=0, maximum=10)
MEMORYHUB_SEARCH_BM25_B = env_float("MEMORYHUB_SEARCH_BM25_B", 0.75, minimum=0, maximum=1)
# A long query (at least LONG_QUERY_LEXEMES distinct words: a pasted stretch of dialogue, not a question)
# scores with its own k1 and b. It shares words with any long chunk by chance, so length counts fully
# (b 1.0) and repeats count longer (k1 2.2): better on both dialogue-shaped checks, no question is that
# long (docs/search.md). LONG_QUERY_LEXEMES 0 = every query uses K1 and B.
MEMORYHUB_SEARCH_BM25_LONG_QUERY_LEXEMES = env_int("MEMORYHUB_SEARCH_BM25_LONG_QUERY_LEXEMES", 40, minimum=0)
MEMORYHUB_SEARCH_BM25_LONG_K1 = env_float("MEMORYHUB_SEARCH_BM25_LONG_K1", 2.2, minimum=0, maximum=10)
MEMORYHUB_SEARCH_BM25_LONG_B = env_float("MEMORYHUB_SEARCH_BM25_LONG_B", 1.0, minimum=0, maximum=1)
# A long query (a pasted stretch of dialogue) talks about several memories, so its results are spread over
# them: among the DEPTH best candidates each next result is the one whose score minus DIVERSITY x its cosine
# similarity to a result taken before is best (maximal marginal relevance; that value is its score). For
# queries of at least DIVERSITY_MIN_LEXEMES distinct words; 0 = off. DEPTH costs DEPTH x (DEPTH - 1) / 2
# similarities in one statement. Measured in docs/search.md.
MEMORYHUB_SEARCH_DIVERSITY = env_float("MEMORYHUB_SEARCH_DIVERSITY", 0.2, minimum=0, maximum=1)
MEMORYHUB_SEARCH_DIVERSITY_MIN_LEXEMES = env_int("MEMORYHUB_SEARCH_DIVERSITY_MIN_LEXEMES", 40, minimum=1)
MEMORYHUB_SEARCH_DIVERSITY_DEPTH = env_int("MEMORYHUB_SEARCH_DIVERSITY_DEPTH", 30, minimum=2, maximum=100)
# A question that names a day, a month or a year ("on 1 May, 2022", "in July 2022", "in June") favours the
# files written then or up to AFTER_DAYS later (the day from a memory/YYYY-MM-DD path or the file's title
# line): when a candidate's file is one, every other candidate's score is multiplied by 1 - BOOST. 0 = off.
# A query of MAX_LEXEMES distinct words or more is a pasted stretch of text, not a question about a date:
# the dates it names are what it talks about, so it is left as fused. Measured in docs/search.md.
MEMORYHUB_SEARCH_DATE_BOOST = env_float("MEMORYHUB_SEARCH_DATE_BOOST", 0.3, minimum=0, maximum=1)
MEMORYHUB_SEARCH_DATE_AFTER_DAYS = env_int("MEMORYHUB_SEARCH_DATE_AFTER_DAYS", 14, minimum=0, maximum=366)
MEMORYHUB_SEARCH_DATE_MAX_LEXEMES = env_int("MEMORYHUB_SEARCH_DATE_MAX_LEXEMES", 40, minimum=1)
# Each candidate's fused score lifted towards the mean of its neighbours' in its file (the chunks just
# before and after it), max(score, (score + w * mean) / (1 + w)): an answer inside a stretch of matching
# chunks is carried by them, and no chunk is lowered (search/fusion.py neighbour_credit). 0 = off. 0.5
# helped the meetings on both parts and cost LoCoMo nothing (docs/search.md).
MEMORYHUB_SEARCH_NEIGHBOUR_CREDIT = env_float("MEMORYHUB_SEARCH_NEIGHBOUR_CREDIT", 0.5, minimum=0, maximum=4)
# Keyword expansion by words of like meaning (search/expansion.py): each content word of a question of at
# most EXPANSION_MAX_QUERY_WORDS words whose BM25 IDF in the agent is at least EXPANSION_MIN_IDF (a word
# few of its chunks hold, counted as the memory's words are read), or which none of them holds, brings the
# EXPANSION_NEIGHBOURS words of the agent's memory nearest to it in meaning (cosine at least
# EXPANSION_MIN_SIMILARITY); those words are a second keyword query, and each chunk's keyword score
# becomes its own + WEIGHT x its score there, scaled so the best is 1 again. WEIGHT 0 = off. The memory's
# words and lexemes (at most EXPANSION_MAX_WORDS of each per agent) are read from its chunks, counted and
# embedded by the `memory_words` task every EXPANSION_INTERVAL seconds. Measured in docs/search.md.
MEMORYHUB_SEARCH_EXPANSION_WEIGHT = env_float("MEMORYHUB_SEARCH_EXPANSION_WEIGHT", 0.3, minimum=0, maximum=4)
MEMORYHUB_SEARCH_EXPANSION_MIN_IDF = env_float("MEMORYHUB_SEARCH_EXPANSION_MIN_IDF", 3.0, minimum=0)
MEMORYHUB_SEARCH_EXPANSION_MIN_SIMILARITY = env_float(
    "MEMORYHUB_SEARCH_EXPANSION_MIN_SIMILARITY", 0.6, minimum=0, maximum=1
)
MEMORYHUB_SEARCH_EXPANSION_NEIGHBOURS = env_int("MEMORYHUB_SEARCH_EXPANSION_NEIGHBOURS", 3, minimum=1, maximum=20)
# Of a question's rare words, the rarest this many are expanded (each costs a nearest-word lookup, and its
# neighbours lengthen the second keyword query).
MEMORYHUB_SEARCH_EXPANSION_MAX_EXPANDED = env_int("MEMORYHUB_SEARCH_EXPANSION_MAX_EXPANDED", 4, minimum=1, maximum=12)
# Whether a question's words that the memory lacks are expanded too: they are embedded with the query (in
# the same request or batch; 5-15 ms more of the local model's pass on CPU). The words the memory holds
# have their vectors already.
MEMORYHUB_SEARCH_EXPANSION_ABSENT_WORDS = env_bool("MEMORYHUB_SEARCH_EXPANSION_ABSENT_WORDS", True)
MEMORYHUB_SEARCH_EXPANSION_MAX_QUERY_WORDS = env_int("MEMORYHUB_SEARCH_EXPANSION_MAX_QUERY_WORDS", 30, minimum=1, maximum=200)
MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS = env_int("MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS", 20_000, minimum=0, maximum=1_000_000)
MEMORYHUB_SEARCH_EXPANSION_INTERVAL = env_int("MEMORYHUB_SEARCH_EXPANSION_INTERVAL", 60, minimum=5)
# Agents with at least this many embedded words get a partial HNSW index over them (built by the same task):
# the nearest-word lookup then reads a few hundred of them instead of all (an exact scan costs ~0.5 µs per
# word and question word).
MEMORYHUB_SEARCH_EXPANSION_HNSW_MIN_WORDS = env_int("MEMORYHUB_SEARCH_EXPANSION_HNSW_MIN_WORDS", 2000, minimum=1)
# Query embeddings kept in memory per process (an LRU); 0 turns the cache off.
MEMORYHUB_SEARCH_QUERY_CACHE_SIZE = env_int("MEMORYHUB_SEARCH_QUERY_CACHE_SIZE", 256, minimum=0, maximum=1_000_000)
# A hit's second snippet (its chunk's lines not shown yet) competes with other hits at the hit's score
# times this factor; 0 = one snippet per hit. 0.7 measured best on LoCoMo (docs/search.md).
MEMORYHUB_SEARCH_SECOND_SNIPPET = env_float("MEMORYHUB_SEARCH_SECOND_SNIPPET", 0.7, minimum=0, maximum=1)

# Bounds of one search (search/deadline.py): every query it sends stops after STATEMENT_TIMEOUT_MS, and
# the whole search after DEADLINE_MS, answering what it has by then (a 503 search_timeout when nothing).
MEMORYHUB_SEARCH_STATEMENT_TIMEOUT_MS = env_int("MEMORYHUB_SEARCH_STATEMENT_TIMEOUT_MS", 3000, minimum=1)
MEMORYHUB_SEARCH_DEADLINE_MS = env_int("MEMORYHUB_SEARCH_DEADLINE_MS", 6000, minimum=1)
# The query embedding (search/query_breaker.py): seconds it may take in all, one attempt; after
# BREAKER_FAILURES consecutive failures vector search is skipped for BREAKER_COOLDOWN seconds (state
# shared by every web process through REDIS_URL), then one search probes the provider again.
MEMORYHUB_SEARCH_QUERY_EMBEDDING_TIMEOUT = env_float("MEMORYHUB_SEARCH_QUERY_EMBEDDING_TIMEOUT", 2.5, minimum=0.1)
MEMORYHUB_SEARCH_BREAKER_FAILURES = env_int("MEMORYHUB_SEARCH_BREAKER_FAILURES", 3, minimum=1)
MEMORYHUB_SEARCH_BREAKER_COOLDOWN = env_float("MEMORYHUB_SEARCH_BREAKER_COOLDOWN", 30.0, minimum=0.1)

# Optional reranking (search/rerank.py), off while MEMORYHUB_RERANK_URL is empty: the full URL of a
# `/rerank` endpoint of the common shape (Cohere https://api.cohere.com/v2/rerank, Jina
# https://api.jina.ai/v1/rerank, Voyage https://api.voyageai.com/v1/rerank, a TEI server's /rerank).
# MODEL is sent as `model` (empty: TEI's shape, `texts` and no model); API_KEY as a Bearer token.
MEMORYHUB_RERANK_URL = env_str("MEMORYHUB_RERANK_URL")
MEMORYHUB_RERANK_MODEL = env_str("MEMORYHUB_RERANK_MODEL")
MEMORYHUB_RERANK_API_KEY = env_str("MEMORYHUB_RERANK_API_KEY")
# How many of the best candidates are reranked, and the seconds the call may take (never past the
# search's deadline); on failure or timeout the unreranked order is answered and `message` says so.
MEMORYHUB_RERANK_TOP_N = env_int("MEMORYHUB_RERANK_TOP_N", 20, minimum=2, maximum=1000)
MEMORYHUB_RERANK_TIMEOUT = env_float("MEMORYHUB_RERANK_TIMEOUT", 1.5, minimum=0.05)

# The chunk table is hash-partitioned by agent into this many tables (indexing/partitions.py): each
# agent's own indexes are planned, locked and built with its partition alone. Read when the table is
# created (migration indexing/0007) and as the default of `manage.py chunk_partition`, which changes it
# online; 0 = one plain table.
MEMORYHUB_CHUNK_PARTITIONS = env_int("MEMORYHUB_CHUNK_PARTITIONS", 64, minimum=0, maximum=1024)

# Vector index (search/vector.py, search/vector_index.py). pgvector#259: an HNSW index over every agent
# loses recall once the query is filtered to one agent, so small agents are searched exactly and big
# agents get a partial HNSW index of their own, built in the background by the `vector_indexes` task.
# Agents with at least this many embedded chunks get their own HNSW index (exact search below it).
MEMORYHUB_VECTOR_HNSW_MIN_CHUNKS = env_int("MEMORYHUB_VECTOR_HNSW_MIN_CHUNKS", 5000, minimum=1)
# hnsw.ef_search for one query is max(this, 2 x the candidates asked for); pgvector caps it at 1000.
MEMORYHUB_VECTOR_EF_SEARCH = env_int("MEMORYHUB_VECTOR_EF_SEARCH", 100, minimum=1, maximum=1000)
# A filter (sources, path prefix, dates) keeping less than this fraction of an indexed agent's chunks
# is searched exactly: HNSW would find too few survivors among its candidates.
MEMORYHUB_VECTOR_EXACT_FILTER_FRACTION = env_float(
    "MEMORYHUB_VECTOR_EXACT_FILTER_FRACTION", 0.1, minimum=0.0, maximum=1.0
)
# pgvector >= 0.8 only (the docker-compose image): keep scanning the HNSW graph until enough rows pass
# the filter. relaxed_order is re-sorted afterwards; off disables it.
MEMORYHUB_VECTOR_ITERATIVE_SCAN = env_choice(
    "MEMORYHUB_VECTOR_ITERATIVE_SCAN", "relaxed_order", ["relaxed_order", "strict_order", "off"]
)
# HNSW build parameters of the per-agent indexes (pgvector defaults: m=16, ef_construction=64).
MEMORYHUB_VECTOR_HNSW_M = env_int("MEMORYHUB_VECTOR_HNSW_M", 16, minimum=2, maximum=100)
MEMORYHUB_VECTOR_HNSW_EF_CONSTRUCTION = env_int("MEMORYHUB_VECTOR_HNSW_EF_CONSTRUCTION", 64, minimum=4, maximum=1000)
# Seconds between runs of the periodic task that builds and drops the per-agent indexes.
MEMORYHUB_VECTOR_INDEX_INTERVAL = env_int("MEMORYHUB_VECTOR_INDEX_INTERVAL", 300, minimum=10)
CELERY_BEAT_SCHEDULE["search-vector-indexes"] = {
    "task": "search.tasks.vector_indexes_task",
    "schedule": float(MEMORYHUB_VECTOR_INDEX_INTERVAL),
}
CELERY_BEAT_SCHEDULE["search-keyword-stats"] = {
    "task": "search.tasks.keyword_stats_task",
    "schedule": float(MEMORYHUB_SEARCH_KEYWORD_STATS_INTERVAL),
}
CELERY_BEAT_SCHEDULE["search-memory-words"] = {
    "task": "search.tasks.memory_words_task",
    "schedule": float(MEMORYHUB_SEARCH_EXPANSION_INTERVAL),
    "options": {"expires": float(MEMORYHUB_SEARCH_EXPANSION_INTERVAL)},
}

# --- Integrations: tools, MCP, admin console (integrations) --------------------------------------
# OpenAPI 3 at /api/schema/ and its docs page at /api/docs/; the sidecar serves Swagger UI's files
# locally so the page works without internet access.
INSTALLED_APPS += ["drf_spectacular", "drf_spectacular_sidecar"]
SPECTACULAR_SETTINGS = {
    "TITLE": "MemoryHub API",
    "DESCRIPTION": (
        "Searchable long-term memory for AI agents. Every call carries `Authorization: Bearer <agent token>`; "
        "the token decides the agent. Errors are always `{\"error\": {\"code\", \"message\"}}`. "
        "MCP clients use the streamable-HTTP endpoint at `/mcp` instead."
    ),
    "VERSION": "1",
    "SCHEMA_PATH_PREFIX": r"/api/v1",  # operations are tagged by what follows: files, sync, tools, …
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "DEFAULT_GENERATOR_CLASS": "memoryhub.openapi.SchemaGenerator",
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"persistAuthorization": True},
    "ENUM_NAME_OVERRIDES": {"SourceEnum": ["memory", "session", "workspace"]},  # MemoryFile.Source
}

# --- Tokens --------------------------------------------------------------------------------------
# How often a token's last-used time is written (seconds); a write per request would be wasteful.
MEMORYHUB_TOKEN_LAST_USED_INTERVAL = env_int("MEMORYHUB_TOKEN_LAST_USED_INTERVAL", 60, minimum=0)

# Request rates per token, counted in Redis across web processes ("600/min"; units s, min, hour, day;
# 0 = no limit). Past a limit: 429 rate_limited with Retry-After. `search` covers POST search, tool
# calls and MCP tool calls; `write` PUT and DELETE of files; `sync` the webhook; `read` the rest.
MEMORYHUB_RATE_LIMITS = {
    "search": rate_parse(env_str("MEMORYHUB_RATE_LIMIT_SEARCH", "600/min"), name="MEMORYHUB_RATE_LIMIT_SEARCH"),
    "write": rate_parse(env_str("MEMORYHUB_RATE_LIMIT_WRITE", "600/min"), name="MEMORYHUB_RATE_LIMIT_WRITE"),
    "sync": rate_parse(env_str("MEMORYHUB_RATE_LIMIT_SYNC", "120/min"), name="MEMORYHUB_RATE_LIMIT_SYNC"),
    "read": rate_parse(env_str("MEMORYHUB_RATE_LIMIT_READ", "1200/min"), name="MEMORYHUB_RATE_LIMIT_READ"),
}
# Requests of all a team's agents together, any kind (same syntax; 0 = no limit) -> 429 team_rate_limited.
MEMORYHUB_TEAM_RATE_LIMIT = rate_parse(env_str("MEMORYHUB_TEAM_RATE_LIMIT", "6000/min"), name="MEMORYHUB_TEAM_RATE_LIMIT")
# Requests one token may have in progress at once in one web process (0 = no cap). Beyond it: 429
# rate_limited with Retry-After 1, from the first middleware. With 8 threads a process, one tenant can
# then never hold every thread, however it sends (agents/throttles.py).
MEMORYHUB_TOKEN_MAX_CONCURRENT = env_int("MEMORYHUB_TOKEN_MAX_CONCURRENT", 4, minimum=0)
# The same cap for a token that was answered 429 for its rate in this process within the last minute
# (0 = no separate cap): a tenant past its rate is served one request at a time, so what it is still
# admitted runs beside the other tenants' requests rather than several at once among them.
MEMORYHUB_TOKEN_MAX_CONCURRENT_LIMITED = env_int("MEMORYHUB_TOKEN_MAX_CONCURRENT_LIMITED", 1, minimum=0)
# A token that keeps sending while told to wait (Retry-After) is told to wait twice as long at its next
# refusal, up to this many seconds, and held that long by every web process (0 = never longer than the
# limiter's own wait). A client that waits as told never meets it.
MEMORYHUB_RATE_LIMIT_MAX_PENALTY = env_int("MEMORYHUB_RATE_LIMIT_MAX_PENALTY", 60, minimum=0, maximum=3600)
# A connection whose client sent again before the wait it was told is not read again until that wait is
# over, up to this many seconds (memoryhub/gunicorn_worker.py; 0 = off): its next request waits in the
# socket buffer instead of costing the web process a refusal.
MEMORYHUB_RATE_LIMIT_HOLD_SECONDS = env_float("MEMORYHUB_RATE_LIMIT_HOLD_SECONDS", 10.0, minimum=0, maximum=3600)
# Admin login: after this many failed attempts for one username from one address, that pair is locked
# out (even with the right password) until this many seconds pass without another attempt.
MEMORYHUB_ADMIN_LOGIN_MAX_FAILURES = env_int("MEMORYHUB_ADMIN_LOGIN_MAX_FAILURES", 10, minimum=1)
MEMORYHUB_ADMIN_LOGIN_LOCKOUT_SECONDS = env_int("MEMORYHUB_ADMIN_LOGIN_LOCKOUT_SECONDS", 900, minimum=1)
# How far a signed write's timestamp may be from the server's clock (agents with a webhook secret).
MEMORYHUB_WEBHOOK_TOLERANCE_SECONDS = env_int("MEMORYHUB_WEBHOOK_TOLERANCE_SECONDS", 300, minimum=1, maximum=86400)

# --- REST framework ------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["agents.authentication.AgentTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["agents.permissions.HasAgentToken"],
    "DEFAULT_THROTTLE_CLASSES": ["agents.throttles.TokenRateThrottle"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["memoryhub.parsers.BoundedJSONParser"],
    "EXCEPTION_HANDLER": "memoryhub.errors.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "memoryhub.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}

# --- Operations: readiness, structured logs, metrics (docs/operations.md) ------------------------
# Seconds /readyz waits for workers to answer; a worker busy with a long task still answers (solo pool aside).
MEMORYHUB_READYZ_TIMEOUT = env_float("MEMORYHUB_READYZ_TIMEOUT", 1.0, minimum=0.1, maximum=30)
# json: one JSON object per line with the request id (production); text: plain lines for development.
MEMORYHUB_LOG_FORMAT = env_choice("MEMORYHUB_LOG_FORMAT", "json", ["json", "text"])
MIDDLEWARE.insert(0, "memoryhub.observability.RequestLogMiddleware")
# /metrics answers a scrape carrying `Authorization: Bearer <this>`, or one from these addresses/networks
# (e.g. 10.0.0.0/8,127.0.0.1); with neither set it answers 404 to everyone.
MEMORYHUB_METRICS_TOKEN = env_str("MEMORYHUB_METRICS_TOKEN")
MEMORYHUB_METRICS_ALLOWED_IPS = env_list("MEMORYHUB_METRICS_ALLOWED_IPS", [])
for _network in MEMORYHUB_METRICS_ALLOWED_IPS:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError:
        raise ImproperlyConfigured(f"MEMORYHUB_METRICS_ALLOWED_IPS: {_network!r} is not an address or network") from None
# Seconds between runs of the task rolling searches and indexing jobs up into hourly usage counters.
MEMORYHUB_USAGE_ROLLUP_INTERVAL = env_int("MEMORYHUB_USAGE_ROLLUP_INTERVAL", 300, minimum=10)
# Seconds a web process buffers its searches' usage rows before writing them together, off the search's
# path (memoryhub/usage/services.py); 0 = each row written before its search answers.
MEMORYHUB_USAGE_FLUSH_SECONDS = env_float("MEMORYHUB_USAGE_FLUSH_SECONDS", 1.0, minimum=0, maximum=60)
CELERY_BEAT_SCHEDULE["usage-rollup"] = {"task": "memoryhub.usage.tasks.usage_rollup_task", "schedule": float(MEMORYHUB_USAGE_ROLLUP_INTERVAL)}
# Workers log through LOGGING too (same format, with the request id that queued the task).
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

from memoryhub.observability import logging_config  # noqa: E402  (needs no Django setup)

LOGGING = logging_config(
    log_format=MEMORYHUB_LOG_FORMAT,
    level=env_choice("MEMORYHUB_LOG_LEVEL", "INFO", ["DEBUG", "INFO", "WARNING", "ERROR"]),
)
