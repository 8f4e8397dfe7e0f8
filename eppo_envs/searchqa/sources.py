"""Where an env's questions and search index come from: a built-in corpus, a mix of them, or the user's files.

    load_source("kb")                       # generated fictional knowledge base (default)
    load_source("wordnet")                  # WordNet glosses
    load_source("mix")                      # both corpora in one index, questions alternating
    load_source("user", corpus_path="wiki.jsonl", qa_path="nq.jsonl")           # Search-R1 style files
    load_source("user", index_path="wiki-18-bm25", qa_path={"train": ..., "test": ...})  # a prebuilt Lucene index
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import eppo_envs.searchqa.kb  # noqa: F401  (registers the corpus)
import eppo_envs.searchqa.wordnet  # noqa: F401
from eppo_envs.searchqa.answers import normalize_answer
from eppo_envs.searchqa.corpus import SPLITS, Question, built_corpus, corpus_retriever, read_documents
from eppo_envs.tools.retriever import Document, Retriever, document_from_json

log = logging.getLogger(__name__)


@dataclass
class Source:
    name: str
    questions: dict[str, list[Question]]
    retriever: Retriever


_SOURCES: dict[tuple, Source] = {}


def load_source(
    corpus: str = "kb",
    backend: str = "bm25s",
    corpus_path: str | Path | None = None,
    qa_path: str | Path | dict[str, str | Path] | None = None,
    index_path: str | Path | None = None,
) -> Source:
    key = (corpus, backend, str(corpus_path), json.dumps(qa_path, default=str, sort_keys=True), str(index_path))
    if key not in _SOURCES:
        if corpus == "user" or corpus_path or index_path:
            _SOURCES[key] = _user_source(backend, corpus_path, qa_path, index_path)
        elif corpus == "mix":
            _SOURCES[key] = _mix_source(backend)
        else:
            built = built_corpus(corpus)
            _SOURCES[key] = Source(corpus, built.questions, corpus_retriever(built.docs_path.parent.name,
                                                                             built.documents, backend))
    return _SOURCES[key]


def _mix_source(backend: str) -> Source:
    """The fictional KB and WordNet in one index, questions interleaved so any prefix of a split holds both."""
    parts = [built_corpus("kb"), built_corpus("wordnet")]
    questions = {split: _interleave([p.questions.get(split, []) for p in parts]) for split in SPLITS}
    key = "mix-" + "-".join(p.docs_path.parent.name for p in parts)
    retriever = corpus_retriever(key, lambda: [d for p in parts for d in p.documents()], backend)
    return Source("mix", questions, retriever)


def _interleave(lists: list[list[Question]]) -> list[Question]:
    out: list[Question] = []
    for i in range(max(map(len, lists), default=0)):
        out += [items[i] for items in lists if i < len(items)]
    return out


def _user_source(backend: str, corpus_path, qa_path, index_path) -> Source:
    if qa_path is None:
        raise ValueError("corpus='user' needs qa_path: a JSONL file of {question, golden_answers} "
                         "(or a dict {'train': path, 'test': path})")
    if index_path is not None:
        from eppo_envs.tools.retriever_lucene import LuceneRetriever

        retriever: Retriever = LuceneRetriever.open_prebuilt(index_path)
        name = Path(index_path).name
    elif corpus_path is not None:
        path = Path(corpus_path)
        if not path.is_file():
            raise FileNotFoundError(f"corpus file not found: {path}")
        stat = path.stat()
        digest = hashlib.sha1(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
        retriever = corpus_retriever(f"user-{path.stem}-{digest}", lambda: read_user_corpus(path), backend)
        name = path.stem
    else:
        raise ValueError("corpus='user' needs corpus_path (a JSONL corpus) or index_path (a prebuilt Lucene index)")
    return Source(name, read_user_questions(qa_path, name), retriever)


def read_user_corpus(path: Path) -> list[Document]:
    """JSONL with `id` and `contents` (pyserini / Search-R1) or `title` and `text`."""
    if path.name == "docs.jsonl":
        return read_documents(path)
    docs = []
    with open(path) as f:
        for n, line in enumerate(f):
            if line.strip():
                try:
                    docs.append(document_from_json(json.loads(line), default_id=str(n)))
                except (json.JSONDecodeError, AttributeError) as exc:
                    raise ValueError(f"{path}:{n + 1}: not a JSON object ({exc})") from None
    return docs


def read_user_questions(qa_path: str | Path | dict[str, str | Path], name: str) -> dict[str, list[Question]]:
    """NQ/HotpotQA JSONL as Search-R1 ships it: `question` and `golden_answers` (or `answer`/`answers`).

    One file: a `split` field decides, else every tenth question is `test`. A dict gives a file per split.
    Answers are read as text (HotpotQA-style files may hold numbers). A golden answer that the normalisation
    empties ("The The", "-") is dropped, and a question left with none is skipped, both with a warning: exact
    match would let any answer made of articles or punctuation ("a", ".") win it.
    """
    files = qa_path if isinstance(qa_path, dict) else {None: qa_path}
    rows: list[tuple[str | None, dict]] = []
    unscorable: list[str] = []
    skipped = 0
    for split, file in files.items():
        file = Path(file)
        if not file.is_file():
            raise FileNotFoundError(f"QA file not found: {file}")
        with open(file) as f:
            for n, line in enumerate(f):
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                    answers = data.get("golden_answers", data.get("answers", data.get("answer")))
                except (json.JSONDecodeError, AttributeError) as exc:
                    raise ValueError(f"{file}:{n + 1}: not a JSON object ({exc})") from None
                if "question" not in data or answers in (None, "", []):
                    raise ValueError(f"{file}:{n + 1}: needs 'question' and 'golden_answers'")
                given = [str(a) for a in answers] if isinstance(answers, list) else [str(answers)]
                kept = [a for a in given if normalize_answer(a)]
                unscorable += [a for a in given if not normalize_answer(a)]
                if kept:
                    rows.append((split or data.get("split"), {"q": data["question"], "a": kept}))
                else:
                    skipped += 1
    if unscorable:
        log.warning("%s: dropped %d golden answers that normalise to nothing (e.g. %r), so 'a' or '.' cannot match "
                    "them; %d questions had no other and were skipped", qa_path, len(unscorable), unscorable[0],
                    skipped)
    questions: dict[str, list[Question]] = {s: [] for s in SPLITS}
    for n, (split, row) in enumerate(rows):
        split = split if split in SPLITS else ("test" if n % 10 == 0 else "train")
        answers = tuple(row["a"])
        index = len(questions[split])
        questions[split].append(Question(f"{name}/{split}/{index:05d}", split, str(row["q"]), answers, "user"))
    return questions
