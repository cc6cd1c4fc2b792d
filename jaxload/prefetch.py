"""Run a generator ahead of its consumer on a background thread.

The loader's next batches (next local batch, step agreement, assembly onto devices) are produced
while the training step runs. Errors raised by the producer surface in the consumer with their
original traceback; when the consumer stops early (``break``, an exception, garbage collection)
the producer stops at its next step and the thread ends.
"""

from __future__ import annotations

import atexit
import queue
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

_POLL_S = 0.1  # how often a blocked producer looks whether the consumer has gone
READ_AHEAD = 16  # per-process batches read ahead of the loader: a window of steps (loader.py)
READ_AHEAD_BYTES = 256 * 2**20  # per-process batches read ahead of the loader, at most


class _Raised:
    def __init__(self, error: BaseException):
        self.error = error


_END = object()

# Producers still running, stopped before the interpreter exits: a daemon thread left inside a
# backend's C++ code during interpreter shutdown can abort the process ("FATAL: exception not
# rethrown"), e.g. after `next(iter(loader))` without finishing the pass.
_running: dict[threading.Thread, threading.Event] = {}
_JOIN_AT_EXIT_S = 10.0


def _stop_producers() -> None:
    for stop in list(_running.values()):
        stop.set()
    for thread in list(_running):
        thread.join(timeout=_JOIN_AT_EXIT_S)


def prefetched(produce: Callable[[], Iterator[T]], depth: int,
               on_request: Callable[[int], None] | None = None) -> Iterator[T]:
    """Yields what ``produce()`` yields, keeping up to ``depth`` items ready ahead.

    ``on_request(n)`` is told, each time the consumer asks for an item, how many were ready.

    Example:
      >>> list(prefetched(lambda: iter(range(3)), depth=2))
      [0, 1, 2]
    """
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def offer(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        items = produce()
        try:
            for item in items:
                if not offer(item):
                    return
            offer(_END)
        except BaseException as e:  # handed to the consumer, which re-raises it
            offer(_Raised(e))
        finally:
            close = getattr(items, "close", None)
            if close:
                close()
            _running.pop(threading.current_thread(), None)

    thread = threading.Thread(target=run, name="jaxload-prefetch", daemon=True)
    if not _running:
        # Registered now, after jax.distributed.initialize() registered its own shutdown:
        # exit handlers run last-in first-out, so producers stop while the runtime is up.
        atexit.unregister(_stop_producers)
        atexit.register(_stop_producers)
    _running[thread] = stop
    thread.start()
    try:
        while True:
            if on_request is not None:
                on_request(ready.qsize())
            item = ready.get()
            if item is _END:
                return
            if isinstance(item, _Raised):
                raise item.error
            yield item
    finally:
        stop.set()
        # an abandoned iterator may be collected on any thread, its producer's own included
        if thread is not threading.current_thread():
            thread.join(timeout=5 * _POLL_S)


def read_ahead(local_batches: Callable[[object], Iterator[T]], depth: int,
               max_bytes: int = READ_AHEAD_BYTES) -> Callable[[object], Iterator[T]]:
    """``local_batches`` read ahead on their own thread, ``depth`` batches at most (fewer where
    they would hold more than ``max_bytes``); ``depth=0``: unchanged.

    The loader agrees on a window of steps at a time, so it reads a window of batches before it
    hands out the first: without reading ahead, the pipeline would stand still while the
    previous window's steps run, and the loop would wait for each new window.

    Example:
      >>> batches = read_ahead(lambda position: iter([(1, "a"), (2, "b")]), depth=16)
      >>> list(batches(None))
      [(1, 'a'), (2, 'b')]
    """
    if not depth:
        return local_batches

    def ahead(position: object) -> Iterator[T]:
        items = local_batches(position)
        first = next(items, None)
        if first is None:
            return
        yield first
        nbytes = sum(getattr(leaf, "nbytes", 0) for leaf in _leaves(first))
        yield from prefetched(lambda: items, max(1, min(depth, max_bytes // max(nbytes, 1))))

    return ahead


def _leaves(item: object) -> list:
    import jax

    return jax.tree_util.tree_leaves(item)
