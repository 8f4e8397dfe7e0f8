"""Typed values from plain data, and the one registry style of the learner's pluggable parts.

`build(SomeDataclass, {"a": 1}, "algo.options")` checks every key and value against the dataclass's annotations
and raises `ConfigError` with one line naming the key. The run config (config.py) and every loss's or estimator's
own options dataclass are built with it. `Registry` is a name -> entry table (losses, advantage estimators, policy kinds) with a
`register` call and a one-line error that lists the known names, the way `eppo_envs.register` adds a task.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A user error in a config file or an override: the message is one line, fit to print as is."""


def setting(default: Any = dataclasses.MISSING, *, help: str, factory: Callable[[], Any] | None = None) -> Any:
    """A config field with its help text, which `eppo-train config --explain KEY` prints: `lr: float =
    setting(1e-6, help="AdamW learning rate")`; `factory` for a mutable default (a list, a dict, a section)."""
    if not help.strip():
        raise ValueError("a setting needs its help text")
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


@dataclasses.dataclass(frozen=True)
class Explained:
    key: str  # dotted, e.g. "learner.lr"
    type: str
    default: Any  # the dataclass default (a section: None)
    help: str
    section: bool  # a dataclass of settings itself


def explain(cls: type, prefix: str = "") -> Iterator[Explained]:
    """Every setting of the dataclass `cls` and of its sections, depth first, with its type, default and help."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        tp = hints[f.name]
        inner = typing.get_args(tp)[0] if typing.get_origin(tp) is list else tp
        is_section = dataclasses.is_dataclass(inner)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING and not is_section:
            default = f.default_factory()
        else:
            default = None
        yield Explained(key, _type_name(tp), default, f.metadata.get("help", ""), is_section)
        if is_section:
            yield from explain(inner, f"{key}.N." if inner is not tp else f"{key}.")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check (and gently convert: int -> float, list -> tuple) `value` against the annotation `tp`."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{key}: bad value {value!r}")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return build(tp, value, key)
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is tuple:
        if not isinstance(value, list | tuple) or len(value) != len(args):
            raise ConfigError(f"{key}: expected a list of {len(args)} values, got {value!r}")
        return tuple(_coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True)))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return {str(k): _coerce(v, args[1], f"{key}.{k}") for k, v in value.items()}
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):  # YAML 1.1 reads "3e-4" (no dot) as a string
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{key}: expected a number, got {value!r}") from None
    if tp is bool and not isinstance(value, bool):
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{key}: expected a whole number, got {value!r}")
    if not isinstance(value, tp):
        raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r}")
    return value


def build(cls: type, data: dict, prefix: str = "") -> Any:
    """An instance of the dataclass `cls` from plain data, every value checked against its annotation."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(f"unknown key {where}{unknown[0]} (known: {', '.join(sorted(names))})")
    kwargs = {name: _coerce(v, hints[name], f"{prefix}.{name}" if prefix else name) for name, v in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field (TaskConfig.id) is missing
        raise ConfigError(f"{prefix or cls.__name__}: {exc}") from None


class Registry(Generic[T]):
    """Entries by name: `register(name, entry)` adds one (after `check(name, entry)`, which raises `ConfigError`
    for an entry that cannot work), `get(name)` raises `ConfigError` naming `key`, and `options(name, data)` builds
    the entry's own options dataclass (its `options` attribute) from `data`."""

    def __init__(self, kind: str, key: str, options_key: str = "",
                 check: Callable[[str, T], None] | None = None) -> None:
        self.kind, self.key = kind, key  # "loss", "algo.name": for the error message
        self.options_key = options_key  # "algo.options": where the config holds an entry's options
        # raises ConfigError for an entry that cannot work: said at `register`, when the plugin is imported, not
        # as a traceback from the learner after the SFT's minutes
        self._check = check
        self._entries: dict[str, T] = {}

    def options(self, name: str, data: dict[str, Any]) -> Any:
        return options_of(getattr(self.get(name), "options", None), data, self.options_key)

    def register(self, name: str, entry: T) -> T:
        if self._check is not None:
            self._check(name, entry)
        known = self._entries.get(name)
        if known is not None and known != entry:  # as gymnasium says of an id registered twice: say it, then replace
            warnings.warn(f"{self.kind} {name!r} was registered already; the new entry replaces it", stacklevel=2)
        self._entries[name] = entry
        return entry

    def get(self, name: str) -> T:
        if name not in self._entries:
            raise ConfigError(f"{self.key}: unknown {self.kind} {name!r} (known: {', '.join(self._entries)})")
        return self._entries[name]

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def check_entry(entry: Any, spec: type, form: str, fn_field: str, args: int, kwargs: tuple[str, ...] = ()) -> None:
    """`entry` is a `spec` whose `fn_field` can be called with `args` positional arguments and `kwargs`, and whose
    `options` (if it has any) is a dataclass; else one line naming `form`, the call the user wrote."""
    if not isinstance(entry, spec):
        raise ConfigError(f"{form}: expected {spec.__name__}(...), got {type(entry).__name__}")
    fn = getattr(entry, fn_field)
    if not callable(fn):
        raise ConfigError(f"{form}: {spec.__name__}.{fn_field} must be callable, got {type(fn).__name__}")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        signature = None
    if signature is not None:
        try:
            signature.bind(*range(args), **dict.fromkeys(kwargs))
        except TypeError as exc:
            called = ", ".join(["x"] * args + [f"{k}=..." for k in kwargs])
            name = getattr(fn, "__name__", fn_field)
            raise ConfigError(f"{form}: {name}{signature} cannot be called as {name}({called}): {exc}") from None
    options = getattr(entry, "options", None)
    if options is not None and not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise ConfigError(f"{form}: options must be a dataclass (its fields are the settings), got {options!r}")


def options_of(cls: type | None, data: dict[str, Any], key: str) -> Any:
    """A pluggable part's own options: `cls` built from `data`; a part without options accepts none."""
    if cls is None:
        if data:
            raise ConfigError(f"{key}: this choice takes no options, got {', '.join(sorted(data))}")
        return None
    return build(cls, data, key)
