"""Plain data across the sandbox boundary: arguments go in, return values come back, as one JSON line each.

Only builtin values travel: None, bool, int, float, str, bytes, complex, list, tuple, set, frozenset and dict.
JSON has no tuples, sets or non-string keys, so every JSON object on the wire is a one-key tag:
`{"t": [...]}` tuple, `{"s": [...]}` set, `{"f": [...]}` frozenset, `{"d": [[k, v], ...]}` dict, `{"b": hex}` bytes,
`{"c": [re, im]}` complex, `{"i": hex}` an int too large for a plain JSON number, `{"g": [repr, [...]]}` another iterable (its items), `{"o": repr}` anything else.

The decoder builds fresh builtin objects, so nothing the sandboxed side sends can carry its own `__eq__`;
an `{"o": ...}` value becomes an `Opaque` that equals nothing. This file is stdlib-only and self-contained:
the harness embeds its source in the sandboxed program, so both sides use the same codec.
"""

import json

BIG_INT = 1 << 62  # beyond this an int travels as hex (int <-> decimal str is capped at 4300 digits)
MAX_DEPTH = 200
MAX_SAME_HASH = 32  # members of one set (keys of one dict) that may share a hash value


class WireError(ValueError):
    """A value that cannot be encoded, or a line that is not valid wire data."""


class Opaque:
    """A returned object of a type that does not travel. It equals nothing (not even itself)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<unsendable {self.text}>"


class Iterated(Opaque):
    """A returned iterable of a type that does not travel (a generator, `map`, `range`, a numpy array): it equals
    nothing, as a generator equals no list, but yields the items the sandboxed side iterated, so tests that convert
    it (HumanEval/33 and /37: `tuple(candidate(l)) == ...`) see what HumanEval's harness sees."""

    __slots__ = ("items",)

    def __init__(self, text: str, items: list) -> None:
        super().__init__(text)
        self.items = tuple(items)

    def __iter__(self):
        return iter(self.items)


def _enc(x: object, depth: int) -> object:
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    if x is None or x is True or x is False:
        return x
    if isinstance(x, bool):  # a numpy bool
        return bool(x)
    if isinstance(x, int):
        n = int.__index__(x)
        return n if -BIG_INT < n < BIG_INT else {"i": hex(n)}
    if isinstance(x, float):
        return float.__float__(x)
    if isinstance(x, str):
        return str.__str__(x)
    if isinstance(x, (bytes, bytearray)):
        return {"b": bytes(x).hex()}
    if isinstance(x, complex):
        return {"c": [x.real, x.imag]}
    if isinstance(x, list):
        return [_enc(v, depth + 1) for v in list.__iter__(x)]
    if isinstance(x, tuple):
        return {"t": [_enc(v, depth + 1) for v in tuple.__iter__(x)]}
    if isinstance(x, frozenset):
        return {"f": [_enc(v, depth + 1) for v in frozenset.__iter__(x)]}
    if isinstance(x, set):
        return {"s": [_enc(v, depth + 1) for v in set.__iter__(x)]}
    if isinstance(x, dict):
        return {"d": [[_enc(k, depth + 1), _enc(v, depth + 1)] for k, v in dict.items(x)]}
    item = getattr(type(x), "item", None)  # numpy scalars (np.int64, np.float64, np.bool_) become builtins
    if item is not None and getattr(x, "shape", None) == ():
        return _enc(item(x), depth + 1)
    try:
        text = object.__repr__(x) if type(x).__repr__ is object.__repr__ else repr(x)
    except Exception:
        text = type(x).__name__
    if getattr(type(x), "__iter__", None) is not None:  # iterated here, on the sandboxed side and its clock
        try:
            items = [_enc(v, depth + 1) for v in x]
        except WireError:
            raise
        except Exception:
            items = None
        if items is not None:
            return {"g": [f"{type(x).__name__}: {str(text)[:200]}", items]}
    return {"o": f"{type(x).__name__}: {str(text)[:200]}"}


def encode(value: object) -> str:
    """One JSON line (no newline) for `value`; raises WireError for values nested deeper than MAX_DEPTH."""
    try:
        return json.dumps(_enc(value, 0), allow_nan=True, separators=(",", ":"))
    except RecursionError:
        raise WireError("value nested too deeply") from None


def _items(v: object) -> list:
    if type(v) is not list:
        raise WireError("malformed container")
    return v


def _unflooded(values: list) -> list:
    """`values`, checked before they become a set or dict's keys. Building either compares each member with every
    earlier one of the same hash, so members sharing one hash make it quadratic: 130k ints equal modulo 2**61 - 1
    (one 4 MB reply) hold the judging process for minutes, outside the solution's time limit. Distinct values
    rarely share a hash (hash(-1) == hash(-2) is one case); a set that needs more than a few is hostile."""
    counts: dict[int, int] = {}
    for value in values:
        h = hash(value)  # TypeError for an unhashable member: `decode` reports it
        counts[h] = counts.get(h, 0) + 1
        if counts[h] > MAX_SAME_HASH:
            raise WireError(f"more than {MAX_SAME_HASH} set members or dict keys share one hash")
    return values


def _tag(obj: dict) -> object:
    if len(obj) != 1:
        raise WireError("malformed tag")
    ((key, v),) = obj.items()
    if key == "t":
        return tuple(_items(v))
    if key == "s":
        return set(_unflooded(_items(v)))
    if key == "f":
        return frozenset(_unflooded(_items(v)))
    if key == "d":
        pairs = _items(v)
        if any(type(p) is not list or len(p) != 2 for p in pairs):
            raise WireError("malformed dict")
        _unflooded([k for k, _ in pairs])
        return {k: val for k, val in pairs}
    if key == "b" and type(v) is str:
        return bytes.fromhex(v)
    if key == "c" and type(v) is list and len(v) == 2 and all(type(p) in (int, float) for p in v):
        return complex(v[0], v[1])
    if key == "i" and type(v) is str:
        return int(v, 16)
    if key == "g" and type(v) is list and len(v) == 2 and type(v[0]) is str:
        return Iterated(v[0][:300], _items(v[1]))
    if key == "o" and type(v) is str:
        return Opaque(v[:300])
    raise WireError(f"unknown tag {key!r}")


def decode(line: str | bytes) -> object:
    """The value of one wire line. Raises WireError for anything malformed (also unhashable set members or keys)."""
    try:
        return json.loads(line, object_hook=_tag)
    except WireError:
        raise
    except (ValueError, TypeError, RecursionError) as exc:
        raise WireError(f"not wire data ({type(exc).__name__})") from None
