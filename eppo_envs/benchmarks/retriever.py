"""Retriever speed: build time, queries per second and median latency, per backend, on any documents; the standard
workload is the searchqa task's >= 100k-document WordNet gloss corpus and its test questions.

    from eppo_envs.benchmarks.retriever import measure, wordnet_workload
    result = measure("bm25s", *wordnet_workload())    # a BenchResult

    python -m eppo_envs.benchmarks.retriever --backends bm25s lucene --queries 500
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from eppo_envs.searchqa.corpus import built_corpus
from eppo_envs.tools.retriever import Document, Retriever, make_retriever


@dataclass(frozen=True)
class BenchResult:
    backend: str
    num_docs: int
    num_queries: int
    build_s: float  # index() wall time, documents already in memory
    queries_per_s: float  # one query at a time, as an env issues them
    p50_ms: float
    p95_ms: float


def time_queries(retriever: Retriever, queries: Sequence[str], k: int = 3) -> tuple[list[float], float]:
    """Seconds per query (one at a time, as an env issues them) and the whole loop's wall time."""
    latencies = []
    start = time.perf_counter()
    for query in queries:
        t0 = time.perf_counter()
        retriever.search(query, k)
        latencies.append(time.perf_counter() - t0)
    return latencies, time.perf_counter() - start


def measure(backend: str, docs: Sequence[Document], queries: Sequence[str], k: int = 3, warmup: int = 5) -> BenchResult:
    """Index `docs` with `backend`, then time `search(q, k)` for each query (after a few untimed warm-up calls)."""
    retriever = make_retriever(backend)
    start = time.perf_counter()
    retriever.index(docs)
    build_s = time.perf_counter() - start
    for query in queries[:warmup]:
        retriever.search(query, k)
    latencies, total = time_queries(retriever, queries, k)
    ordered = sorted(latencies)
    return BenchResult(backend, len(docs), len(queries), round(build_s, 2), round(len(queries) / total, 1),
                       round(statistics.median(ordered) * 1e3, 3), round(ordered[int(0.95 * (len(ordered) - 1))] * 1e3, 3))


def wordnet_workload() -> tuple[list[Document], list[str]]:
    """The WordNet gloss corpus's documents and its test questions."""

    corpus = built_corpus("wordnet")
    return corpus.documents(), [q.question for q in corpus.questions["test"]]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Retriever build time and query speed on the WordNet corpus")
    parser.add_argument("--backends", nargs="+", default=["bm25s", "lucene"])
    parser.add_argument("--queries", type=int, default=500)
    args = parser.parse_args(argv)
    docs, queries = wordnet_workload()
    queries = queries[: args.queries]
    for backend in args.backends:
        print(json.dumps(asdict(measure(backend, docs, queries))), flush=True)


if __name__ == "__main__":
    main()
