"""The input window of a model the service does not know by name, measured once by asking the model.

Every line a vector is credited with must have been read by the model, so a chunk is never longer than
the model's window (indexing/services.py chunk_sizes). memoryhub/embedding_models.py knows the windows of
common models by name. A model it does not know (a self-hosted model behind an OpenAI-compatible server,
served under a name of its own) would otherwise get its provider's window, 8,191 tokens for `openai`,
while it may read 256 word pieces and drop the rest without a word: the chunks would be 400 tokens and
the last 40 % of each would never reach its vector.

**The probe.** A model that cuts its input after c tokens gives every longer prefix of a text the same
vector. The probe embeds prefixes of one text at lengths that grow by about 19 % (32 tokens up to the
provider's window), shortest first, in requests of at most 8,192 tokens. Where a prefix gives the same
vector as the one before, the model stopped reading between the two rungs before; one more request holds
the lengths between those (every one for a gap of up to 64 tokens, else 64 of them), and the shortest
prefix that gives the last vector is how much the model reads. A server that refuses a prefix as too
long reads the longest it accepts. When no two prefixes agree, the model reads the provider's whole
window. all-MiniLM-L6-v2 takes two requests (about 17,000 tokens); an 8,191-token model eight (about
51,000 tokens, a fraction of a cent at OpenAI's prices), once per model and endpoint.

**The text.** Everyday English words that are one token in cl100k and one word piece in BERT-style
vocabularies, in short speaker lines: its length in cl100k tokens is the model's own count, so
``wordpiece_window`` turns it into a window with the same margin as for the models known by name
(all-MiniLM-L6-v2, measured through an OpenAI-compatible server: 254 tokens read, a window of 220, the
table's figure; tests/indexing/test_window_probe.py).

**When.** A worker measures before it chunks, the first time it indexes with such a model, and stores
the result (EmbeddingWindow, one row per identity and endpoint; the admin lists it for superusers, and
deleting the row measures again: processes read it again within FOUND_RECHECK_SECONDS). One process
measures at a time: another that needs the window meanwhile waits for the row (at most one request
timeout, MEMORYHUB_EMBEDDING_TIMEOUT, then it chunks with UNMEASURED_WINDOW), and one that waited for a
probe that failed does not probe again.
Each probe request is tried once, without the provider's retries, so a provider that is down or hangs
costs the first indexing at most one request timeout; only a rate limit (HTTP 429: the provider is up
but busy) is tried again, PROBE_RATE_LIMIT_RETRIES times after at most PROBE_RATE_LIMIT_WAIT seconds.
Until a measurement exists (the provider was down at the first indexing; the process tries again after
PROBE_RETRY_SECONDS) chunks and query windows use UNMEASURED_WINDOW, a size every model the service knows
reads whole. MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS set explicitly turns the probe off
(MEMORYHUB_EMBEDDING_WINDOW_PROBE), and the setting is the window.
"""

from __future__ import annotations

import copy
import logging
import math
import random
import threading
import time
import zlib

from django.conf import settings

from indexing.chunking import get_encoding
from indexing.embedding_identity import configured_identity
from memoryhub.embedding_models import known_model, wordpiece_window

logger = logging.getLogger(__name__)

