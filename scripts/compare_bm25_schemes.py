"""Compare the two BM25 scoring schemes on a corpus: index build time of each and the top-k
overlap of their results for questions of the bundled sets (the questions as queries).

    PYTHONPATH=. python scripts/compare_bm25_schemes.py [--corpus data/cache/corpus/wiki-excerpt.jsonl]
        [--n 100] [--k 10] [--repeats 3]

single_field: one `contents` field, k1 0.9 / b 0.4 (the default profile); es_best_fields: the
official Elasticsearch multi_match best_fields over title and text, k1 1.2 / b 0.75 (paper).
Build times alternate between the schemes `--repeats` times (the machine is shared; the median
is printed with every run).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from seakr_repro.data.records import sample
from seakr_repro.data.registry import load_dataset
from seakr_repro.core.paths import CACHE_DIR
from seakr_repro.retrieval import build_index, open_searcher

SCHEMES = ("single_field", "es_best_fields")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=str(CACHE_DIR / "corpus" / "wiki-excerpt.jsonl"))
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    questions = [r.question for name in ("bundled-2wiki", "bundled-hotpotqa", "bundled-single")
                 for r in load_dataset(name)]
    queries = [q for q in sample(questions, min(args.n, len(questions)), seed=42)]
    with tempfile.TemporaryDirectory() as tmp:
        times = {s: [] for s in SCHEMES}
        infos = {}
        for _ in range(args.repeats):
            for s in SCHEMES:
                t = time.perf_counter()
                infos[s] = build_index(args.corpus, Path(tmp) / s, progress=False, scheme=s)
                times[s].append(time.perf_counter() - t)
        for s in SCHEMES:
            print(f"build {s}: {', '.join(f'{x:.2f}' for x in times[s])} s "
                  f"(median {statistics.median(times[s]):.2f} s, {infos[s].doc_count} passages)")
        es = open_searcher(infos["es_best_fields"].index_dir)
        sf_dir = infos["single_field"].index_dir
        # the second pair separates the two differences: fields vs k1/b
        for label, other in (("single_field k1 0.9 b 0.4", open_searcher(sf_dir)),
                             ("single_field k1 1.2 b 0.75", open_searcher(sf_dir, k1=1.2, b=0.75))):
            overlaps, top1 = [], 0
            for q in queries:
                ha, hb = [h.id for h in other.search(q, args.k)], [h.id for h in es.search(q, args.k)]
                overlaps.append(len(set(ha) & set(hb)) / args.k)
                top1 += bool(ha and hb and ha[0] == hb[0])
            print(f"{label} vs es_best_fields, {len(queries)} queries: top-{args.k} overlap mean "
                  f"{statistics.mean(overlaps):.3f}, median {statistics.median(overlaps):.2f}, "
                  f"min {min(overlaps):.1f}; same top-1 passage {top1}/{len(queries)}")


if __name__ == "__main__":
    main()
