"""A failure on one process ends every process within seconds, naming the cause.

Between the step agreement's rounds the processes are inside the training step's collectives,
where no exchange reaches them: a process that fails there leaves the others waiting forever in
an all-reduce it never joins. So each process runs one **watchdog** thread, started with its first
pass, that sits in a blocking read of its own *alarm* key in the coordination service
(``jaxload/alarm/<process>``). The read returns at once when the key is written, else every
:data:`WAKE_S` seconds: one small RPC per process per 10 s (JAX's heartbeat rate), whatever the
step rate (4 per read limit where that is under 40 s).

What happens on a failure (:func:`publish`):

1. The failing process claims the pass's failure key (``jaxload/<pass>/failed``, written only if
   absent: the first failure wins) and writes the failure into every process's alarm key (N small
   writes, once). It then raises its own exception, with a note naming the process and step.
2. Each watchdog wakes, records the failure and acknowledges it. The loop's next ``next()`` on
   that process raises :class:`~jaxload.PeerFailedError` naming the process, the stage and the
   original message; a loop waiting for a prefetched batch is woken for it.
3. With ``on_failure="exit"`` (the default) the watchdog ends its process ``exit_grace_s`` seconds
   after learning of the failure, if the process is still running then: its main thread may be
   inside a collective that will never complete. It prints the cause and calls ``os._exit(1)``, as
   JAX does on a missed heartbeat. A process that ends before (the exception propagated out of the
   loop) also leaves with exit code 1, skipping ``jax.distributed``'s shutdown barrier, which waits
   for peers stuck in a collective. With ``on_failure="raise"`` nothing ends the process: the
   loop's next ``next()`` raises, and what follows is the program's own business; nor is a single
   process ever ended (no peers wait for it). The failed pass's own ``on_failure`` decides,
   whenever the failure arrives (:mod:`jaxload._src.failure_modes`).

The watchdog also watches the pipeline: a batch read longer than ``timeout_s`` (the first of a
pass: :data:`FIRST_BATCH_FACTOR` times) is a failure naming the pipeline as stuck, with its
thread's stack. A process that used a loader and ends with an uncaught exception publishes it at
exit. A killed process cannot: JAX's heartbeat or ``jaxload launch`` ends the others.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import NoReturn

from jaxload._src.failure_modes import FailureModes
from jaxload._src.failures import (
    EXIT_CODE,
    Failure,
    PipelineStuckError,
    alarm_key,
    announce,
    end_process,
    stuck_pipeline,
)
from jaxload._src.peers import PeerFailedError, this_process_transport
from jaxload._src.transport import Transport, TransportClosed, TransportTimeout, TransportUnavailable

__all__ = ("FIRST_BATCH_FACTOR", "WAKE_S", "Watchdog", "this_process")

WAKE_S = 10.0  # the longest a watchdog's blocking read lasts: one RPC per process per WAKE_S
FIRST_BATCH_FACTOR = 3  # the first batch of a pass may take this many times timeout_s
_STOP = "stop"
_LOOKS_PER_LIMIT = 4  # during reads the thread wakes at least this often per read limit


class _Read:
    """A batch read in progress: which thread, since when, until when."""

    def __init__(self, exchange: str, step: int, limit_s: float):
        self.exchange, self.step, self.limit_s = exchange, step, limit_s
        self.thread = threading.current_thread()
        self.deadline = time.monotonic() + limit_s


class Watchdog:
    """This process's watchdog (one per process: :func:`this_process`); ``transport`` is None
    in a single-process run: failures are then only this process's own."""

    def __init__(self, transport: Transport | None, process_index: int = 0, wake_s: float = WAKE_S):
        self._transport = transport
        self.process_index = process_index if transport is None else transport.process_index
        self._wake_s = wake_s
        self._lock = threading.Lock()
        self._reads: dict[int, _Read] = {}
        self.modes = FailureModes()  # each pass's on_failure and exit_grace_s
        self.failure: Failure | None = None  # the latest failure this process learned of
        self._failures: dict[str, Failure] = {}  # by pass (exchange); "" for the whole process
        self._own_error: BaseException | None = None  # this process's exception, if it failed
        self._stopping = threading.Event()
        self._exiting = False
        self._ending = False  # the exit timer runs
        self.failure_mode = ("raise", 0.0)  # on_failure and exit_grace_s for self.failure
        self._thread: threading.Thread | None = None
        self.rpcs = 0  # blocking reads made by the watchdog (its whole cost to the coordinator)
        self._look_s = 1.0  # the longest the thread waits (until a read sets it from its limit)

    # -- the loader's side -------------------------------------------------------------------
    def start(self) -> None:
        """Starts the thread (once) and the exit handler; called where a pass starts."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="jaxload-watchdog",
                                            daemon=True)
            # registered after jax.distributed.initialize registered its own shutdown: exit
            # handlers run last-in first-out, so this one runs while the client is still up
            atexit.register(self._at_exit)
            self._thread.start()

    def opened(self, exchange: str, on_failure: str, grace_s: float) -> None:
        self.modes.opened(exchange, on_failure, grace_s)
        with self._lock:  # a failure learned before the pass opened here is decided now
            if exchange in self._failures:
                self._decide(self._failures[exchange])

    def closed(self, exchange: str) -> None:  # no lock (dict operations are atomic): finalizers
        self.modes.closed(exchange)
        self._failures.pop(exchange, None)

    @contextmanager
    def reading(self, exchange: str, step: int, first: bool = False, *,
                limit_s: float) -> Iterator[None]:
        """Marks a batch read in progress, so that a stuck one is found; the ``first`` batch of
        a pass may take :data:`FIRST_BATCH_FACTOR` times ``limit_s``."""
        read = _Read(exchange, step, limit_s * (FIRST_BATCH_FACTOR if first else 1))
        key = id(read)
        self._reads[key] = read
        self._look_s = read.limit_s / _LOOKS_PER_LIMIT  # a stuck read is found
        try:  # within 1.25 limits of its start, whenever the thread's last wait began
            yield
        finally:
            self._reads.pop(key, None)

    def interruption(self, exchange: str) -> BaseException | None:
        """What the loop's next ``next()`` on pass ``exchange`` raises instead of a batch: a
        peer's failure, or this process's stuck pipeline (its own exceptions reach the loop
        from the pass itself). A plain attribute read: no RPC."""
        failure = self._failures.get(exchange) or self._failures.get("")
        if failure is None:
            return None
        if failure.stuck and failure.process == self.process_index:
            return PipelineStuckError(failure.text)
        if failure.process != self.process_index:
            return PeerFailedError(failure.text)
        return None

    def out_of_step(self, exchange: str, error: BaseException) -> None:
        """Tells every process that the processes are out of step (found while waiting in
        ``exchange``): a failure of the whole process, so that every pass of every process
        raises, whichever exchange it waits in."""
        self.publish(Failure(self.process_index, "agreeing", None,
                             f"{type(error).__name__}: {error}"), error)

    def publish(self, failure: Failure, error: BaseException | None = None, *,
                claim: bool = True) -> bool:
        """Tells every process of this process's ``failure`` (caused by ``error``) at once;
        returns whether it was the first failure of its pass (the others are raised where they
        happen, not announced). ``claim=False``: after the pass's last round (see
        :func:`~jaxload._src.failures.announce`)."""
        if error is not None and self._own_error is None:
            self._own_error = error
        self._learn(failure)
        return True if self._transport is None else announce(self._transport, failure, claim)

    # -- the thread --------------------------------------------------------------------------
    def _run(self) -> None:
        t = self._transport
        while not self._stopping.is_set():
            wait = max(0.05, min(self._wake_s, self._look_s,
                                 self._next_deadline() - time.monotonic()))
            if t is None:
                self._stopping.wait(wait)
                self._check_reads()
                continue
            key = alarm_key(self.process_index)
            try:
                self.rpcs += 1
                value = t.get(key, wait)
            except TransportClosed:  # jax.distributed.shutdown() on this process: a normal end
                return
            except TransportUnavailable as e:
                if not self._stopping.is_set():
                    self._learn(Failure(0, "coordinating", None,
                                        f"the coordination service (process 0) cannot be "
                                        f"reached: {e}"))
                return
            except TransportTimeout:
                self._check_reads()
                continue
            try:
                t.delete(key)
            except Exception:  # noqa: BLE001 - a key left behind is harmless; the failure is not
                pass
            if value == _STOP:
                return
            self._learn(Failure.from_json(value, key))

    def _next_deadline(self) -> float:
        deadlines = [r.deadline for r in list(self._reads.values())]
        return min(deadlines, default=float("inf"))

    def _check_reads(self) -> None:
        now = time.monotonic()
        for read in list(self._reads.values()):
            if now >= read.deadline and read.exchange not in self._failures:
                self.publish(stuck_pipeline(self.process_index, read.exchange, read.step,
                                            read.limit_s, read.thread))

    def _learn(self, failure: Failure) -> None:
        with self._lock:
            if failure.exchange in self._failures:  # the first failure of a pass is the one
                return
            self.failure = failure
            self._failures[failure.exchange] = failure  # what that pass's next() raises
            if self.modes.known(failure.exchange):
                self._decide(failure)

    def _decide(self, failure: Failure) -> None:
        """Takes ``failure``'s mode (the lock held); with "exit" starts the exit timer (its
        thread never takes the lock)."""
        on_failure, grace_s = self.failure_mode = self.modes.of(failure.exchange)
        # a lone process raises only: no peer can leave it inside a collective
        if on_failure == "exit" and self._transport is not None and not self._ending:
            self._ending = True
            threading.Thread(target=self._exit_later, args=(failure, grace_s),
                             name="jaxload-exit", daemon=True).start()

    def _exit_later(self, failure: Failure, grace_s: float) -> None:
        time.sleep(grace_s)
        if self._exiting:  # the exit handler ends the process itself
            return
        # the last line names the failure (log collectors show last lines), its details above
        self._end(f"jaxload: {failure.text}\njaxload: process {self.process_index} ends now "
                  f"(exit code {EXIT_CODE}), still running {grace_s:g} s after the failure it "
                  "waited on, possibly inside a collective that cannot complete "
                  f"(on_failure='exit'): {failure.text.splitlines()[0]}", own_error=True)

    def _end(self, message: str, own_error: bool = False) -> NoReturn:
        """Ends the process (:func:`~jaxload._src.failures.end_process`), printing ``message``
        and, with ``own_error``, this process's own exception."""
        end_process(self._transport, message, self._own_error if own_error else None,
                    self.failure_mode[1])

    # -- exit --------------------------------------------------------------------------------
    def _at_exit(self) -> None:
        """At interpreter exit: announce an uncaught exception of an open pass, skip the
        shutdown barrier after a failure (``on_failure="exit"``), else stop the thread."""
        self._exiting = True
        uncaught = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        if uncaught is not None and uncaught is not self._own_error and not isinstance(
                uncaught, (PeerFailedError, PipelineStuckError)):
            # the loop may be gone (the exception unwound it): any uncaught exception counts
            self.publish(Failure(self.process_index, "running the program", None,
                                 f"the process ended with an uncaught {type(uncaught).__name__}: "
                                 f"{uncaught}", self.modes.last_exchange))
        failure = self.failure
        if failure is not None and self._transport is not None:
            self.failure_mode = self.modes.of(failure.exchange)  # decided now if not yet
            if self.failure_mode[0] == "exit":
                self._end(f"jaxload: process {self.process_index} ends (exit code {EXIT_CODE}) "
                          f"after: {failure.text.splitlines()[0]}")
        self._stop()

    def _stop(self) -> None:
        self._stopping.set()
        thread, t = self._thread, self._transport
        if thread is None or not thread.is_alive():
            return
        if t is not None:
            try:  # wakes the blocking read at once
                t.set(alarm_key(self.process_index), _STOP)
            except Exception:  # noqa: BLE001 - the read ends by itself within WAKE_S
                pass
        thread.join(timeout=self._wake_s + 1)
        if t is not None and not thread.is_alive():  # the thread may have seen _stopping first
            with suppress(Exception):  # and left the _STOP unread
                t.delete(alarm_key(self.process_index))


_this_process: list[Watchdog] = []


def forget_this_process() -> list[str]:
    """Stops this process's watchdog (if one started) and forgets it, so that the next pass
    starts a new one, as in a new process (a warm test cluster between calls); returns the
    passes it still had open."""
    if not _this_process:
        return []
    watchdog = _this_process.pop()
    atexit.unregister(watchdog._at_exit)
    watchdog._stop()
    return sorted(watchdog.modes.open)


def this_process() -> Watchdog:
    """This process's watchdog, created on first use (over the coordination service's store in
    a multi-process run)."""
    if not _this_process:
        _this_process.append(Watchdog(this_process_transport()))
    return _this_process[0]
