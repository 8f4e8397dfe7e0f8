"""Shared tools: the code sandbox (runs/s) and the retriever backends (latency percentiles, queries/s)."""

from __future__ import annotations

import time

import numpy as np

from eppo_envs.tools.retriever import make_retriever
from eppo_train.benchmarks.common import BenchContext, Figure, failed, figure, need_module, section


@section("sandbox", "sandbox runs/s", "1 min")
def bench_sandbox(ctx: BenchContext) -> list[Figure]:
    bench = need_module("eppo_envs.benchmarks.sandbox", "the sandbox benchmark")
    sandbox = need_module("eppo_envs.tools.sandbox", "the sandbox")
    box = sandbox.Sandbox()  # one sandbox for every figure: its setup is not what is timed
    rows: list[Figure] = []
    for snippet, full_runs in (("trivial", 40), ("100ms", 16)):
        runs = ctx.size(full_runs, 4)
        for workers in (1, 2):
            how = f"python -m eppo_envs.benchmarks.sandbox --snippets {snippet} --workers {workers} --runs {runs}"
            try:
                results = [bench.measure(snippet, workers=workers, runs=runs, sandbox=box) for _ in range(ctx.reps())]
                rows.append(figure("sandbox", f"{snippet} snippet, {workers} worker(s)",
                                   [r["runs_per_s"] for r in results], "runs/s", how, backend=results[-1]["backend"],
                                   mean_run_ms=results[-1]["mean_run_ms"]))
            except Exception as exc:
                rows.append(failed("sandbox", f"{snippet} snippet, {workers} worker(s)", "runs/s", how, exc))
    return rows


@section("retriever", "retriever latency and queries/s", "1-2 min")
def bench_retriever(ctx: BenchContext) -> list[Figure]:
    bench = need_module("eppo_envs.benchmarks.retriever", "the retriever benchmark")

    docs, questions = bench.wordnet_workload()
    name = "wordnet"
    queries = questions[: ctx.size(500, 50)]
    rows: list[Figure] = []
    for backend in ("bm25s", "lucene"):
        how = f"{backend} on the {name} corpus ({len(docs):,} docs), {len(queries)} test questions one at a time, k=3"
        try:
            retriever = make_retriever(backend)
            t0 = time.perf_counter()
            retriever.index(docs)
            build_s = time.perf_counter() - t0
            for query in queries[:5]:  # warm-up (JIT, caches)
                retriever.search(query, 3)
            p50, p99, qps = [], [], []
            for _ in range(ctx.reps()):
                lat, wall = bench.time_queries(retriever, queries, 3)
                p50.append(1e3 * float(np.percentile(lat, 50)))
                p99.append(1e3 * float(np.percentile(lat, 99)))
                qps.append(len(queries) / wall)
            rows += [
                figure("retriever", f"{backend} p50 latency", p50, "ms", how, build_s=round(build_s, 2)),
                figure("retriever", f"{backend} p99 latency", p99, "ms", how),
                figure("retriever", f"{backend} queries/s", qps, "queries/s", how),
            ]
        except Exception as exc:
            rows.append(failed("retriever", f"{backend}", "ms", how, exc))
    return rows
