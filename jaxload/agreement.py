"""Exchanges between processes: every process reports, one process decides, everyone learns it.

An :class:`Exchange` is a named series of *rounds*. In each round every process publishes a short
report in the coordination service's key-value store; the leader (process 0) waits until all have
arrived, reads the reports, computes the decision with a pure function of them and publishes it;
the other processes read that one decision. The coordinator so moves O(N) bytes per round for N
processes (N reports in, one read of them, N reads of one decision), where letting every process
read every report would move O(N^2). No barrier is used: arrivals are counted with the store's
atomic increment, and the last process to arrive tells the leader.

Lifetimes: everything lives under ``jaxload/<name>/``. The leader deletes a round once every
process has arrived at the next one (so all have read its decision); the last process to leave a
*final* round (one that ends the exchange: the end of a pass, an error, a stop) deletes the
whole exchange. Nothing accumulates over the rounds of a long run.

A process whose own report ends the exchange (it failed, or stopped iterating) does not wait for
the others: it publishes and leaves. If that process is the leader, it publishes the decision at
once, since no report of the others can change it. Every wait is bounded by ``timeout_s``.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable

from jaxload.transport import CoordinationTransport, Transport, TransportTimeout

LEADER = 0
_loader_ids = itertools.count()


class PeerTimeoutError(RuntimeError):
    """Some processes did not reach an exchange in time (dead, stuck or slow), or the
    coordinator could not be reached."""


class PeerFailedError(RuntimeError):
    """Another process failed; the message names it, the stage and step, and its exception.
    (The process that failed raises its own exception.)"""


def next_loader_id() -> int:
    """Loaders are numbered in creation order, which must be the same on every process."""
    return next(_loader_ids)


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


# decide(reports by process index) -> (decision text, whether it ends the exchange)
_FINAL, _GOES_ON = "F", "C"  # the first character of a published decision
Decide = Callable[[dict[int, str]], tuple[str, bool]]


class Exchange:
    """Rounds of reports gathered at the leader, which publishes one decision per round.

    Every process must create the exchange under the same ``name`` and run the same rounds.

    Example:
      >>> exchange = Exchange("example", timeout_s=60)
      >>> exchange.round("3", lambda reports: (str(min(map(int, reports.values()))), True))
      '3'
    """

    def __init__(self, name: str, timeout_s: float, transport: Transport | None | str = "auto"):
        self.prefix = f"jaxload/{name}"
        self._timeout_s = timeout_s
        self._transport = this_process_transport() if transport == "auto" else transport
        self._round = 0
        self._left = False

    @property
    def process_index(self) -> int:
        """This process's index in the exchange (0 without a transport: a single process)."""
        return 0 if self._transport is None else self._transport.process_index

    def round(self, report: str, decide: Decide, *, ends: bool = False,
              where: str | None = None) -> str | None:
        """Publishes ``report`` and returns the round's decision, the same on every process.

        ``ends``: this report ends the exchange whatever the others report (a failure, a stop);
        the process then returns without waiting (None), except the leader, which still
        publishes the decision: ``decide`` of its own report alone. ``where`` names the round
        in a timeout's message (e.g. ``"step 12"``).
        """
        if self._left:
            raise RuntimeError(f"exchange {self.prefix!r} has ended")
        r, self._round = self._round, self._round + 1
        t = self._transport
        if t is None:  # a single process decides alone
            decision, final = decide({0: report})
            self._left = final or ends
            return decision
        key = f"{self.prefix}/{r}"
        try:
            if t.process_index == LEADER and ends:
                decision, _ = decide({LEADER: report})
                t.set(f"{key}/decision", _FINAL + decision)
                self.leave()
                return decision
            t.set(f"{key}/p/{t.process_index}", report)
            if t.increment(f"{key}/arrived") == t.process_count:
                t.set(f"{key}/all", "")
            if ends:
                self.leave()
                return None
            if t.process_index == LEADER:
                t.get(f"{key}/all", self._timeout_s)
                reports = {int(k.rsplit("/", 1)[1]): v for k, v in t.dir_get(f"{key}/p")}
                decision, final = decide(reports)
                published = (_FINAL if final else _GOES_ON) + decision
                t.set(f"{key}/decision", published)
                if r:  # every process arrived here, so all have read the previous decision
                    t.delete(f"{self.prefix}/{r - 1}")
            else:
                published = t.get(f"{key}/decision", self._timeout_s)
        except TransportTimeout as e:
            self.leave()
            raise self._timeout_error(r, where or f"round {r}", e) from e
        if published[0] == _FINAL:
            self.leave()
        return published[1:]

    def failed(self) -> str | None:
        """The failure a process published for this exchange (:func:`jaxload.watchdog.Watchdog.publish`),
        if one did (one read)."""
        return None if self._transport is None else self._transport.try_get(failure_key(self.prefix))

    def leave(self) -> None:
        """This process is done with the exchange; the last one to leave deletes its keys."""
        if self._left:
            return
        self._left = True
        t = self._transport
        if t is None:
            return
        try:
            if t.increment(f"{self.prefix}/left") == t.process_count:
                t.delete(self.prefix)
        except Exception:  # noqa: BLE001 - cleanup must not hide the error that ended the exchange
            pass

    def _timeout_error(self, r: int, where: str, cause: Exception) -> PeerTimeoutError:
        t = self._transport
        try:
            arrived = {int(k.rsplit("/", 1)[1]) for k, _ in t.dir_get(f"{self.prefix}/{r}/p")}
        except Exception:  # noqa: BLE001 - the coordinator itself may be gone
            arrived = None
        if arrived is None:
            who = f"the coordinator (process 0) did not answer ({cause})"
        else:
            missing = sorted(set(range(t.process_count)) - arrived)
            who = (f"processes [{_ranges(missing)}] did not arrive" if missing else
                   f"the leader (process {LEADER}) did not publish the decision")
        return PeerTimeoutError(
            f"process {t.process_index} waited for the other processes at {where} of "
            f"{self.prefix!r} (timeout_s={self._timeout_s:g}): {who}. A process died, hangs in "
            "its input pipeline, or stopped iterating this loader (every process must iterate "
            "every loader in the same order).")


def failure_key(prefix: str) -> str:
    """Where the first failure of exchange ``prefix`` is kept (deleted with the exchange)."""
    return f"{prefix}/failed"


def _ranges(indices: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``'0-2, 5'``: readable with thousands of processes."""
    parts, start = [], None
    for i, p in enumerate(indices):
        if start is None:
            start = p
        if i + 1 == len(indices) or indices[i + 1] != p + 1:
            parts.append(str(start) if start == p else f"{start}-{p}")
            start = None
    return ", ".join(parts)


def gather_once(name: str, report: str, decide: Decide, timeout_s: float,
                transport: Transport | None | str = "auto") -> str:
    """A one-round exchange (checks, stats): its decision on every process, its keys deleted.

    Example:
      >>> gather_once("example", "7", lambda reports: (max(reports.values()), True), 60)
      '7'
    """
    exchange = Exchange(name, timeout_s, transport)
    decision = exchange.round(report, decide)
    exchange.leave()
    return decision


def shared_token(name: str, timeout_s: float) -> str:
    """A random token that the leader draws and every process reads: the same on all processes
    of this run, different in the next run (e.g. to name a tf.data service job)."""
    drawn = uuid.uuid4().hex[:12]
    return gather_once(f"token/{name}", "", lambda _: (drawn, True), timeout_s)
