"""Grading a final answer against the reference with `math-verify` (symbolic equivalence, not string match)."""

from __future__ import annotations

import multiprocessing
import re
import threading
from decimal import Decimal

from math_verify import parse, verify
from sympy import (
    Basic,
    Eq,
    FiniteSet,
    Integer,
    MatrixBase,
    Mul,
    Number,
    Pow,
    Rational,
    Symbol,
    UnevaluatedExpr,
)

_SPACE_RE = re.compile(r"\s+")
_JOINS = re.compile(r"[0-9a-z.]")  # characters a space between keeps apart (in lower-cased text)
# math-verify bounds itself (3 s per parse, 5 s per verify) with SIGALRM, which works in a main thread only. Off
# the main thread a child process grades instead and is killed past this deadline.
CHILD_DEADLINE_S = 20.0
# latex2sympy reads a percent sign ("50\\%", "50%", "50 percent", "50 pct") as this factor, which math-verify then
# reads two ways: as the number written against an integer ("50%" = 50) and as a hundredth of it against anything
# else ("50%" = 1/2 = 0.5), so one reply could win for two answers.
_PERCENT = UnevaluatedExpr(Rational(1, 100))
_NUMERAL_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:/\d+)?")
# One number as a reply writes it, checked on the text because latex2sympy evaluates what it reads: it sums numbers
# written side by side ("81 80" is 161, "1\,234" is 235, "5 \frac{14}{2}" is 12), and folds "12/2/2", "\binom{5}{2}",
# "-( -61 / 1 )" or "e^{0}" into plain integers that the value checks below cannot tell from a written number.
_DIGITS_RE = re.compile(r"(?:\d+(?:,\d{3})*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")  # 5,000  0.5  .5  1E3
_FRACTION_RE = re.compile(r"\d\s*/\s*[+-]?\d|\\[dt]?frac\s*(?:\{\s*[+\-\u2212]?\d[\d.,]*\s*\}\s*\{\s*\d[\d.,]*\s*\}|\d\d)")
_COMMAND_RE = re.compile(r"\\([a-zA-Z]+|.)")
# LaTeX that wraps, spaces or labels a number without computing anything (`\,` and `\;` separate two numbers, which
# the digit count then refuses); any other command (\sqrt, \binom, \cos, \left, \mid, ...) is left to compute
_WRAPPING_COMMANDS = frozenset({"boxed", "text", "textbf", "textrm", "mathrm", "mathbf", "displaystyle", "frac", "dfrac",
                                "tfrac", "circ", "degree", "%", "$", "{", "}", ",", ";", ":", " ", "quad", "qquad"})
_DEGREES_RE = re.compile(r"\^\s*(?:\\circ|\{\s*\\circ\s*\})")
# a unit's own power ("20 \\text{ cm}^2", "12 \\mathrm{m}^{3}"): part of the unit, not a computation with the number
_UNIT_POWER_RE = re.compile(r"(\\(?:text|textrm|mathrm|mbox)\s*\{\s*[a-zA-Z]+\s*\})\s*\^\s*(?:\{\s*[23]\s*\}|[23])")
# Ways of writing one number that latex2sympy misreads or that the text check would take for a computation,
# rewritten as plain decimals before anything reads them: LaTeX's thin-space thousands separator ("5\,000", which
# it sums to 5), a lower-case exponent as python prints a float ("1e-05", read as Euler's e times 1, minus 5) and
# scientific notation ("1.5 \times 10^{3}"). The exponent is bounded so the rewrite stays short.
_THIN_THOUSANDS_RE = re.compile(r"(?<![\d.,])\d{1,3}(?:\\,\d{3})+(?![\d,])")
_EXPONENT_RE = re.compile(r"(?<![\w.\\])(?:\d+(?:\.\d*)?|\.\d+)[eE][+-]?\d{1,3}(?![\w.])")
_SCIENTIFIC_RE = re.compile(
    r"(?<![\w.])(\d+(?:\.\d+)?)\s*\\(?:times|cdot)\s*10\s*\^\s*(?:\{\s*([+-]?\d{1,3})\s*\}|(\d))(?![\w.^])")


def _plain_numerals(text: str) -> str:
    """`text` with "5\\,000" written 5000, "1e-05" 0.00001 and "1.5 \\times 10^{3}" 1500 (the same numbers, in the
    form math-verify reads as written); "5\\,7" and "2e" stay as they are."""
    text = _THIN_THOUSANDS_RE.sub(lambda m: m.group().replace("\\,", ""), text)
    text = _SCIENTIFIC_RE.sub(lambda m: format(Decimal(f"{m[1]}e{m[2] or m[3]}"), "f"), text)
    return _EXPONENT_RE.sub(lambda m: format(Decimal(m.group()), "f"), text)


