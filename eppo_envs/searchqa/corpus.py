"""Corpora for search QA: documents plus questions with fixed train/test splits, built once and cached.

A corpus builder is registered by name (`kb`, `wordnet`, ...) in `CORPUS_BUILDERS`; it writes `docs.jsonl` and
`questions.jsonl` into a folder that `eppo_envs.core.cache.cached_dir` keeps. Search indexes are cached beside it,
one per retriever backend, and shared by every env in the process.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from eppo_envs.core.cache import cached_dir
from eppo_envs.tools.retriever import Document, Retriever, load_retriever, make_retriever

SPLITS = ("train", "test")


@dataclass(frozen=True)
class Hop:
    """One retrieval step: the document that supports it and queries (best first) an oracle would try."""

    doc_id: str
    queries: tuple[str, ...]


@dataclass(frozen=True)
class Question:
    qid: str  # "<corpus>/<split>/<index>", e.g. "kb/test/00012"
    split: str
    question: str
    answers: tuple[str, ...]
    kind: str = ""  # the template or relation chain, e.g. "work.creator.born_in"
    hops: tuple[Hop, ...] = ()

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(data: dict) -> Question:
        hops = tuple(Hop(h["doc_id"], tuple(h["queries"])) for h in data.get("hops", ()))
        return Question(data["qid"], data["split"], data["question"], tuple(data["answers"]), data.get("kind", ""), hops)


@dataclass
class Corpus:
    name: str
    docs_path: Path
    questions: dict[str, list[Question]] = field(default_factory=dict)

    def documents(self) -> list[Document]:
        return read_documents(self.docs_path)


CorpusBuilder = Callable[[Path], None]  # writes docs.jsonl and questions.jsonl into the folder it is given
CORPUS_BUILDERS: dict[str, tuple[str, CorpusBuilder]] = {}  # name -> (cache version tag, builder)


def register_corpus(name: str, version: str) -> Callable[[CorpusBuilder], CorpusBuilder]:
    """Register a builder; bump `version` whenever its output changes, so old caches are not reused."""

    def wrap(build: CorpusBuilder) -> CorpusBuilder:
        CORPUS_BUILDERS[name] = (version, build)
        return build

    return wrap


def write_jsonl(path: Path, rows: Iterable[dict]) -> None:
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_documents(path: Path) -> list[Document]:
    with open(path) as f:
        return [Document(**json.loads(line)) for line in f if line.strip()]


def read_questions(path: Path) -> dict[str, list[Question]]:
    questions: dict[str, list[Question]] = {split: [] for split in SPLITS}
    with open(path) as f:
        for line in f:
            if line.strip():
                q = Question.from_json(json.loads(line))
                questions.setdefault(q.split, []).append(q)
    return questions


def built_corpus(name: str) -> Corpus:
    """The named built-in corpus, built into the cache on first use."""
    if name not in CORPUS_BUILDERS:
        raise ValueError(f"unknown corpus {name!r}; available: {', '.join(sorted(CORPUS_BUILDERS))}")
    version, build = CORPUS_BUILDERS[name]
    folder = cached_dir(f"searchqa/{name}-{version}", build)
    return Corpus(name, folder / "docs.jsonl", read_questions(folder / "questions.jsonl"))


_RETRIEVERS: dict[tuple[str, str], Retriever] = {}


def corpus_retriever(cache_key: str, docs: Callable[[], Sequence[Document]], backend: str) -> Retriever:
    """The index of a corpus for one backend: from this process, else from the disk cache, else built now."""
    key = (cache_key, backend)
    if key not in _RETRIEVERS:

        def build(folder: Path) -> None:
            retriever = make_retriever(backend)
            retriever.index(docs())
            retriever.save(folder)

        _RETRIEVERS[key] = load_retriever(cached_dir(f"searchqa/index/{cache_key}-{backend}", build))
    return _RETRIEVERS[key]
