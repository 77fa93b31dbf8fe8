"""Measurement (docs/providers.md, "A model changed behind its name"): what the model check's reads cost on
a large database. It times ``indexing.model_check._sample`` (the files' range, then up to 8 files at random
places and the first vector chunk of each) and the comparison's embedding request with the fake provider,
20 times, on the database ``bench_scale --keep`` left (100 agents, 100,000 chunks):

    .venv/bin/python manage.py bench_scale --chunks 100000 --agents 100 --big 30000 --min-chunks 2000 \\
        --keep --database mh_small
    DB=mh_small .venv/bin/python manage.py shell < benchmarks/experiments/model_check_cost.py

It writes nothing (the check's own row is not stored: that table may not exist in an older database).
"""

import statistics
import time

from benchmarks.experiments.expansion_variants import bench_scale_database
from indexing.embedding_identity import configured_identity
from indexing.embeddings import get_provider
from indexing.model_check import _sample
from indexing.window_probe import cosine

ROUNDS = 20

bench_scale_database()
identity = configured_identity()
provider = get_provider()
reads, embeds, sizes, lowest = [], [], [], []
for _ in range(ROUNDS):
    started = time.perf_counter()
    sample = _sample(identity.key)
    read = time.perf_counter()
    vectors = provider.embed_documents([text for text, _ in sample])
    reads.append((read - started) * 1000)
    embeds.append((time.perf_counter() - read) * 1000)
    sizes.append(len(sample))
    lowest.append(min(cosine(new, stored) for new, (_, stored) in zip(vectors, sample)))
print(f"{identity.key}: {ROUNDS} checks, chunks compared per check {min(sizes)}-{max(sizes)}")
print(f"reads p50 {statistics.median(reads):.2f} ms, max {max(reads):.2f} ms; "
      f"fake embedding p50 {statistics.median(embeds):.2f} ms")
print(f"lowest similarity over all checks {min(lowest):.6f}")
