"""Retriever speed: build time, queries per second and median latency, per backend, on any documents.

    from eppo_envs.tools.retriever_bench import measure
    result = measure("bm25s", docs, queries)          # a BenchResult

The tools layer knows no task: the standard workload (the WordNet corpus of the searchqa task) and its command line
live with that task, `python -m eppo_envs.searchqa.bench --backends bm25s lucene --queries 500`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

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
