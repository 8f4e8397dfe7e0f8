"""The shop world every session shares: the catalogue and its BM25 search engine, loaded once per process.

`get_world(source)` is the only entry point; envs (text and browser) and the HTTP server all read the same object,
so a search returns the same products in every mode.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

from eppo_envs.core.cache import cached_dir
from eppo_envs.tools.retriever import Document, Retriever, load_retriever, make_retriever
from eppo_envs.webshop.catalogue import Catalogue, Product, generated_catalogue
from eppo_envs.webshop.real_data import load_webshop_files

SEARCH_RETURN_N = 50  # WebShop keeps the top 50 hits
PAGE_SIZE = 10


@dataclass(frozen=True)
class DataSource:
    """Where the catalogue comes from: generated (the default) or WebShop's own JSON files."""

    items_path: str | None = None  # items_shuffle.json
    attributes_path: str | None = None  # items_ins_v2.json
    human_instructions_path: str | None = None  # items_human_ins.json
    num_products: int = 10_400
    num_goals: int = 6_000
    seed: int = 0
    retriever: str = "bm25s"


def product_document(product: Product) -> Document:
    options = " ".join(v for values in product.options.values() for v in values)
    text = " ".join([product.product_category, " ".join(product.attributes), " ".join(product.features), options])
    return Document(product.asin, product.title, text)


class ShopWorld:
    def __init__(self, catalogue: Catalogue, retriever: Retriever) -> None:
        self.catalogue = catalogue
        self.retriever = retriever
        self._lock = threading.Lock()  # the HTTP server searches from its threads

    def search(self, query: str) -> list[str]:
        """The asins of the top `SEARCH_RETURN_N` products for `query`, best first."""
        with self._lock:
            hits = self.retriever.search(query, k=SEARCH_RETURN_N)
        return [h.doc.id for h in hits if h.doc.id in self.catalogue.by_asin]


def _index(catalogue: Catalogue, key: str, backend: str) -> Retriever:
    def build(tmp: Path) -> None:
        retriever = make_retriever(backend)
        retriever.index([product_document(p) for p in catalogue.products])
        retriever.save(tmp)

    return load_retriever(cached_dir(f"webshop/index-{backend}-{key}", build))


def _file_key(*paths: str | None) -> str:
    digest = hashlib.sha1()
    for path in paths:
        if path:
            stat = Path(path).stat()
            digest.update(f"{Path(path).resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


_WORLDS: dict[DataSource, ShopWorld] = {}
_WORLDS_LOCK = threading.Lock()


def get_world(source: DataSource | None = None) -> ShopWorld:
    source = source or DataSource()
    with _WORLDS_LOCK:
        if source not in _WORLDS:
            if source.items_path:

                catalogue = load_webshop_files(source.items_path, source.attributes_path,
                                               source.human_instructions_path, seed=source.seed)
                key = "files-" + _file_key(source.items_path, source.attributes_path, source.human_instructions_path)
            else:
                catalogue, folder = generated_catalogue(source.num_products, source.num_goals, source.seed)
                key = folder.name
            _WORLDS[source] = ShopWorld(catalogue, _index(catalogue, key, source.retriever))
        return _WORLDS[source]
