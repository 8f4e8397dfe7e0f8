"""The retriever interface shared by search QA and WebShop, with backends chosen by name.

    retriever = make_retriever("bm25s")
    retriever.index(docs)                 # docs: list of Document(id, title, text)
    hits = retriever.search("query", k=3) # list of Hit(doc, score), best first
    retriever.save(path); load_retriever(path)

Backends register themselves in `RETRIEVERS`; `bm25s` (default) lives here, others in their own modules.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """Title and text as one string: what gets indexed (the Search-R1 / pyserini `contents` field)."""
        return f"{self.title}\n{self.text}" if self.title else self.text


@dataclass(frozen=True)
class Hit:
    doc: Document
    score: float


class Retriever(ABC):
    name: str = ""

    def __init__(self) -> None:
        self.docs: list[Document] = []

    @abstractmethod
    def index(self, docs: Sequence[Document]) -> None: ...

    @abstractmethod
    def search_many(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]: ...

    def search(self, query: str, k: int = 3) -> list[Hit]:
        return self.search_many([query], k)[0]

    @abstractmethod
    def _save_index(self, path: Path) -> None: ...

    @abstractmethod
    def _load_index(self, path: Path) -> None: ...

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        with open(path / "docs.jsonl", "w") as f:
            for doc in self.docs:
                f.write(json.dumps(asdict(doc)) + "\n")
        (path / "retriever.json").write_text(json.dumps({"backend": self.name}))
        self._save_index(path)


RETRIEVERS: dict[str, Callable[[], Retriever]] = {}


def register_retriever(name: str) -> Callable[[type[Retriever]], type[Retriever]]:
    def wrap(cls: type[Retriever]) -> type[Retriever]:
        cls.name = name
        RETRIEVERS[name] = cls
        return cls

    return wrap


def make_retriever(name: str = "bm25s", **kwargs) -> Retriever:
    _import_optional_backends()
    if name not in RETRIEVERS:
        raise ValueError(f"unknown retriever backend {name!r}; available: {', '.join(sorted(RETRIEVERS))}")
    return RETRIEVERS[name](**kwargs)


def load_retriever(path: str | Path) -> Retriever:
    path = Path(path)
    meta = json.loads((path / "retriever.json").read_text())
    retriever = make_retriever(meta["backend"])
    with open(path / "docs.jsonl") as f:
        retriever.docs = [Document(**json.loads(line)) for line in f]
    retriever._load_index(path)
    return retriever


def _import_optional_backends() -> None:
    """Backends with heavy optional dependencies live in their own modules and register on import."""
    from importlib import import_module

    for module in ("eppo_envs.tools.retriever_lucene", "eppo_envs.tools.retriever_dense"):
        try:
            import_module(module)
        except ImportError:  # the module or its optional dependency is absent: that backend is unavailable
            pass


@register_retriever("bm25s")
class BM25sRetriever(Retriever):
    """BM25 (Lucene's variant, k1=0.9, b=0.4 like pyserini's defaults) on bm25s' sparse matrices."""

    def __init__(self, k1: float = 0.9, b: float = 0.4, stopwords: str | None = "en") -> None:
        super().__init__()
        import bm25s

        self._bm25s = bm25s
        self.stopwords = stopwords
        self.model = bm25s.BM25(k1=k1, b=b, method="lucene")

    def _tokenize(self, texts: Sequence[str]):
        return self._bm25s.tokenize(list(texts), stopwords=self.stopwords, show_progress=False)

    def index(self, docs: Sequence[Document]) -> None:
        self.docs = list(docs)
        self.model.index(self._tokenize([d.contents for d in self.docs]), show_progress=False)

    def search_many(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        k = min(k, len(self.docs))
        if k == 0:
            return [[] for _ in queries]
        tokens = self._bm25s.tokenize(list(queries), stopwords=self.stopwords, show_progress=False, return_ids=False)
        results: list[list[Hit]] = []
        for query_tokens in tokens:
            # Words the index has never seen carry no signal; a query made only of them matches nothing.
            known = [t for t in query_tokens if t in self.model.vocab_dict]
            if not known:
                results.append([])
                continue
            ids, scores = self.model.retrieve([known], k=k, show_progress=False)
            results.append([Hit(self.docs[int(i)], float(s)) for i, s in zip(ids[0], scores[0], strict=True) if s > 0])
        return results

    def _save_index(self, path: Path) -> None:
        self.model.save(path / "bm25s", show_progress=False)

    def _load_index(self, path: Path) -> None:
        self.model = self._bm25s.BM25.load(path / "bm25s", show_progress=False)
