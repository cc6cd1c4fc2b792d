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
from typing import Protocol, TypeVar

T = TypeVar("T")

_POLL_S = 0.1  # how often a blocked producer looks whether the consumer has gone


class Closable(Protocol):
    def close(self) -> None: ...


class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class _End:
    """The type of :data:`_END`, so that a queue's items narrow by ``isinstance``."""


_END = _End()  # the producer has finished

# Producers still running, stopped before the interpreter exits: a daemon thread left inside a
# backend's C++ code during interpreter shutdown can abort the process ("FATAL: exception not
# rethrown"), e.g. after `next(iter(loader))` without finishing the pass.
_running: dict[threading.Thread, threading.Event] = {}
_JOIN_AT_EXIT_S = 10.0


def _stop_producers() -> None:
    closer.stop()  # after the iterators already handed to it
    releaser.stop()
    for stop in list(_running.values()):
        stop.set()
    for thread in list(_running):
        thread.join(timeout=_JOIN_AT_EXIT_S)


def prefetched(produce: Callable[[], Iterator[T]], depth: int,
               on_request: Callable[[int], None] | None = None,
               interrupt: Callable[[], BaseException | None] | None = None) -> Prefetched[T]:
    """Yields what ``produce()`` yields, keeping up to ``depth`` items ready ahead.

    ``on_request(n)`` is told, each time the consumer asks for an item, how many were ready.
    ``interrupt()``, asked while the consumer waits for an item, returns an exception to raise
    instead of waiting on (e.g. another process failed while the producer is blocked). The
    producer starts at the first request, or earlier with :meth:`Prefetched.start`.

    Example:
      >>> list(prefetched(lambda: iter(range(3)), depth=2))
      [0, 1, 2]
    """
    return Prefetched(produce, depth, on_request, interrupt)


class Prefetched(Iterator[T]):
    """The iterator :func:`prefetched` returns: ``start()`` starts its producer thread (else the
    first ``next()`` does), ``close()`` stops it; both are idempotent."""

    def __init__(self, produce: Callable[[], Iterator[T]], depth: int,
                 on_request: Callable[[int], None] | None,
                 interrupt: Callable[[], BaseException | None] | None):
        self._ready: queue.Queue[T | _Raised | _End] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._on_request, self._interrupt = on_request, interrupt
        self._thread = threading.Thread(target=_produce, args=(produce, self._offer),
                                        name="jaxload-prefetch", daemon=True)
        self._done = False

    def _offer(self, item: T | _Raised | _End) -> bool:
        while not self._stop.is_set():
            try:
                self._ready.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def start(self) -> None:
        """Starts producing now, before the first request."""
        if self._thread.ident is None and not self._done:
            _register(self._thread, self._stop)
            self._thread.start()

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        self.start()
        if self._on_request is not None:
            self._on_request(self._ready.qsize())
        try:
            item = _next_ready(self._ready, self._interrupt)
        except BaseException:
            self.close()
            raise
        if isinstance(item, _End):
            self.close()
            raise StopIteration
        if isinstance(item, _Raised):
            self.close()
            raise item.error
        return item

    def close(self) -> None:
        """Stops the producer at its next step (and waits a moment for its thread to end)."""
        self._done = True
        self._stop.set()
        # an abandoned iterator may be closed on any thread, its producer's own included
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5 * _POLL_S)


def _produce(produce: Callable[[], Iterator[T]], offer: Callable[[T | _Raised | _End], bool]
             ) -> None:
    """The producer thread: offers each item, then the end or the error (of ``produce()``
    itself too), until refused."""
    items = None
    try:
        items = produce()
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


def _next_ready(ready: queue.Queue[T], interrupt: Callable[[], BaseException | None] | None) -> T:
    if interrupt is None:
        return ready.get()
    while True:
        try:
            return ready.get(timeout=_POLL_S)
        except queue.Empty:
            error = interrupt()
            if error is not None:
                raise error from None


class BackgroundCloser:
    """Closes dropped iterators on one long-lived thread.

    Closing a pass can wait on the other processes, which must not happen inside a finalizer
    (at an arbitrary point of the program), and a finalizer must not start a thread either (it
    may run while the interpreter holds a threading lock). So the thread is started
    beforehand (:meth:`start`, called where iterators are created), and a finalizer only hands
    it the iterator with ``SimpleQueue.put``, which is safe there.
    """

    def __init__(self, name: str = "jaxload-close") -> None:
        self._queue: queue.SimpleQueue[Closable | _End] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._name = name

    def start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                _register(self._thread, threading.Event())
                self._thread.start()

    def close_later(self, items: Closable) -> None:
        self._queue.put(items)

    def _run(self) -> None:
        ending = False  # after the end: what a start() that saw this thread alive queued
        while True:
            try:
                items = self._queue.get_nowait() if ending else self._queue.get()
            except queue.Empty:
                return
            if isinstance(items, _End):
                ending = True
                continue
            try:
                items.close()
            except Exception:  # noqa: BLE001 - nobody is left to see it
                pass

    def stop(self) -> None:
        self._queue.put(_END)

    def drain(self, timeout_s: float) -> None:
        """Closes the iterators handed over so far and ends the thread (waiting ``timeout_s``
        at most); the next :meth:`start` starts a new one."""
        with self._lock:
            thread = self._thread
            if thread is None or not thread.is_alive():
                return
            self.stop()
        thread.join(timeout=timeout_s)
        if not thread.is_alive():
            _running.pop(thread, None)


closer = BackgroundCloser()
# destroys the tf.data iterators of ended passes: TensorFlow's destructor cancels and joins the
# pipeline's threads, which the loop must not wait for (jaxload/_src/pipelines/tf/iterator.py)
releaser = BackgroundCloser("jaxload-tf-release")


def _register(thread: threading.Thread, stop: threading.Event) -> None:
    if not _running:
        # Registered now, after jax.distributed.initialize() registered its own shutdown:
        # exit handlers run last-in first-out, so producers stop while the runtime is up.
        atexit.unregister(_stop_producers)
        atexit.register(_stop_producers)
    _running[thread] = stop
