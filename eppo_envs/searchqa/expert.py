"""The search QA oracle: it searches for each supporting document in turn, then answers with the gold answer.

It is honest about retrieval: it only moves to the next hop once the document that supports the current one is
among the results, and it tries its next query when it is not. If every query for a hop misses (or the search
budget runs out), it logs a retrieval miss and gives up with "unknown", so its win rate measures the retriever.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from eppo_envs.searchqa.corpus import Question

log = logging.getLogger(__name__)


def expert_reply(question: Question, searches: Sequence[tuple[str, Sequence[str]]], max_searches: int) -> str:
    """The next turn, given the searches so far as (query, retrieved doc ids)."""
    if not question.hops:  # user data: no known supporting documents; one search on the question, then answer
        if not searches and max_searches > 0:
            return f"<think>I should look this up.</think>\n<search>{question.question}</search>"
        return _answer(question)
    hop, attempts = 0, 0
    for _query, doc_ids in searches:
        if hop < len(question.hops) and question.hops[hop].doc_id in doc_ids:
            hop, attempts = hop + 1, 0
        else:
            attempts += 1
    if hop == len(question.hops):
        return _answer(question)
    queries = question.hops[hop].queries
    if attempts >= len(queries) or len(searches) >= max_searches:
        log.warning("retrieval miss on %s: hop %d (%s) not found by %s", question.qid, hop + 1,
                    question.hops[hop].doc_id, [q for q, _ in searches[len(searches) - attempts :]])
        return "<think>I could not find the supporting document.</think>\n<answer>unknown</answer>"
    return f"<think>Next I need {question.hops[hop].doc_id}.</think>\n<search>{queries[attempts]}</search>"


def _answer(question: Question) -> str:
    return f"<think>The documents give the answer.</think>\n<answer>{question.answers[0]}</answer>"
