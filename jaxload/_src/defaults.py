"""Defaults shared by the loader's options and the functions that take the same ones.

Example:
  >>> from jaxload._src import defaults
  >>> defaults.DEFAULT_TIMEOUT_S, defaults.DEFAULT_EXIT_GRACE_S
  (600.0, 10.0)
"""

from __future__ import annotations

DEFAULT_TIMEOUT_S = 600.0  # how long a process waits for the others (a loader's timeout_s, a check's)
DEFAULT_EXIT_GRACE_S = 10.0  # on_failure="exit": seconds from learning of a failure to the end
