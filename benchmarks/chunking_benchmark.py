"""Micro-benchmark of the chunker: ``python -m benchmarks.chunking_benchmark [--sections N]``.

Generates a markdown file of N sections (headings, paragraphs of 20–150 words, a code block every tenth
section), chunks it with the defaults (400 / 80 tokens) and prints chunks per second. Needs no database.
"""

import argparse
import random
import time

from indexing.chunking import chunk_markdown, get_encoding

WORDS = (
    "memory agent search vector token index deploy vault rotate key meeting notes friday project user "
    "assistant release staging database migration backup schedule review budget travel berlin lisbon"
).split()


def generated_markdown(sections: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    parts = []
    for section in range(sections):
        parts.append(f"{'#' * rng.randint(1, 3)} Section {section}\n")
        for _ in range(rng.randint(1, 6)):
            parts.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 150))) + "\n")
        if section % 10 == 0:
            parts.append("```python\n" + "\n".join(f"value_{i} = compute({i})" for i in range(15)) + "\n```\n")
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    text = generated_markdown(args.sections)
    get_encoding()  # load once, outside the timing
    best = float("inf")
    for _ in range(args.repeat):
        started = time.perf_counter()
        chunks = chunk_markdown(text)
        best = min(best, time.perf_counter() - started)
    tokens = sum(chunk.token_count for chunk in chunks)
    print(
        f"{len(text.encode()) / 1e6:.1f} MB, {text.count(chr(10)) + 1} lines -> {len(chunks)} chunks "
        f"in {best:.3f} s (best of {args.repeat}): {len(chunks) / best:,.0f} chunks/s, {tokens / best / 1e6:.2f} M tokens/s"
    )


if __name__ == "__main__":
    main()
