"""Public names report the public module they are exported from (``jaxload.check.ReplicationError``,
not the module under ``_src`` that defines them), in tracebacks, reprs and pickles."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def claim(module: str, namespace: dict[str, Any], names: Iterable[str]) -> None:
    """Sets ``__module__`` of the classes and functions among ``names`` to ``module``."""
    for name in names:
        value = namespace[name]
        if isinstance(value, type) or callable(value) and hasattr(value, "__code__"):
            if value.__module__.startswith("jaxload._src"):
                value.__module__ = module