# Providers reached over the network, whose model may be anything: `local` runs a model it knows by
# name, `fake` reads every word.
PROBED_PROVIDERS = {"openai", "gemini", "voyage", "cohere", "ollama"}
# all-MiniLM-L6-v2's window, the smallest of the models the service knows: what chunks and query windows
# hold until a model has been measured.
UNMEASURED_WINDOW = wordpiece_window(256)
LADDER_START = 32
LADDER_GROWTH = 2 ** 0.25
FINE_LENGTHS = 64
# Tokens of one probe request at most: a slow server answers each within its timeout.
GROUP_TOKENS = 8192
# Two vectors this close (cosine similarity) are the same: a server's batching changes a vector by
# about 1e-7; one more token read changes it by 1e-4 or more.
SAME = 1 - 1e-5
# A measurement missing from the database is looked for again after this many seconds.
MISSING_RECHECK_SECONDS = 30.0
# A measurement found is read again after this many seconds: a row an operator deleted (to measure a
# model that changed behind the same name) or replaced takes effect without restarting the processes.
FOUND_RECHECK_SECONDS = 300.0
# A probe request answered 429 is tried again this many times, after the server's Retry-After or a short
# backoff, capped at PROBE_RATE_LIMIT_WAIT seconds each: a burst of the fleet's own indexing must not cost
# every job of the next PROBE_RETRY_SECONDS the unmeasured window.
PROBE_RATE_LIMIT_RETRIES = 2
PROBE_RATE_LIMIT_WAIT = 10.0
# After a probe failed (the provider down, or slow past its timeout), this process's jobs index without
# one for this many seconds (with UNMEASURED_WINDOW) instead of each waiting for the provider again.
PROBE_RETRY_SECONDS = 300.0
# One process measures a model at a time (a session advisory lock of this class and the identity and
# endpoint's CRC-32; the others wait for its row, polling every PROBE_LOCK_POLL seconds for at most
# MEMORYHUB_EMBEDDING_TIMEOUT, then index with UNMEASURED_WINDOW): two workers indexing their first
# files at once would each pay the probe's requests.
PROBE_LOCK_CLASS = 0x6D68_7770  # "mhwp"
PROBE_LOCK_POLL = 0.25

_WORDS = (
    "the a to and of in we it is that for on you this with be have so was not are but they at what can just "
    "about like do if all one my there would think know will get our time when more up out some people here "
    "then now go see good also how well work new make want way day week year plan team meeting project "
    "garden trip house book call note list idea money food family friend school music game water road city "
    "home car walk talk ask tell run read write start stop open close buy pay move live feel"
).split()

_cache: dict[tuple[str, str], tuple[int | None, float]] = {}
_failed_at: dict[tuple[str, str], float] = {}
_cache_lock = threading.Lock()


class ProbeFailed(Exception):
    """The provider's answers do not tell the window (it gives one vector for different texts)."""


def window_probe_wanted() -> bool:
    """Whether the configured model's window is measured rather than taken from the settings."""
    return (
        settings.MEMORYHUB_EMBEDDING_WINDOW_PROBE
        and settings.MEMORYHUB_EMBEDDING_PROVIDER in PROBED_PROVIDERS
        and known_model(settings.MEMORYHUB_EMBEDDING_MODEL) is None
    )


def model_window() -> int:
    """The window chunks and query windows are cut to, in cl100k tokens: MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS,
    or for a measured model the smaller of that and its measurement (UNMEASURED_WINDOW before one exists)."""
    return model_window_source()[0]


def model_window_source() -> tuple[int, str]:
    """model_window() and where it comes from: "settings", "measured", or "unmeasured" (UNMEASURED_WINDOW)."""
    window = settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS
    if not window_probe_wanted():
        return window, "settings"
    measured = _measured(_key())
    if measured is None:
        return min(window, UNMEASURED_WINDOW), "unmeasured"
    return min(window, measured), "measured"


def window_measure(provider) -> int | None:
    """Measure the configured model's window with ``provider`` unless it is known or measured already,
    and store it; the window (None when it is not measured and the provider could not be probed: the
    indexing goes on with UNMEASURED_WINDOW, and the next job tries again)."""
    from search.ddl import advisory_lock

    if not window_probe_wanted() or provider is None or provider.identity != configured_identity():
        return None
    key = _key()
    measured = _measured(key)
    if measured is not None:
        return measured
    with _cache_lock:
        failed_at = _failed_at.get(key)
    if failed_at is not None and time.monotonic() - failed_at < PROBE_RETRY_SECONDS:
        return None
    deadline = time.monotonic() + settings.MEMORYHUB_EMBEDDING_TIMEOUT
    waited = False
    while True:
        with advisory_lock(PROBE_LOCK_CLASS, _lock_id(key)) as acquired:
            if acquired:
                return _measured_alone(provider, key, waited=waited)
        if time.monotonic() >= deadline:
            logger.info("another process is measuring the window of %s; chunks hold %d tokens meanwhile", key[0], UNMEASURED_WINDOW)
            return None
        waited = True
        time.sleep(PROBE_LOCK_POLL)


