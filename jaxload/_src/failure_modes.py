"""Which ``on_failure`` applies to a failure this process learns of: the one its own pass asked
for, whenever the failure arrives.

A process may learn of a peer's failure late, after its own loop left that pass (the step
agreement told it first) and opened the next loader's; or early, before it opened that pass at
all (the peer failed at the first step while this process was still in its training step). The
failed pass's mode decides in both cases, so a loader built with ``on_failure="raise"`` never
ends a process because another loader asked for ``"exit"``. A failure of a pass not opened here
yet waits for the pass to open; one that belongs to no pass (the processes out of step, the
coordinator gone) takes the mode of the pass opened last.

Example:
  >>> modes = FailureModes()
  >>> modes.opened("jaxload/loader/train/pass/0", "exit", 10.0)
  >>> modes.opened("jaxload/loader/eval/pass/0", "raise", 0.0)
  >>> modes.of("jaxload/loader/train/pass/0")          # closed or not, as it asked
  ('exit', 10.0)
  >>> modes.known("jaxload/loader/eval/pass/1")        # not opened here yet: decided later
  False
"""

from __future__ import annotations

import threading

from jaxload._src.defaults import DEFAULT_EXIT_GRACE_S

__all__ = ("KEPT", "FailureModes")

KEPT = 64  # the modes of this many passes opened last are kept (one per pass: bounded)
_NONE_OPENED = ("exit", DEFAULT_EXIT_GRACE_S)  # the default, before any pass opened


class FailureModes:
    """The ``(on_failure, exit_grace_s)`` of the newest :data:`KEPT` passes this process
    opened, and which of them are still open (:attr:`open`)."""

    def __init__(self) -> None:
        self.open: set[str] = set()  # closed() discards without the lock
        self._all: dict[str, tuple[str, float]] = {}
        self.last_exchange = ""  # the pass opened last (its mode is the newest in _all)
        self._lock = threading.Lock()

    def opened(self, exchange: str, on_failure: str, grace_s: float) -> None:
        with self._lock:
            self.open.add(exchange)
            self._all[exchange] = (on_failure, grace_s)
            self.last_exchange = exchange
            if len(self._all) > KEPT:
                del self._all[next(iter(self._all))]

    def closed(self, exchange: str) -> None:
        """No lock (a dict operation is atomic): it runs in finalizers."""
        self.open.discard(exchange)

    def known(self, exchange: str) -> bool:
        """Whether a failure of ``exchange`` can be decided now: its pass was opened here, or
        it belongs to no pass (``""``)."""
        return not exchange or exchange in self._all

    def of(self, exchange: str) -> tuple[str, float]:
        """The mode of ``exchange``'s pass; the last pass's where it is not known."""
        return self._all.get(exchange) or self._all.get(self.last_exchange, _NONE_OPENED)

    def __len__(self) -> int:
        return len(self._all)
