"""Warnings told once per process: the same message is not repeated by every loader built.

:mod:`jaxload._src.process_state` forgets them between the calls of a warm test cluster, so each
call is told as a new process would be.
"""

from __future__ import annotations

import warnings

_TOLD: set[str] = set()


def warn_once(message: str, category: type[Warning] = UserWarning, *, stacklevel: int = 1,
              key: str | None = None) -> None:
    """``warnings.warn(message, category)``, unless this process was told ``message`` (or
    another message with the same ``key``) already. ``stacklevel`` counts from the caller, as
    ``warnings.warn``'s does.

    Example:
      >>> import warnings
      >>> with warnings.catch_warnings(record=True) as seen:
      ...     warnings.simplefilter("always")
      ...     for _ in range(3):
      ...         warn_once("the example's warning")
      >>> len(seen)
      1
    """
    if (key or message) in _TOLD:
        return
    _TOLD.add(key or message)
    warnings.warn(message, category, stacklevel=stacklevel + 1)


def forget() -> None:
    """Every message may be told again."""
    _TOLD.clear()