def _measured_alone(provider, key: tuple[str, str], *, waited: bool) -> int | None:
    """window_measure's work while this process holds the probe's lock: the row another process stored
    meanwhile, or the probe. A process that waited for the lock and finds no row follows the one that
    held it: its probe failed, and this one would fail the same way, costing its job another timeout."""
    from indexing.embeddings import ProviderError
    from indexing.models import EmbeddingWindow

    stored = _stored(key)
    if stored is not None:
        return stored
    if waited:
        logger.warning("another process could not measure the window of %s; chunks hold %d tokens meanwhile", key[0], UNMEASURED_WINDOW)
        with _cache_lock:
            _failed_at[key] = time.monotonic()
        return None
    limit = settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS
    try:
        read, cut = probe(tried_once(provider), limit=limit)
    except (ProviderError, ProbeFailed) as exc:
        logger.warning("could not measure the window of %s (%s); chunks hold %d tokens meanwhile", key[0], exc, UNMEASURED_WINDOW)
        with _cache_lock:
            _failed_at[key] = time.monotonic()
        return None
    tokens = min(limit, max(LADDER_START, wordpiece_window(read + 2))) if cut else limit
    # A process that measures without the lock (the code before it, during an upgrade) may have stored
    # the row since: both keep the first.
    row, _ = EmbeddingWindow.objects.get_or_create(
        identity=key[0], endpoint=key[1], defaults={"tokens": tokens, "read_tokens": read, "cut": cut}
    )
    logger.info("measured the window of %s: %d tokens read whole, chunks of at most %d", key[0], row.read_tokens, row.tokens)
    _remember(key, row.tokens)
    return row.tokens


def tried_once(provider):
    """``provider`` trying each request once, but for a rate limit: the probe runs before the file is
    chunked, so a provider that hangs or fails may cost the indexing one request timeout
    (MEMORYHUB_EMBEDDING_TIMEOUT), not the provider's retries (MEMORYHUB_EMBEDDING_MAX_RETRIES, up to
    about 6 minutes with the defaults); the next job after PROBE_RETRY_SECONDS tries again. A 429 is
    tried again PROBE_RATE_LIMIT_RETRIES times, at most PROBE_RATE_LIMIT_WAIT seconds apart. The model
    check (indexing/model_check.py) asks the same way: the next check tries again."""
    from indexing.embeddings import RetryPolicy

    if getattr(provider, "retry", None) is None:
        return provider
    probing = copy.copy(provider)
    probing.retry = RetryPolicy(max_retries=PROBE_RATE_LIMIT_RETRIES, max_delay=PROBE_RATE_LIMIT_WAIT, rate_limits_only=True)
    return probing


def probe(provider, *, limit: int) -> tuple[int, bool]:
    """(tokens of the probe text the model read whole, whether it cut the text at all) for prefixes of
    up to ``limit`` tokens (see the module docstring). The rungs go in requests of at most GROUP_TOKENS,
    shortest first, and the probe stops at the first request that tells: a model that reads 256 word
    pieces is measured with one request of short texts and the fine one."""
    ladder = _ladder(limit)
    vectors: list = []
    for group in _groups(ladder):
        vectors += _embedded(provider, group)
        if vectors[0] is None:
            raise ProbeFailed(f"the provider refused a text of {ladder[0]} tokens")
        for i in range(max(1, len(vectors) - len(group)), len(vectors)):
            if vectors[i] is None:  # the server refused rung i: it reads what it accepts
                return _fine(provider, low=ladder[i - 1], high=ladder[i], reference=None), True
            if _same(vectors[i], vectors[i - 1]):
                if i == 1:
                    raise ProbeFailed("the provider gives one vector for different texts")
                # The model read past rung i - 2 (rung i - 1's vector differs from it) and not past rung i - 1.
                return _fine(provider, low=ladder[i - 2], high=ladder[i - 1], reference=vectors[i - 1]), True
    return ladder[-1], False


