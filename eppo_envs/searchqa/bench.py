"""The standard retriever workload and its command line: the >= 100k-document WordNet gloss corpus and its test
questions, timed per backend by `eppo_envs.tools.retriever_bench.measure`.

    python -m eppo_envs.searchqa.bench --backends bm25s lucene --queries 500
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict

from eppo_envs.tools.retriever import Document
from eppo_envs.tools.retriever_bench import measure


def wordnet_workload() -> tuple[list[Document], list[str]]:
    """The WordNet gloss corpus's documents and its test questions."""
    from eppo_envs.searchqa.corpus import built_corpus
    from eppo_envs.searchqa.wordnet import build  # noqa: F401  (registers the corpus)

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
