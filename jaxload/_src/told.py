"""Warnings told once per process (the same message is not repeated by every loader built), and
warnings told each time (:func:`warn_each`: one per pass, where Python's own filter would show
the first only).

:mod:`jaxload._src.process_state` forgets them between the calls of a warm test cluster, so each
call is told as a new process would be.
"""

from __future__ import annotations

import os
import sys
import types
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


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def warn_each(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` each time: Python's default filter shows a message
    once per line of code that warns, so a warning that each pass makes with the same text
    (its rows left out, each epoch alike) would be shown at the first pass only. The user's
    filters apply (``ignore``, ``error``, ``once``: once by its text). It is shown at the
    program's own line that called into jaxload where this thread has one (the loop), else at
    jaxload's.

    Example:
      Each of a loop's passes is told, under Python's default filter too:

      >>> import warnings
      >>> with warnings.catch_warnings(record=True) as told:
      ...     warnings.simplefilter("default")
      ...     for epoch in range(2):
      ...         warn_each("the same rows were left out")
      >>> [str(w.message) for w in told]
      ['the same rows were left out', 'the same rows were left out']
    """
    caller = sys._getframe(1)
    outside: types.FrameType | None = caller
    while outside is not None and outside.f_code.co_filename.startswith(_PACKAGE):
        outside = outside.f_back
    frame = caller if outside is None or outside.f_globals.get("__name__") == "threading" else (
        outside)  # (a thread of jaxload's: its own line)
    # no registry: the filter "default" then shows it each time, "once" once (by its text);
    # no module_globals: a script's __main__ has no __spec__.loader, which Python warns of
    warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                           module=frame.f_globals.get("__name__"))