def _groups(ladder: list[int]) -> list[list[int]]:
    groups: list[list[int]] = [[]]
    for length in ladder:
        if groups[-1] and sum(groups[-1]) + length > GROUP_TOKENS:
            groups.append([])
        groups[-1].append(length)
    return groups


def window_cache_clear() -> None:
    """Forget the measurements read and the probes failed in this process."""
    with _cache_lock:
        _cache.clear()
        _failed_at.clear()


def _fine(provider, *, low: int, high: int, reference) -> int:
    """How many tokens the model reads, between ``low`` (read) and ``high``: the shortest length whose
    vector is ``reference`` (the vector of a prefix the model did not read to its end); with no
    reference (the server refused ``high``), the longest length the server accepts. Every length is
    tried when the gap is at most FINE_LENGTHS, else FINE_LENGTHS evenly spaced ones and the answer
    errs short by less than one step."""
    step = max(1, math.ceil((high - low) / FINE_LENGTHS))
    lengths = list(range(low + step, high, step))
    if not lengths:
        return low
    read = low
    for length, vector in zip(lengths, _embedded(provider, lengths)):
        if vector is None:
            return read
        if reference is not None and _same(vector, reference):
            return length if step == 1 else read
        read = length
    return read


def _embedded(provider, lengths: list[int]) -> list[list[float] | None]:
    """The vectors of the probe text's prefixes of these lengths; None for a prefix the server refused."""
    from indexing.embeddings import ProviderInputsRejected

    texts = _prefixes(lengths)
    try:
        return list(provider.embed_documents(texts))
    except ProviderInputsRejected as exc:
        return list(exc.vectors)


def _ladder(limit: int) -> list[int]:
    lengths, length = [], float(LADDER_START)
    while length < limit:
        lengths.append(int(length))
        length *= LADDER_GROWTH
    return sorted(set(lengths) | {limit})


def _prefixes(lengths: list[int]) -> list[str]:
    encoding = get_encoding()
    tokens = encoding.encode_ordinary(_probe_text(max(lengths)))
    return [encoding.decode(tokens[:length]) for length in lengths]


def _probe_text(tokens: int) -> str:
    """Lines of "Ana: ..." and "Ben: ..." with everyday words, at least ``tokens`` cl100k tokens long; the
    same text every time."""
    rng = random.Random(7)
    lines, count = [], 0
    while count < tokens:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 16))]
        lines.append(("Ana: " if len(lines) % 2 else "Ben: ") + " ".join(words) + ".")
        count += len(words) + 3
    return "\n".join(lines)


def _same(a, b) -> bool:
    return cosine(a, b) >= SAME


def cosine(a, b) -> float:
    """The cosine similarity of two vectors (0 when either is all zeros)."""
    dot = sum(x * y for x, y in zip(a, b))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def _key() -> tuple[str, str]:
    from indexing.embeddings import provider_base_url

    return configured_identity().key, provider_base_url(settings.MEMORYHUB_EMBEDDING_PROVIDER)


def _measured(key: tuple[str, str]) -> int | None:
    """The stored measurement for ``key``, read again after FOUND_RECHECK_SECONDS (a missing one after
    MISSING_RECHECK_SECONDS)."""
    with _cache_lock:
        cached = _cache.get(key)
    if cached is not None:
        tokens, read_at = cached
        if time.monotonic() - read_at < (MISSING_RECHECK_SECONDS if tokens is None else FOUND_RECHECK_SECONDS):
            return tokens
    return _stored(key)


def _lock_id(key: tuple[str, str]) -> int:
    """``key`` as the second int of the probe's advisory lock (a signed 32-bit integer)."""
    crc = zlib.crc32("\n".join(key).encode())
    return crc - 2**32 if crc >= 2**31 else crc


def _stored(key: tuple[str, str]) -> int | None:
    """The measurement for ``key`` read from the database, and remembered."""
    from indexing.models import EmbeddingWindow

    tokens = EmbeddingWindow.objects.filter(identity=key[0], endpoint=key[1]).values_list("tokens", flat=True).first()
    _remember(key, tokens)
    return tokens


def _remember(key: tuple[str, str], tokens: int | None) -> None:
    with _cache_lock:
        _cache[key] = (tokens, time.monotonic())
