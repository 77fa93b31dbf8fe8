"""What the service knows about embedding models by name: their input window and native size.

A provider is only a way to reach a model: all-MiniLM-L6-v2 reads 256 word pieces whether it runs in
this process (`local`), behind an OpenAI-compatible server (`openai` with OPENAI_BASE_URL: TEI, vLLM,
LocalAI, Infinity...) or in Ollama. The window decides how large a chunk may be, so that every line a
vector is credited with was read by the model (indexing/services.py chunk_sizes); the native size is
the default of MEMORYHUB_EMBEDDING_DIMENSIONS for models whose vectors cannot be shortened on request.

Settings read this table at start (memoryhub/settings.py); MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS and
MEMORYHUB_EMBEDDING_DIMENSIONS override it. A model not listed keeps its provider's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass


def wordpiece_window(model_tokens: int) -> int:
    """The cl100k-token window of a model that reads ``model_tokens`` of its own tokens, two of them
    its special start and end tokens. Chat and meeting text has 1.02-1.03 word pieces per cl100k token
    (both dev sets, measured with all-MiniLM-L6-v2's tokenizer); 0.866 leaves room for denser text
    (numbers, names, other languages) and gives 220 for the 256 of all-MiniLM-L6-v2, the figure
    tests/indexing/test_embedding_window.py checks with the real tokenizer."""
    return int((model_tokens - 2) * 0.866 + 0.5)


@dataclass(frozen=True)
class KnownModel:
    window: int  # cl100k tokens the model reads
    dimensions: int | None  # native size; None when the provider's default size is asked for instead


_MINILM = KnownModel(wordpiece_window(256), 384)
_BERT_SMALL, _BERT_BASE, _BERT_LARGE = (KnownModel(wordpiece_window(512), size) for size in (384, 768, 1024))

# Names as providers spell them, lower-case, without an organisation prefix ("sentence-transformers/",
# "BAAI/") or an Ollama tag (":latest", ":v1.5"). Windows are the max_seq_length the models are served
# with (sentence-transformers' configuration, which TEI and Ollama follow); OpenAI's models are listed
# in cl100k tokens, their own tokenizer.
KNOWN_MODELS: dict[str, KnownModel] = {
    # OpenAI: text-embedding-3-* can be shortened (`dimensions`), so the provider's 1536 stays the default.
    "text-embedding-3-small": KnownModel(8191, None),
    "text-embedding-3-large": KnownModel(8191, None),
    "text-embedding-ada-002": KnownModel(8191, 1536),
    # The other APIs' models (their own tokens; the provider's window in MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS
    # is the smaller): known, so that a deployment on a provider's default model is never probed for it
    # (indexing/window_probe.py). Their vectors are shortened on request, so the provider's size stays.
    "gemini-embedding-001": KnownModel(2048, None),
    "text-embedding-004": KnownModel(2048, None),
    "voyage-3.5": KnownModel(32000, None),
    "voyage-3.5-lite": KnownModel(32000, None),
    "voyage-3-large": KnownModel(32000, None),
    "embed-v4.0": KnownModel(128_000, None),
    "embed-english-v3.0": KnownModel(wordpiece_window(512), 1024),
    "embed-multilingual-v3.0": KnownModel(wordpiece_window(512), 1024),
    # sentence-transformers
    "all-minilm-l6-v2": _MINILM,
    "all-minilm-l12-v2": _MINILM,
    "all-minilm": _MINILM,  # Ollama's name for all-MiniLM-L6-v2
    "all-mpnet-base-v2": KnownModel(wordpiece_window(384), 768),
    # BAAI, intfloat, thenlper, mixedbread, Snowflake: BERT-sized models of 512 tokens
    "bge-small-en-v1.5": _BERT_SMALL,
    "bge-base-en-v1.5": _BERT_BASE,
    "bge-large-en-v1.5": _BERT_LARGE,
    "e5-small-v2": _BERT_SMALL,
    "e5-base-v2": _BERT_BASE,
    "e5-large-v2": _BERT_LARGE,
    "multilingual-e5-small": _BERT_SMALL,
    "multilingual-e5-base": _BERT_BASE,
    "multilingual-e5-large": _BERT_LARGE,
    "gte-small": _BERT_SMALL,
    "gte-base": _BERT_BASE,
    "gte-large": _BERT_LARGE,
    "mxbai-embed-large": _BERT_LARGE,
    "mxbai-embed-large-v1": _BERT_LARGE,
    "snowflake-arctic-embed-s": _BERT_SMALL,
    "snowflake-arctic-embed-m": _BERT_BASE,
    "snowflake-arctic-embed-l": _BERT_LARGE,
    # long-context models
    "bge-m3": KnownModel(wordpiece_window(8192), 1024),
    "nomic-embed-text": KnownModel(wordpiece_window(8192), 768),
    "nomic-embed-text-v1.5": KnownModel(wordpiece_window(8192), 768),
}


def known_model(name: str) -> KnownModel | None:
    """The table's entry for a model name as a provider spells it ("sentence-transformers/all-MiniLM-L6-v2",
    "all-minilm:latest", "BAAI/bge-small-en-v1.5"), or None."""
    base = name.strip().lower().rsplit("/", 1)[-1]
    return KNOWN_MODELS.get(base) or KNOWN_MODELS.get(base.split(":", 1)[0])
