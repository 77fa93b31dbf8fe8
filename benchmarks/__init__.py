"""The benchmark harness: search quality on the dev sets (bench_search), load and noisy neighbours
(bench_load), ingest throughput (bench_ingest), search at scale (bench_scale), a one-line file
(bench_long_line) and the chunker (python -m benchmarks.chunking_benchmark). A development tool: it is
not part of the installed package nor of the container image, and the settings install this app only
when the folder is there (docs/benchmarks.md).
"""
