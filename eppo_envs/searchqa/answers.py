"""Search-R1's answer check: exact match after SQuAD-style normalisation, and token F1 for `info`."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation and the articles a/an/the, collapse whitespace (Search-R1's `normalize_answer`)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES_RE.sub(" ", text).split())


def exact_match(prediction: str, golden_answers: Sequence[str]) -> bool:
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(gold) for gold in golden_answers)


def f1_score(prediction: str, golden_answers: Sequence[str]) -> float:
    """The best token-level F1 of the prediction against any golden answer."""
    pred_tokens = normalize_answer(prediction).split()
    best = 0.0
    for gold in golden_answers:
        gold_tokens = normalize_answer(gold).split()
        common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
        if common == 0:
            continue
        precision, recall = common / len(pred_tokens), common / len(gold_tokens)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def answer_in_text(golden_answers: Sequence[str], text: str) -> bool:
    """Whether any golden answer appears, as whole words, in `text` (used to reject questions that give it away)."""
    haystack = f" {normalize_answer(text)} "
    return any(f" {normalize_answer(gold)} " in haystack for gold in golden_answers if normalize_answer(gold))
