"""The retriever interface shared by search QA and WebShop, with backends chosen by name.

    retriever = make_retriever("bm25s")
    retriever.index(docs)                 # docs: list of Document(id, title, text)
    hits = retriever.search("query", k=3) # list of Hit(doc, score), best first
    retriever.save(path); load_retriever(path)

Backends register themselves in `RETRIEVERS`; `bm25s` (default) lives here, `lucene` (pyserini) and `dense`
(MiniLM) in their own modules, imported on demand so their heavy optional dependencies stay optional.

Every sparse backend analyses text like Anserini's default English analyzer (lower case, Lucene's 33 English
stopwords, Porter stemming, possessive 's dropped), so `bm25s` and `lucene` rank the same documents.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """Title and text as one string: what gets indexed (the Search-R1 / pyserini `contents` field)."""
        return f"{self.title}\n{self.text}" if self.title else self.text


def document_from_json(data: dict[str, Any], default_id: str = "") -> Document:
    """A Document from a Search-R1/pyserini JSON record: `id` with `title`+`text`, or `contents` ("title\ntext")."""
    doc_id = str(data.get("id", data.get("docid", default_id)))
    if "title" in data or "text" in data:
        return Document(doc_id, str(data.get("title", "")), str(data.get("text", "")))
    contents = str(data.get("contents", ""))
    title, _, text = contents.partition("\n")
    return Document(doc_id, title.strip().strip('"'), text.strip()) if text else Document(doc_id, "", contents)


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

    def config(self) -> dict[str, Any]:
        """Constructor kwargs that `load_retriever` needs to rebuild an equivalent retriever (saved with the index)."""
        return {}

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
        (path / "retriever.json").write_text(json.dumps({"backend": self.name, "config": self.config()}))
        self._save_index(path)


RETRIEVERS: dict[str, Callable[[], Retriever]] = {}


def register_retriever(name: str) -> Callable[[type[Retriever]], type[Retriever]]:
    def wrap(cls: type[Retriever]) -> type[Retriever]:
        cls.name = name
        RETRIEVERS[name] = cls
        return cls

    return wrap


def make_retriever(name: str = "bm25s", **kwargs: Any) -> Retriever:
    if name not in RETRIEVERS and name in OPTIONAL_BACKENDS:
        _import_backend(name)
    if name not in RETRIEVERS:
        known = sorted(set(RETRIEVERS) | set(OPTIONAL_BACKENDS))
        raise ValueError(f"unknown retriever backend {name!r}; available: {', '.join(known)}")
    return RETRIEVERS[name](**kwargs)


def load_retriever(path: str | Path) -> Retriever:
    path = Path(path)
    meta = json.loads((path / "retriever.json").read_text())
    retriever = make_retriever(meta["backend"], **meta.get("config", {}))
    with open(path / "docs.jsonl") as f:
        retriever.docs = [Document(**json.loads(line)) for line in f]
    retriever._load_index(path)
    return retriever


# Backends with heavy optional dependencies live in their own modules and register on import. They are imported
# only when asked for: the Lucene one starts a JVM, which costs seconds and must not share a process with torch.
OPTIONAL_BACKENDS: dict[str, str] = {
    "lucene": "eppo_envs.tools.retriever_lucene",
    "dense": "eppo_envs.tools.retriever_dense",
}


def _import_backend(name: str) -> None:
    from importlib import import_module

    try:
        import_module(OPTIONAL_BACKENDS[name])
    except ImportError as exc:  # the optional dependency is absent: say which extra provides it
        raise ImportError(f"retriever backend {name!r} is unavailable: {exc}") from exc


# Anserini's DefaultEnglishAnalyzer: StandardTokenizer keeps 1-character tokens and joins "3.5" or "don't";
# EnglishPossessiveFilter drops a trailing 's. bm25s' default pattern (2+ word characters) would differ.
LUCENE_TOKEN_PATTERN = r"(?u)\w+(?:['.]\w+)*"
_POSSESSIVE_RE = re.compile(r"(?u)(\w)['\u2019]s\b", re.IGNORECASE)


def top_k(scores: np.ndarray, k: int, positive_only: bool = True) -> list[int]:
    """Indices of the k best scores (positive ones only, by default: BM25's zero means "no term matched"),
    best first; ties go to the lower index (Lucene's docid order)."""
    k = min(k, int(np.count_nonzero(scores > 0)) if positive_only else len(scores))
    if k <= 0:
        return []
    if k < len(scores):
        threshold = np.partition(scores, len(scores) - k)[len(scores) - k]
        candidates = np.flatnonzero(scores >= threshold)  # every doc tied with the k-th, so ties resolve by index
    else:
        candidates = np.arange(len(scores))
    order = np.lexsort((candidates, -scores[candidates]))
    return [int(i) for i in candidates[order][:k]]


@register_retriever("bm25s")
class BM25sRetriever(Retriever):
    """BM25 (Lucene's variant, k1=0.9, b=0.4 like pyserini's defaults) on bm25s' sparse matrices.

    Text is analysed like Anserini's default (Porter stemmer via PyStemmer, Lucene's stopwords); pass
    `stemmer=None` or another `stopwords` list to change it. Ties rank by document order, as in Lucene.
    """

    def __init__(
        self,
        k1: float = 0.9,
        b: float = 0.4,
        stopwords: str | list[str] | None = "en",
        stemmer: str | None = "porter",
        token_pattern: str = LUCENE_TOKEN_PATTERN,
    ) -> None:
        super().__init__()
        import bm25s

        self._bm25s = bm25s
        self.k1, self.b = k1, b
        self.stopwords = stopwords
        self.stemmer_name = stemmer
        self.token_pattern = token_pattern
        self._stemmer = _make_stemmer(stemmer)
        self.model = bm25s.BM25(k1=k1, b=b, method="lucene")

    def config(self) -> dict[str, Any]:
        return {"k1": self.k1, "b": self.b, "stopwords": self.stopwords, "stemmer": self.stemmer_name,
                "token_pattern": self.token_pattern}

    def _tokenize(self, texts: Sequence[str], return_ids: bool = True):
        return self._bm25s.tokenize(
            [_POSSESSIVE_RE.sub(r"\1", t) for t in texts],
            token_pattern=self.token_pattern,
            stopwords=self.stopwords or [],
            stemmer=self._stemmer,
            return_ids=return_ids,
            show_progress=False,
        )

    def index(self, docs: Sequence[Document]) -> None:
        self.docs = list(docs)
        self.model.index(self._tokenize([d.contents for d in self.docs]), show_progress=False)

    def search_many(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        k = min(k, len(self.docs))
        if k <= 0:
            return [[] for _ in queries]
        results: list[list[Hit]] = []
        for query_tokens in self._tokenize(queries, return_ids=False):
            # Words the index has never seen carry no signal; a query made only of them matches nothing.
            # bm25s keeps "" in its vocabulary as a placeholder for empty documents; it is not a real term.
            known = [t for t in query_tokens if t and t in self.model.vocab_dict]
            if not known:
                results.append([])
                continue
            scores = np.asarray(self.model.get_scores(known), dtype=np.float64)
            results.append([Hit(self.docs[i], float(scores[i])) for i in top_k(scores, k)])
        return results

    def _save_index(self, path: Path) -> None:
        self.model.save(path / "bm25s", show_progress=False)

    def _load_index(self, path: Path) -> None:
        self.model = self._bm25s.BM25.load(path / "bm25s", show_progress=False)


def _make_stemmer(name: str | None):
    if name is None:
        return None
    try:
        import Stemmer  # PyStemmer: Snowball's C stemmers; "porter" is the original Porter algorithm, as in Lucene
    except ImportError as exc:
        raise ImportError("the bm25s backend stems with PyStemmer: pip install PyStemmer (or pass stemmer=None)") from exc
    return Stemmer.Stemmer(name)