def _as_math(text: str) -> str:
    # Plain "2^(n-1)" parsed without delimiters can collapse to its first number; `$...$` makes the whole string
    # one expression. Text that already carries LaTeX delimiters or \boxed is left alone.
    text = text.strip()
    return text if ("$" in text or "\\boxed" in text or "\\(" in text) else f"${text}$"


def _end_of(text: str, chars: str) -> int:
    """Where `text` ends once trailing whitespace and `chars` are dropped (a loop, not a regex: "[.\\s]+$" on a
    long run of ". " is quadratic)."""
    end = len(text)
    while end and (text[end - 1].isspace() or text[end - 1] in chars):
        end -= 1
    return end


def without_full_stop(text: str) -> str:
    """`text` without surrounding space and the full stop(s) that end it as a sentence, also just inside a closing
    `$` ("5/14." and "$5/14.$" are 5/14): what math-verify reads."""
    text = text.strip()
    text = text[:_end_of(text, ".")]
    body = text.rstrip("$")
    return body[:_end_of(body, ".")] + text[len(body):]


def _gap(match: re.Match[str]) -> str:
    """Space inside an answer: dropped next to an operator or bracket ("5 / 14" is 5/14), but one space where it
    separates two number or word characters ("3 4" is not 34, "0 .5" is not 0.5) or breaks the line (math-verify
    reads the last line: "1\\n/2" is not 1/2)."""
    text, start, end = match.string, match.start(), match.end()
    if "\n" in match.group() or "\r" in match.group():
        return " "
    return " " if start > 0 and end < len(text) and _JOINS.match(text[start - 1]) and _JOINS.match(text[end]) else ""


def _outer(text: str) -> str:
    """`text` without surrounding space, its final full stop(s), and `$` delimiters that enclose all of it."""
    text = text.strip()
    text = text[:_end_of(text, ".")]
    pairs = min(len(text) - len(text.lstrip("$")), len(text) - len(text.rstrip("$")))
    if pairs and text.strip("$"):
        text = text[pairs:len(text) - pairs].strip()
        text = text[:_end_of(text, ".")]
    return text


def normalise(text: str) -> str:
    """The answer as text, for the exact-text comparison: case, enclosing `$`, `\\!` thin spaces, a final full stop
    and space next to operators do not count. Nothing that separates two numbers is removed, and a leading "."
    stays (".5" is 0.5): the text must not read as a value other than the one math-verify reads."""
    return _SPACE_RE.sub(_gap, _outer(text).lower().replace("\\!", "").strip())


def is_correct(prediction: str, reference: str) -> bool:
    """True when `prediction` equals `reference` mathematically (or, failing a parse, as normalised text).

    Both comparisons read one value from the prediction: the text comparison only drops what cannot change a value,
    and math-verify reads the prediction without the full stop that the text comparison ignores too (it reads
    "5/14." as 5). Otherwise one reply could win for two answers ("3 4" would be 7 to math-verify and 34 as text)."""
    if not prediction.strip():
        return False
    if normalise(prediction) == normalise(reference):
        return True
    prediction = without_full_stop(prediction)
    if not prediction:
        return False
    if threading.current_thread() is threading.main_thread():
        return _verify(prediction, reference)
    if multiprocessing.current_process().daemon:  # a daemonic worker may start no child: graded without a limit
        return _verify(prediction, reference, timed=False)
    return _verify_in_child(prediction, reference)


def _percent_as_unit(value: object) -> object:
    """`value` with every percent sign read as a unit: "50%" is 50, against any reference. The questions ask for the
    number without units ("What percent of her spools are yellow? ... Do not include units.": 25), and one reading
    gives a reply one value; math-verify's two would make "50%" win for both 50 and 1/2."""
    if not isinstance(value, (Basic, MatrixBase)) or not value.has(_PERCENT):
        return value
    return value.replace(lambda e: isinstance(e, Mul) and _PERCENT in e.args,
                         lambda e: Mul(*(a for a in e.args if a != _PERCENT)))


