"""Grading a final answer against the reference with `math-verify` (symbolic equivalence, not string match)."""

from __future__ import annotations

import multiprocessing
import re
import threading

from math_verify import parse, verify

_SPACE_RE = re.compile(r"\s+")
# math-verify bounds itself (3 s per parse, 5 s per verify) with SIGALRM, which works in a main thread only. Off
# the main thread a child process grades instead and is killed past this deadline.
CHILD_DEADLINE_S = 20.0


def _as_math(text: str) -> str:
    # Plain "2^(n-1)" parsed without delimiters can collapse to its first number; `$...$` makes the whole string
    # one expression. Text that already carries LaTeX delimiters or \boxed is left alone.
    text = text.strip()
    return text if ("$" in text or "\\boxed" in text or "\\(" in text) else f"${text}$"


def normalise(text: str) -> str:
    return _SPACE_RE.sub("", text.strip().strip(".").lower().replace("\\!", "").replace("$", ""))


def is_correct(prediction: str, reference: str) -> bool:
    """True when `prediction` equals `reference` mathematically (or, failing a parse, as normalised text)."""
    if not prediction.strip():
        return False
    if normalise(prediction) == normalise(reference):
        return True
    if threading.current_thread() is threading.main_thread():
        return _verify(prediction, reference)
    if multiprocessing.current_process().daemon:  # a daemonic worker may start no child: no limit, as before
        return _verify(prediction, reference, timed=False)
    return _verify_in_child(prediction, reference)


def _verify(prediction: str, reference: str, timed: bool = True) -> bool:
    """math-verify, with its own timeouts when `timed` (main thread only)."""
    parse_kw, verify_kw = ({}, {}) if timed else ({"parsing_timeout": None}, {"timeout_seconds": None})
    try:
        gold, pred = parse(_as_math(reference), **parse_kw), parse(_as_math(prediction), **parse_kw)
        return bool(gold and pred and verify(gold, pred, **verify_kw))
    except Exception:  # math-verify may raise on exotic input (sympy errors); a grader never crashes an episode
        return False


def _child(conn, prediction: str, reference: str) -> None:
    conn.send(_verify(prediction, reference))  # a forked child runs in its own main thread: the timeouts apply


def _verify_in_child(prediction: str, reference: str) -> bool:
    """`_verify` in a forked child with a hard deadline: without SIGALRM nothing stops sympy from evaluating
    "9^{9^{9^{9}}}" for ever (and a CPU-bound thread starves the whole process). Fork is cheap here (math-verify
    is already imported) and the deadline bounds a child that a lock held at fork time would leave stuck."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(send, prediction, reference), daemon=True)
    try:
        child.start()
        send.close()
        return bool(receive.recv()) if receive.poll(CHILD_DEADLINE_S) else False
    except (EOFError, OSError):  # the child died without an answer
        return False
    finally:
        if child.is_alive():
            child.kill()
        if child.pid is not None:
            child.join()
        receive.close()
