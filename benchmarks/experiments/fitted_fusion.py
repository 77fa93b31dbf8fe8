"""Experiment (docs/search.md, "A fusion fitted to the candidates"): a logistic regression over each
candidate's features, in place of the fusion and the neighbour lift.

Not part of the service. Three steps, the first and last running ``manage.py bench_variants`` (its
arguments follow the step's own):

    # 1. every candidate of every question, its features and whether it holds an evidence line
    python benchmarks/experiments/fitted_fusion.py dump /tmp/tune.jsonl --reuse w220 --part tune          # and --part confirm
    # 2. fit on the tune part (each set weighs the same), print a proxy (evidence in the six best chunks)
    python benchmarks/experiments/fitted_fusion.py fit /tmp/tune.jsonl /tmp/confirm.jsonl /tmp/model.json vmm,k,nb
    # 3. the real protocol, the model's linear score (or its probability: apply-probability, with
    #    MEMORYHUB_SEARCH_MIN_SCORE=0 in the variant)
    python benchmarks/experiments/fitted_fusion.py apply-linear /tmp/model.json --reuse w220 \\
        --part all --variant 'fitted:MEMORYHUB_SEARCH_FITTED=1'

with MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 for steps 1 and 3; step 2 needs scikit-learn
(installed with the local extra). The figures in docs/search.md were measured at commit 7c183ee.
"""

import json
import math
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

FEATURES = ["vmm", "k", "vrank", "krank", "nb", "file_max", "file_n", "has_v", "has_k", "lines"]


def peak(values: list[float]) -> float:
    values = sorted(values, reverse=True)
    return (values[0] - values[9]) / values[0] if len(values) >= 10 and values[0] > 0 else 0.0


def features(candidates, spans, raw: dict) -> dict[int, dict]:
    """Per candidate: cosine (raw and min-max), scaled BM25, each half's rank as 1 / log2(1 + rank), the
    fused scores of its neighbours, its file's other candidates, and its length in lines."""
    vector, keyword, fused = raw["vector"], raw["keyword"], raw["fused"]
    low, high = (min(vector.values()), max(vector.values())) if vector else (0.0, 1.0)
    vector_rank = {cid: i + 1 for i, cid in enumerate(sorted(vector, key=lambda c: -vector[c]))}
    keyword_rank = {cid: i + 1 for i, cid in enumerate(sorted(keyword, key=lambda c: -keyword[c]))}
    by_file: dict[int, list] = {}
    for c in candidates:
        by_file.setdefault(spans[c.chunk_id][0], []).append(c)
    rows = {}
    for c in candidates:
        file_id, start, end = spans[c.chunk_id]
        others = [o for o in by_file[file_id] if o.chunk_id != c.chunk_id]
        before = [fused[o.chunk_id] for o in others if spans[o.chunk_id][1] < start and spans[o.chunk_id][2] >= start - 1]
        after = [fused[o.chunk_id] for o in others if start < spans[o.chunk_id][1] <= end + 1]
        cosine = vector.get(c.chunk_id)
        rows[c.chunk_id] = {
            "v": cosine or 0.0, "has_v": cosine is not None,
            "vmm": (cosine - low) / (high - low) if cosine is not None and high > low else 0.0,
            "k": keyword.get(c.chunk_id, 0.0), "has_k": c.chunk_id in keyword,
            "vrank": 1 / math.log2(1 + vector_rank[c.chunk_id]) if c.chunk_id in vector_rank else 0.0,
            "krank": 1 / math.log2(1 + keyword_rank[c.chunk_id]) if c.chunk_id in keyword_rank else 0.0,
            "fused": fused[c.chunk_id], "final": c.score,
            "nb": (max(before, default=0.0) + max(after, default=0.0)) / 2,
            "file_max": max((fused[o.chunk_id] for o in others), default=0.0), "file_n": math.log1p(len(others)),
            "vpk": peak(list(vector.values())), "kpk": peak(list(keyword.values())), "lines": math.log1p(end - start + 1),
        }
    return rows


