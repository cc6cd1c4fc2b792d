"""Checks of the counts users pass: one definition of a positive int, in which ``True`` is not 1.

``bool`` is a subclass of ``int``, so ``isinstance(True, int)`` holds; a flag passed where a count
belongs is a mistake, and is refused like any other value that is not an int.

Example:
  >>> from jaxload._src.validate import positive_int
  >>> positive_int("model_size", 2)
  2
  >>> positive_int("model_size", True)
  Traceback (most recent call last):
  ...
  TypeError: model_size must be a positive int, got True
"""

from __future__ import annotations

from typing import TypeGuard


def is_positive_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an ``int`` (not a ``bool``) of at least 1."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def is_nonnegative_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an ``int`` (not a ``bool``) of at least 0."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def positive_int(name: str, value: object) -> int:
    """``value`` if it is a positive int; else a ``TypeError`` (not an int, or a bool) or a
    ``ValueError`` (below 1) that names the argument and its value.

    Example:
      >>> positive_int("num_processes", 0)
      Traceback (most recent call last):
      ...
      ValueError: num_processes must be a positive int, got 0
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be a positive int, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value
