"""The TensorFlow and Grain releases jaxload is tested with, and a warning, once per package,
where it meets another.

jaxload rewrites tf.data graphs through TensorFlow's internals and reads a ``grain.DataLoader``'s
configuration; both change between releases. ``make test-matrix`` runs the backend's tests on
every TensorFlow minor release and every Grain release in :data:`TESTED`. A version outside it is
not refused (it may well work); the first ``from_tf_data`` / ``from_grain`` call warns, naming
the package, its version and the tested range. The backends are imported by then (jaxload does
not import them itself before).

Example:

  >>> from jaxload._src import versions
  >>> versions.in_range("2.21.3", TESTED_TF)
  True
  >>> versions.in_range("2.17.1", TESTED_TF)
  False
"""

from __future__ import annotations

import functools
import re
import sys
import warnings

# (floor, newest tested), compared on as many release numbers as each bound has: "2.21" takes
# in every 2.21.x. The floors are pyproject.toml's (tests/test_versions.py checks it).
TESTED_TF = ("2.18.1", "2.21")
TESTED_GRAIN = ("0.2.12", "0.2.18")
TESTED = {"tensorflow": TESTED_TF, "grain": TESTED_GRAIN}


def release(version: str) -> tuple[int, ...]:
    """The leading release numbers of a version string.

      >>> release("2.21.0rc1"), release("0.2.18")
      ((2, 21, 0), (0, 2, 18))
    """
    found = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(part) for part in found.group(0).split(".")) if found else ()


def in_range(version: str, tested: tuple[str, str]) -> bool:
    """Whether ``version`` lies between the bounds of ``tested``, each compared on as many
    release numbers as it has."""
    have, (low, high) = release(version), (release(tested[0]), release(tested[1]))
    return bool(have) and have[:len(low)] >= low and have[:len(high)] <= high


@functools.cache
def check(module: str) -> None:
    """Warns once per process where the imported ``module`` ("tensorflow" or "grain") is a
    version outside :data:`TESTED`; does nothing where it is not imported or has no version."""
    version = getattr(sys.modules.get(module), "__version__", None)
    if not isinstance(version, str) or in_range(version, TESTED[module]):
        return
    low, high = TESTED[module]
    warnings.warn(
        f"{module} {version} is outside the range jaxload is tested with ({module} {low} to "
        f"{high}); jaxload runs, but its {module} support is untested there", stacklevel=3)
