"""Run a generator ahead of its consumer on a background thread.

The loader's next batches (next local batch, step agreement, assembly onto devices) are produced
while the training step runs. Errors raised by the producer surface in the consumer with their
original traceback; when the consumer stops early (``break``, an exception, garbage collection)
the producer stops at its next step and the thread ends.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

_POLL_S = 0.1  # how often a blocked producer looks whether the consumer has gone


class _Raised:
    def __init__(self, error: BaseException):
        self.error = error


_END = object()


def prefetched(produce: Callable[[], Iterator[T]], depth: int) -> Iterator[T]:
    """Yields what ``produce()`` yields, keeping up to ``depth`` items ready ahead.

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

    thread = threading.Thread(target=run, name="jaxload-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is _END:
                return
            if isinstance(item, _Raised):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join(timeout=5 * _POLL_S)