def _fraction(value: object) -> bool:
    """`p/q` as math-verify's reading of plain text keeps it: Mul(p, Pow(q, -1)) of two integers (in LaTeX
    latex2sympy evaluates it to a Rational)."""
    if not isinstance(value, Mul) or len(value.args) != 2:
        return False
    p, q = sorted(value.args, key=lambda a: isinstance(a, Pow))
    return isinstance(p, Integer) and isinstance(q, Pow) and q.exp == -1 and isinstance(q.base, Integer)


def _written_number(value: object) -> bool:
    """Whether math-verify read `value` as one number as written: an integer, a decimal or a fraction (latex2sympy
    keeps the rest unevaluated), optionally signed and with a percent sign, `\\text{13}` or a set of one."""
    if isinstance(value, Number) or _fraction(value):
        return True
    if isinstance(value, Symbol):  # a number written as text: its name is the numeral
        return _NUMERAL_RE.fullmatch(value.name) is not None
    if isinstance(value, FiniteSet):
        return len(value.args) == 1 and _written_number(value.args[0])
    if not isinstance(value, Mul) or list(value.args).count(_PERCENT) != 1:
        return False
    rest = [a for a in value.args if a != _PERCENT]
    rest = rest[1:] if len(rest) == 2 and rest[0] == -1 else rest  # "-50%" is Mul(-1, 50, percent)
    return len(rest) == 1 and isinstance(rest[0], Number)


def written_as_one_number(text: str) -> bool:
    """Whether the reply's text holds one number and nothing that computes with it: one run of digits (thousands
    commas, a decimal point and an exponent included) or one fraction (`5/14`, `\\frac{5}{14}`), at most one sign
    and one `=`, no brackets, bars, powers (but `^\\circ`), factorials or subscripts, and no LaTeX command but those
    that wrap or space a number. Words around it may stay ("The answer is 5/14")."""
    # "1{,}234" is LaTeX's thousands comma and `\!` a negative space that joins ("1\!000" is 1000)
    text = _DEGREES_RE.sub("", text.replace("{,}", ",").replace("\\!", ""))
    text = _UNIT_POWER_RE.sub(r"\1", text)
    if any(command not in _WRAPPING_COMMANDS for command in _COMMAND_RE.findall(text)):
        return False
    bare = _COMMAND_RE.sub(" ", text)
    if any(c in bare for c in "()[]|^!_") or bare.count("=") > 1:
        return False
    runs = len(_DIGITS_RE.findall(bare))
    signs = sum(bare.count(c) for c in "+-\u2212") - sum(m.group().count("+") + m.group().count("-")
                                                         for m in _DIGITS_RE.finditer(bare))
    return signs <= 1 and (runs == 1 or (runs == 2 and _FRACTION_RE.search(text) is not None))


def _is_answer(value: object) -> bool:
    """Whether `value` (one of math-verify's readings of a reply) answers with a number: the number itself or
    `x = number` (the unknown may be `e` or `I`, read as constants). An expression left to compute is no answer to
    a numeric question, though math-verify evaluates it: the question's own expression ("Calculate 80 * -30 - 52."
    answered "80 * -30 - 52") would win 59 of 60 basic_arithmetic problems, as could "\\sqrt{25}" or "|-5|" for 5. A
    text reading stays (it equals only the same text)."""
    if isinstance(value, str):
        return True
    if isinstance(value, Eq):
        return value.lhs.is_Atom and not value.lhs.is_Number and _written_number(value.rhs)
    return _written_number(value)


def _verify(prediction: str, reference: str, timed: bool = True) -> bool:
    """math-verify, with its own timeouts when `timed` (main thread only). Against a reference that is a number,
    only a reading of the prediction as a written number counts (checked before the percent sign is dropped:
    dropping it rebuilds the product around it, evaluated, so "80 \\cdot -30\\%" would read as the number -2400)."""
    parse_kw, verify_kw = ({}, {}) if timed else ({"parsing_timeout": None}, {"timeout_seconds": None})
    prediction, reference = _plain_numerals(prediction), _plain_numerals(reference)
    try:
        gold = parse(_as_math(reference), **parse_kw)
        numeric = any(isinstance(v, Basic) for v in gold) and all(_written_number(v) for v in gold
                                                                  if isinstance(v, Basic))
        if numeric and not written_as_one_number(prediction):  # before the parse that would evaluate it
            return False
        pred = parse(_as_math(prediction), **parse_kw)
        if numeric:
            pred = [v for v in pred if _is_answer(v)]
        gold, pred = [_percent_as_unit(v) for v in gold], [_percent_as_unit(v) for v in pred]
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
