"""Experiment (docs/providers.md, "A model changed behind its name"): how a search does when a share of the
index's vectors were made by another model, against keyword search alone. It sets where the model check
pauses the vector half (indexing/model_check.py).

After the model behind the configured name changed, the query and every vector written since come from the
new model, and the older vectors from the old one: compared with a query of another model, they are noise.
Here the agents of a ``bench_variants --reuse TAG`` run keep their all-MiniLM-L6-v2 vectors (the "new"
model, which embeds the questions), and a share ``p`` of their chunks, drawn by a hash of the chunk's id,
get the fake provider's vector of the same text instead (the "old" model: a hashed bag of words, unrelated
to MiniLM's space). For each ``p`` the script runs ``bench_variants`` with the defaults, then once with
``--mode keyword``, and puts every vector back at the end (also after an error). The memory's words keep
their MiniLM vectors: after a real change they would be stale too, so keyword expansion would suffer as
well, which this leaves out (it flatters the hybrid search).

``--absent``: the share's chunks get no vector instead, as while an index is embedded again under a new
model or revision, or a large upload waits for its vectors (a provider's batch API, an outage): the vector
half then finds only the chunks that have one.

    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 python benchmarks/experiments/mixed_index.py \\
        --stale 0,0.25,0.5,0.75,1 -- --reuse s49 --part all --only locomo --only meetings --details DIR

Arguments after ``--`` are bench_variants' own (``--details DIR`` gets a folder per share).
"""

import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

import django  # noqa: E402

django.setup()

# Knuth's multiplicative hash: a share of the chunks that does not follow their order in the files.
_MULTIPLIER = 2654435761


def stale(chunk_id: int, share: float) -> bool:
    """Whether the chunk ``chunk_id`` is among the share ``share`` given another model's vector."""
    return (chunk_id * _MULTIPLIER) % 1000 < round(share * 1000)


def main(argv: list[str]) -> None:
    from django.core.management import call_command

    from agents.models import Agent
    from indexing.embedding_identity import EmbeddingIdentity
    from indexing.embeddings import FakeProvider
    from indexing.models import Chunk

    absent = "--absent" in argv[: argv.index("--")] if "--" in argv else False
    argv = [arg for arg in argv if arg != "--absent"] if absent else argv
    if "--" not in argv or argv[0] != "--stale":
        raise SystemExit("usage: mixed_index.py --stale P[,P...] [--absent] -- BENCH_VARIANTS_ARGUMENTS (see the docstring)")
    shares = [float(value) for value in argv[1].split(",")]
    rest = argv[argv.index("--") + 1 :]
    tag = rest[rest.index("--reuse") + 1]
    details = rest[rest.index("--details") + 1] if "--details" in rest else None
    call_command("bench_variants", *rest)  # indexes the agents when they are not yet
    agents = list(Agent.objects.filter(slug__startswith=f"variants-{tag}-").values_list("pk", flat=True))
    rows = list(
        Chunk.objects.filter(agent_id__in=agents).exclude(embedding=None)
        .values_list("agent_id", "id", "text", "embedding", "embedding_identity", "embedding_dimensions")
    )
    dimensions = len(rows[0][3])
    other = FakeProvider(EmbeddingIdentity("fake", "other-model", dimensions))
    others = dict(zip((row[1] for row in rows), other.embed_documents([row[2] for row in rows])))
    print(f"{len(rows)} chunks of {len(agents)} agents, {dimensions} dimensions", flush=True)

    def vectors_set(share: float) -> None:
        for agent_id, chunk_id, _, vector, identity, dims in rows:
            chunk = Chunk.objects.filter(agent_id=agent_id, id=chunk_id)
            if not stale(chunk_id, share):
                chunk.update(embedding=vector, embedding_identity=identity, embedding_dimensions=dims)
            elif absent:  # as a chunk whose vector is still to come
                chunk.update(embedding=None, embedding_identity="", embedding_dimensions=None)
            else:
                chunk.update(embedding=others[chunk_id])

    def run(name: str, *extra: str) -> None:
        print(f"--- {name}", flush=True)
        arguments = list(rest)
        if details:
            at = arguments.index("--details") + 1
            arguments[at] = os.path.join(details, name)
        call_command("bench_variants", *arguments, *extra)

    try:
        run("keyword", "--mode", "keyword")
        for share in shares:
            vectors_set(share)
            run(f"stale-{share:g}")
    finally:
        vectors_set(0.0)
        print("every vector put back", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
