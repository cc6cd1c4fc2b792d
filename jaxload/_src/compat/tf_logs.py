"""TensorFlow's C++ log level (the absl inside ``libtensorflow_framework``), which jaxload lowers
while it saves iterators or reads a graph (see :mod:`jaxload._src.compat`)."""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from collections.abc import Iterator
from typing import Any

WARNING, ERROR = 1, 2  # absl::LogSeverityAtLeast::kWarning, kError
_LOG_LEVEL_LOCK = threading.Lock()


@contextlib.contextmanager
def no_info_logs() -> Iterator[None]:
    """TensorFlow's C++ INFO logs off while inside (where they are on): ``LOG(INFO) << "Saving
    symbolic checkpoint"`` in ``IteratorResource::Save`` would write a line to stderr at every
    batch. Where TensorFlow logs through its own logger instead (before 2.21), whose level is
    fixed when TensorFlow is imported, it warns once how to turn the line off."""
    if tf_log_level() is None and tf_logs_at_fixed_level():
        _warn_fixed_info_logs()
    with logs_at_least(WARNING):
        yield


@contextlib.contextmanager
def logs_at_least(severity: int) -> Iterator[None]:
    """TensorFlow's C++ log lines below ``severity`` off while inside (absl's minimum log
    level raised, then put back), where :func:`tf_log_level` finds the level; else nothing."""
    level = tf_log_level()
    if level is None:
        yield
        return
    get, set_level = level
    with _LOG_LEVEL_LOCK:
        before = get()
        if before < severity:
            set_level(severity)
        try:
            yield
        finally:
            if before < severity:
                set_level(before)


@functools.cache
def _warn_fixed_info_logs() -> None:
    """Once per process, unless ``TF_CPP_MIN_LOG_LEVEL`` is 2 or more (which only the user
    sets: JAX's import sets 1 where it is unset, maybe after TensorFlow has read it)."""
    import os
    import warnings

    import tensorflow as tf

    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0").strip() not in ("", "0", "1"):
        return
    warnings.warn(
        f"tensorflow {tf.__version__} writes the INFO line 'Saving symbolic checkpoint' at every "
        "save of a tf.data iterator unless "
        "TF_CPP_MIN_LOG_LEVEL was 1 or more when TensorFlow was imported (its log level is "
        "fixed then): set TF_CPP_MIN_LOG_LEVEL=1 before importing TensorFlow (importing jax "
        "first does), or use tensorflow >= 2.21, whose level jaxload lowers during the save",
        stacklevel=4)


def _framework_library() -> str | None:
    """The path of TensorFlow's ``libtensorflow_framework`` (None where it is not found)."""
    import glob
    import os

    import tensorflow as tf

    paths = glob.glob(os.path.join(os.path.dirname(tf.__file__), "libtensorflow_framework*"))
    return paths[0] if paths else None


def _framework_symbol(pattern: bytes, tail: bytes) -> re.Match[bytes] | None:
    """The first match of ``pattern`` (which ends with ``tail``) among
    ``libtensorflow_framework``'s bytes (its symbols), copied out of the mapped library. Each
    ``tail`` is found with ``find`` (a few ms over the library, where a regular expression
    takes tens), then ``pattern`` matched on the bytes before it."""
    import mmap

    path = _framework_library()
    if path is None:
        return None
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            at = m.find(tail)
            while at >= 0:
                end = at + len(tail)
                found = re.search(pattern + rb"$", m[max(0, end - 256):end])
                if found is not None:
                    return found
                at = m.find(tail, end)
    except OSError:
        pass
    return None


def _framework_function(name: str) -> Any:
    """The C function ``name`` of the loaded ``libtensorflow_framework`` (``dlsym``), or None."""
    import ctypes
    import os

    path = _framework_library()
    if path is None:
        return None
    try:
        library = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | os.RTLD_GLOBAL)
        return getattr(library, name)
    except (OSError, AttributeError):
        return None


@functools.cache
def tf_logs_at_fixed_level() -> bool:
    """Whether TensorFlow logs through its own logger (``tsl::internal::LogMessage``, before
    TensorFlow 2.21), which reads ``TF_CPP_MIN_LOG_LEVEL`` once, at its first line, and has no
    setter: found by ``tsl::internal::MinLogLevelFromEnv`` among the library's symbols."""
    return _framework_function("_ZN3tsl8internal18MinLogLevelFromEnvEv") is not None



@functools.cache
def tf_log_level() -> tuple[Any, Any] | None:
    """``absl::MinLogLevel`` and ``absl::SetMinLogLevel`` of the absl inside TensorFlow's
    ``libtensorflow_framework`` (as ctypes functions), or None where they are not found or do
    not govern TensorFlow's log lines (:func:`tf_logs_at_fixed_level`). Their C++ names carry
    absl's release (``absl::lts_20250814::``), read from the library's symbols."""
    import ctypes

    if tf_logs_at_fixed_level():
        return None
    found = _framework_symbol(rb"_ZN4absl(\d+lts_\d+)?11MinLogLevelEv", b"11MinLogLevelEv")
    if found is None:
        return None
    inner = (found.group(1) or b"").decode()
    get = _framework_function(f"_ZN4absl{inner}11MinLogLevelEv")
    set_level = _framework_function(f"_ZN4absl{inner}14SetMinLogLevelE"
                                    f"N{'S0_' if inner else 'S_'}18LogSeverityAtLeastE")
    if get is None or set_level is None:
        return None
    get.restype, get.argtypes = ctypes.c_int, []
    set_level.restype, set_level.argtypes = None, [ctypes.c_int]
    return get, set_level
