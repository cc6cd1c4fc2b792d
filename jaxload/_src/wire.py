"""Values read from the coordination service's store, parsed with their fields checked.

Every process reads values that other processes wrote. A value that is not what jaxload writes
(another program writing under ``jaxload/``, a version mismatch between processes) must not
crash a process with a bare ``KeyError`` or ``TypeError`` deep in the agreement: it raises
:class:`MalformedValueError`, naming the key and the process that wrote it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")


class MalformedValueError(ValueError):
    """A value in the coordination service's store is not what jaxload writes there.

    Example:
      Raised on the process that reads the value, naming the key and the process that wrote it:

      >>> from jaxload import wire
      >>> wire.loads("{not json", key="jaxload/example", writer=1)
      Traceback (most recent call last):
      ...
      jaxload.MalformedValueError: malformed value in 'jaxload/example' written by process 1: ...
    """


def loads(text: str, *, key: str, writer: int | str) -> Any:
    """``json.loads(text)``; a malformed value names ``key`` and its ``writer``."""
    try:
        return json.loads(text)
    except (TypeError, ValueError) as e:
        raise _malformed(text, key, writer, f"not JSON ({e})") from None


def fields_of(cls: type[T], text: str, *, key: str, writer: int | str) -> T:
    """The dataclass ``cls`` from the JSON object ``text``, each field's type checked against
    its annotation (absent fields take their defaults).

    Example:
      >>> @dataclasses.dataclass
      ... class Point:
      ...     x: int = 0
      >>> fields_of(Point, '{"x": 3}', key="jaxload/p", writer=1)
      Point(x=3)
      >>> fields_of(Point, '{"x": "3"}', key="jaxload/p", writer=1)  # doctest: +ELLIPSIS
      Traceback (most recent call last):
      ...
      jaxload.MalformedValueError: malformed value in 'jaxload/p' written by process 1: ...
    """
    return from_fields(cls, loads(text, key=key, writer=writer), text, key=key, writer=writer)


def from_fields(cls: type[T], value: Any, text: str, *, key: str, writer: int | str) -> T:
    """:func:`fields_of` for a value already parsed from ``text``."""
    if not isinstance(value, dict):
        raise _malformed(text, key, writer, "not a JSON object")
    dataclass: type = cls  # as a key of _hints' cache
    hints = _hints(dataclass)
    for name, field_value in value.items():
        if name not in hints:
            raise _malformed(text, key, writer, f"unknown field {name!r}")
        if not _matches(field_value, hints[name]):
            raise _malformed(text, key, writer, f"field {name!r} is {field_value!r}, not "
                             f"{_type_name(hints[name])}")
    return cls(**value)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in typing.get_type_hints(cls).items() if k in names}


def _matches(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is not None:
        hint = origin
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint)


def _malformed(text: str, key: str, writer: int | str, why: str) -> MalformedValueError:
    who = f"process {writer}" if isinstance(writer, int) else writer
    return MalformedValueError(f"malformed value in {key!r} written by {who}: {why}: "
                               f"{text[:200]!r}")
