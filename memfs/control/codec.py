"""The one JSON encoding of the control protocol's answers (memfs/control/protocol.py).

An answer is a dataclass whose fields are its wire keys, in wire order; nested objects
are dataclasses too. `to_wire` turns one into its JSON value (the daemon's side, and a
command's `--json`); `decode` turns parsed JSON back into the declared type, checking
each field against its annotation (`list[...]`, `dict[str, ...]`, `X | None`, unions of
dataclasses, `Literal[...]`, bool/int/float/str, `Any`). So a field is named once, as
an attribute, and mypy checks every use of it on both sides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, fields, is_dataclass
from types import UnionType
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")

# `field(default=None, metadata=ABSENT)`: a field the wire carries only when not None.
_ABSENT_KEY = "absent_if_none"
ABSENT: Mapping[str, bool] = {_ABSENT_KEY: True}


class DecodeError(ValueError):
    """JSON that does not fit the declared type; the message says where."""


def to_wire(value: Any) -> Any:
    """An answer (or any part of one) as the JSON value it is on the wire."""
    if is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: to_wire(getattr(value, f.name))
            for f in fields(value)
            if not (f.metadata.get(_ABSENT_KEY) and getattr(value, f.name) is None)
        }
    if isinstance(value, list | tuple):
        return [to_wire(v) for v in value]
    if isinstance(value, dict):
        return {k: to_wire(v) for k, v in value.items()}
    return value


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = get_type_hints(cls)
    return hints


_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _fits(kind: Any, value: Any) -> bool:
    if kind is Any:
        return True
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, kind)


def _decode(kind: Any, value: Any, where: str) -> Any:
    origin = get_origin(kind)
    if origin is Union or origin is UnionType:
        return _decode_union(get_args(kind), value, where)
    if origin is Literal:
        if any(value == k and type(value) is type(k) for k in get_args(kind)):
            return value
        raise DecodeError(f"{where} is {value!r}, not one of {get_args(kind)}")
    if origin is list:
        if not isinstance(value, list):
            raise DecodeError(f"{where} is not a list")
        (item,) = get_args(kind)
        return [_decode(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise DecodeError(f"{where} is not an object")
        _, item = get_args(kind)
        return {k: _decode(item, v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(kind, type) and is_dataclass(kind):
        return _decode_object(kind, value, where)
    if not _fits(kind, value):
        shown = _KINDS.get(kind, f"a {getattr(kind, '__name__', kind)}")
        raise DecodeError(f"{where} is {type(value).__name__}, not {shown}")
    return value


def _decode_union(choices: tuple[Any, ...], value: Any, where: str) -> Any:
    """The first of `choices` that `value` fits (None for an optional value)."""
    if value is None and type(None) in choices:
        return None
    failed: DecodeError | None = None
    for choice in choices:
        if choice is type(None):
            continue
        try:
            return _decode(choice, value, where)
        except DecodeError as e:
            failed = failed or e
    raise failed or DecodeError(f"{where} is null")


def _decode_object(kind: type[Any], value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise DecodeError(f"{where} is not an object")
    hints = _hints(kind)
    values = {}
    for f in fields(kind):
        if f.name in value:
            values[f.name] = _decode(hints[f.name], value[f.name], f"{where}.{f.name}")
        elif f.default is MISSING:
            raise DecodeError(f"{where} has no field {f.name!r}")
    return kind(**values)


def decode(kind: type[T], value: Any, name: str = "the answer") -> T:
    """`value` (parsed JSON) as a `kind`, or DecodeError naming the first field that
    is missing or of the wrong type. Keys `kind` does not declare are ignored."""
    decoded: T = _decode(kind, value, name)
    return decoded