def run_bench_variants(mode: str, path: str, args: list[str]) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    import benchmarks.management.commands.bench_variants as bench_variants
    import search.services as search_services
    from indexing.models import MemoryFile
    from search.fusion import _rank_key

    raw: dict = {}
    fuse_before, lift_before, results_before = search_services.fuse, search_services.neighbour_credit, search_services._results
    score_before, ask_before = bench_variants.question_score, bench_variants.Command._ask
    model = json.load(open(path)) if mode.startswith("apply") else None
    paths: dict[int, dict[int, str]] = {}

    def fuse(*, vector, keyword, **options):
        raw["vector"] = {cid: 1 - distance for cid, distance in vector}
        raw["keyword"] = {hit.chunk_id: hit.score for hit in keyword}
        ranked = fuse_before(vector=vector, keyword=keyword, **options)
        raw["fused"] = {c.chunk_id: c.score for c in ranked}
        return ranked

    def neighbour_credit(ranked, *, spans, weight):
        if model is None or not getattr(settings, "MEMORYHUB_SEARCH_FITTED", 0):
            return lift_before(ranked, spans=spans, weight=weight)
        weights, total = model["w"], sum(model["w"].values())
        rows = features(ranked, spans, raw)
        for c in ranked:
            z = model["b"] + sum(w * float(rows[c.chunk_id][name]) for name, w in weights.items())
            c.score = (z - model["b"]) / total if mode == "apply-linear" else 1 / (1 + math.exp(-z))
        return sorted(ranked, key=_rank_key)

    def results(**options):
        if mode == "dump":
            spans = options["spans"]
            raw["last"] = (features(options["candidates"], spans, raw), spans, options["agent_id"])
        return results_before(**options)

    def question_score(*, question, turns, results):
        if mode == "dump" and "last" in raw:
            rows, spans, agent_id = raw.pop("last")
            if agent_id not in paths:
                paths[agent_id] = dict(MemoryFile.objects.filter(agent_id=agent_id).values_list("id", "path"))
            evidence = [(turns[key].path, turns[key].line) for key in question.evidence]
            candidates = []
            for chunk_id, row in rows.items():
                file_id, start, end = spans[chunk_id]
                row["label"] = sum(1 for p, line in evidence if p == paths[agent_id].get(file_id) and start <= line <= end)
                row.update(cid=chunk_id, file=file_id, s=start, e=end)
                candidates.append(row)
            with open(path, "a") as out:
                out.write(json.dumps({"set": raw.get("set"), "n_ev": len(evidence), "cands": candidates}) + "\n")
        return score_before(question=question, turns=turns, results=results)

    def ask(dev, agents, **options):
        raw["set"] = dev.name
        return ask_before(dev, agents, **options)

    search_services.fuse, search_services.neighbour_credit, search_services._results = fuse, neighbour_credit, results
    bench_variants.question_score = question_score
    bench_variants.Command._ask = staticmethod(ask)
    call_command("bench_variants", *args)


def proxy(questions: list[dict], key) -> dict[str, float]:
    """Per set, the mean share of a question's evidence lines held by its six best chunks (a chunk that
    shares more than half its lines with a better one of its file skipped), snippets left out."""
    shares: dict[str, list[float]] = {}
    for q in questions:
        taken = []
        for row in sorted(q["cands"], key=lambda r: -key(r)):
            if len(taken) == 6:
                break
            if not any(f == row["file"] and min(e, row["e"]) - max(s, row["s"]) + 1 > (row["e"] - row["s"] + 1) / 2 for f, s, e in taken):
                taken.append((row["file"], row["s"], row["e"]))
        found = sum(r["label"] for r in q["cands"] if (r["file"], r["s"], r["e"]) in taken)
        shares.setdefault(q["set"], []).append(min(1.0, found / max(1, q["n_ev"])))
    return {name: round(sum(values) / len(values), 3) for name, values in shares.items()}


def fit(tune_path: str, confirm_path: str, model_path: str, names: list[str]) -> None:
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    tune, confirm = ([json.loads(line) for line in open(p)] for p in (tune_path, confirm_path))
    per_set: dict[str, int] = {}
    for q in tune:
        per_set[q["set"]] = per_set.get(q["set"], 0) + 1
    x = np.array([[float(r[n]) for n in names] for q in tune for r in q["cands"]])
    y = np.array([int(r["label"] > 0) for q in tune for r in q["cands"]])
    weight = np.array([1000.0 / per_set[q["set"]] / len(q["cands"]) for q in tune for _ in q["cands"]])
    fitted = LogisticRegression(C=1.0, max_iter=2000).fit(x, y, sample_weight=weight)
    model = {"w": dict(zip(names, map(float, fitted.coef_[0]))), "b": float(fitted.intercept_[0])}
    score = lambda r: model["b"] + sum(w * float(r[n]) for n, w in model["w"].items())  # noqa: E731
    print("model", model)
    print("defaults: tune", proxy(tune, lambda r: r["final"]), "confirm", proxy(confirm, lambda r: r["final"]))
    print("fitted:   tune", proxy(tune, score), "confirm", proxy(confirm, score))
    with open(model_path, "w") as out:
        json.dump(model, out)


if __name__ == "__main__":
    step = sys.argv[1]
    if step == "fit":
        fit(*sys.argv[2:5], names=sys.argv[5].split(",") if len(sys.argv) > 5 else FEATURES)
    elif step in ("dump", "apply-linear", "apply-probability"):
        run_bench_variants(step, sys.argv[2], sys.argv[3:])
    else:
        sys.exit(f"unknown step {step!r}: dump, fit, apply-linear or apply-probability")
