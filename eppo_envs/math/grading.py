"""Grading a final answer against the reference with `math-verify` (symbolic equivalence, not string match)."""

from __future__ import annotations

import re
import threading

from math_verify import parse, verify

_SPACE_RE = re.compile(r"\s+")


def _as_math(text: str) -> str:
    # Plain "2^(n-1)" parsed without delimiters can collapse to its first number; `$...$` makes the whole string
    # one expression. Text that already carries LaTeX delimiters or \boxed is left alone.
    text = text.strip()
    return text if ("$" in text or "\\boxed" in text or "\\(" in text) else f"${text}$"


def _timeouts() -> dict:
    # math-verify's timeouts use SIGALRM, which only the main thread may set (env workers may run in threads).
    if threading.current_thread() is threading.main_thread():
        return {}
    return {"parsing_timeout": None}


def normalise(text: str) -> str:
    return _SPACE_RE.sub("", text.strip().strip(".").lower().replace("\\!", "").replace("$", ""))


def is_correct(prediction: str, reference: str) -> bool:
    """True when `prediction` equals `reference` mathematically (or, failing a parse, as normalised text)."""
    if not prediction.strip():
        return False
    if normalise(prediction) == normalise(reference):
        return True
    try:
        gold = parse(_as_math(reference), **_timeouts())
        pred = parse(_as_math(prediction), **_timeouts())
        if not gold or not pred:
            return False
        verify_kw = {} if not _timeouts() else {"timeout_seconds": None}
        return bool(verify(gold, pred, **verify_kw))
    except Exception:  # math-verify may raise on exotic input (sympy errors); a grader never crashes an episode
        return False
