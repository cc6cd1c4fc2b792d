"""The other processes as this one meets them: the errors that name them, what a long wait for
them consults, and the coordination service's store shared with them."""

from __future__ import annotations

from typing import Protocol

from jaxload._src.transport import CoordinationTransport, Transport
from jaxload._src.whereabouts import OutOfStepError


class PeerTimeoutError(RuntimeError):
    """Some processes did not reach an exchange in time (dead, stuck or slow), or the
    coordinator could not be reached.

    Example:
      How long a process waits for the others is the loader's ``timeout_s``:

      >>> import grain
      >>> loader = jaxload.from_grain(grain.MapDataset.range(64), jaxload.data_parallel(),
      ...                             global_batch_size=16, timeout_s=300)
      >>> try:
      ...     steps = sum(1 for batch in loader)
      ... except jaxload.PeerTimeoutError as e:   # some process was not there within 300 s
      ...     print(e)
      >>> steps
      4
    """


class PeerFailedError(RuntimeError):
    """Another process failed; the message names it, the stage and step, and its exception.
    (The process that failed raises its own exception.)

    Example:
      With ``on_failure="raise"`` the process goes on after the error (with the default
      ``"exit"`` it also ends ``exit_grace_s`` seconds later; see :class:`~jaxload.Loader`):

      >>> import grain
      >>> loader = jaxload.from_grain(grain.MapDataset.range(64), jaxload.data_parallel(),
      ...                             global_batch_size=16, on_failure="raise")
      >>> try:
      ...     for batch in loader:
      ...         pass                               # the training step
      ... except jaxload.PeerFailedError as e:       # another process failed; e names it
      ...     print(f"stopping: {e}")
    """


class Watch(Protocol):
    """What a long wait in an exchange consults (the process's :class:`~jaxload._src.watchdog.Watchdog`)."""

    def interruption(self, exchange: str) -> BaseException | None:
        """A failure that ends the wait (a peer's, published to this process)."""

    def out_of_step(self, exchange: str, error: OutOfStepError) -> None:
        """Tells every process that the processes are out of step (``error`` says how)."""


_transport: list[Transport] = []  # this process's, created once (its byte counts accumulate)


def this_process_transport() -> Transport | None:
    """The coordination service's store for this process; None in a single-process run.

    Its ``sent`` and ``received`` count every byte jaxload moved through the coordinator.
    """
    import jax

    if jax.process_count() == 1:
        return None
    if not _transport:
        _transport.append(CoordinationTransport.of_this_process())
    return _transport[0]


def forget_transport() -> None:
    """Drops this process's store and its byte counts (a new one is created on first use)."""
    _transport.clear()


def failure_key(prefix: str) -> str:
    """Where the first failure of exchange ``prefix`` is kept (deleted with the exchange)."""
    return f"{prefix}/failed"
