"""Exchanges between processes: every process reports, one process decides, everyone learns it.

An :class:`Exchange` is a named series of *rounds*. In each round every process publishes a short
report in the coordination service's key-value store and counts itself in with the store's atomic
increment; the process that arrives last (it finds every report there) reads the reports,
computes the decision with a pure function of them and publishes it; the others read that one
decision. The coordinator so moves O(N) bytes per round for N processes (N reports in, one read
of them, N reads of one decision), where letting every process read every report would move
O(N^2). No barrier is used, and after the last arrival a round takes three requests to the
store (its count, the reports, the decision) before the others read the decision. An exchange
made ``at_leader`` is decided by the leader (process 0) instead, which the last process to
arrive tells so (one request and one wake-up more): for a ``decide`` that keeps what it reads
on process 0 (the stats, the records of every group).

Names: an exchange is named by what it belongs to (a loader's pass, a check's line in the
program: :mod:`jaxload._src.whereabouts`), never by a process-wide counter, and a wait that lasts
looks for processes that are at other exchanges (out of step) instead of waiting out
``timeout_s``. Every value read is parsed with its fields checked (:mod:`jaxload._src.wire`).

Lifetimes: everything lives under ``jaxload/<series>/<ordinal>/``. The process that decides a
round deletes the round before it (every process arrived, so all have read its decision); the
last process to leave a *final* round (one that ends the exchange: the end of a pass, an error,
a stop) deletes the whole exchange. Nothing accumulates over the rounds of a long run.

A process whose own report ends the exchange (it failed, or stopped iterating) does not wait for
the others: it publishes and leaves (and decides, if it arrived last). If that process is the
leader (process 0), it publishes the decision at once without counting itself in, since no report
of the others can change it. Every wait is bounded by ``timeout_s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal, TypeVar

from jaxload._src import whereabouts, wire
from jaxload._src.peers import PeerFailedError, PeerTimeoutError, Watch, failure_key, this_process_transport
from jaxload._src.transport import Transport, TransportTimeout, TransportUnavailable
from jaxload._src.whereabouts import Created, Name, OutOfStepError, ranges
from jaxload._src.wire import MalformedValueError

LEADER = 0
_GRACE_S = 2.0  # and for the failure to arrive
T = TypeVar("T")

_FINAL, _GOES_ON, _FAILED = "F", "C", "E"  # the first character of a published decision


class Reports(dict[int, str]):
    """A round's reports by process index, read from the ``(key, value)`` entries under
    ``prefix`` (``<prefix>/<process>``)."""

    def __init__(self, prefix: str, entries: list[tuple[str, str]]):
        super().__init__()
        self.prefix = prefix
        for k, v in entries:
            process = k.rsplit("/", 1)[1]
            if not process.isdigit():
                raise MalformedValueError(f"unexpected key {k!r} among the reports under "
                                          f"{prefix!r} (not written by jaxload)")
            self[int(process)] = v

    def parsed(self, cls: type[T]) -> dict[int, T]:
        """Each report as the dataclass ``cls``, its fields checked (:func:`jaxload._src.wire.fields_of`:
        a malformed one names its key and the process that wrote it)."""
        return {p: wire.fields_of(cls, v, key=f"{self.prefix}/{p}", writer=p)
                for p, v in self.items()}


# decide(reports by process index) -> (decision text, whether it ends the exchange)
Decide = Callable[[Reports], tuple[str, bool]]


class Exchange:
    """Rounds of reports, decided by the process that arrives last: one decision per round.

    Every process must create the exchange under the same ``name`` and run the same rounds.

    Example:
      >>> exchange = Exchange("example", timeout_s=60)
      >>> exchange.round("3", lambda reports: (str(min(map(int, reports.values()))), True))
      '3'
    """

    def __init__(self, name: str | Name, timeout_s: float,
                 transport: Transport | None | Literal["auto"] = "auto",
                 *, watch: Watch | None = None, blocking: Callable[[], bool] = lambda: True,
                 created: Created = whereabouts.CREATED, at_leader: bool = False):
        """``name``: what the exchange belongs to (:mod:`jaxload._src.whereabouts`; a plain str
        names a one-off series). ``watch``: consulted while a wait lasts (a peer's failure ends
        it; processes found out of step are announced). ``blocking()``: whether the program is
        blocked in this exchange's waits (a loop waiting for its next batch), so that processes
        waiting elsewhere are out of step with it. ``created``: the exchanges this process
        created. ``at_leader``: process 0 decides every round, not the last to arrive."""
        self.name = name if isinstance(name, Name) else Name(name, 0, f"exchange {name!r}")
        self.prefix = self.name.prefix
        self._timeout_s = timeout_s
        self._transport = this_process_transport() if isinstance(transport, str) else transport
        self._watch = watch
        self._blocking = blocking
        self._created = created
        self._at_leader = at_leader
        self._round = 0
        self._left = False
        self.decision_key = f"{self.prefix}/0/decision"  # where the last decision was read

    @property
    def process_index(self) -> int:
        """This process's index in the exchange (0 without a transport: a single process)."""
        return 0 if self._transport is None else self._transport.process_index

    def round(self, report: str, decide: Decide, *, ends: bool = False,
              where: str | None = None) -> str | None:
        """Publishes ``report`` and returns the round's decision, the same on every process.

        ``ends``: this report ends the exchange whatever the others report (a failure, a stop);
        the process then returns without waiting (None), except the leader (process 0), which
        still publishes the decision: ``decide`` of its own report alone. ``where`` names the
        round in a timeout's message (e.g. ``"step 12"``).
        """
        if self._left:
            raise RuntimeError(f"exchange {self.prefix!r} has ended")
        r, self._round = self._round, self._round + 1
        t = self._transport
        if t is None:  # a single process decides alone
            decision, final = decide(Reports(f"{self.prefix}/{r}/p",
                                             [(f"{self.prefix}/{r}/p/0", report)]))
            self._left = final or ends
            return decision
        key = f"{self.prefix}/{r}"
        try:
            if t.process_index == LEADER and ends:
                decision, _ = decide(Reports(f"{key}/p", [(f"{key}/p/{LEADER}", report)]))
                t.set(f"{key}/decision", _FINAL + decision)
                self.leave()
                return decision
            t.set(f"{key}/p/{t.process_index}", report)
            last = t.increment(f"{key}/arrived") == t.process_count
            if self._at_leader and last:
                t.set(f"{key}/all", "")
            deciding = t.process_index == LEADER if self._at_leader else last
            published = self._decide(t, r, decide) if deciding else None
            if ends:
                self.leave()
                return None
            if published is None:
                published = self._wait(t, f"{key}/decision", r)
        except TransportTimeout as e:
            self.leave()
            raise self._timeout_error(t, r, where or f"round {r}", e) from e
        except BaseException:  # a peer's failure, processes out of step, a malformed report
            self.leave()
            raise
        self.decision_key = f"{key}/decision"
        return self._decision(published, where or f"round {r}")

    def _decide(self, t: Transport, r: int, decide: Decide) -> str:
        """The part of round ``r`` of the process that decides it: every report, the
        decision taken from them, published; the previous round deleted."""
        key = f"{self.prefix}/{r}"
        if self._at_leader:
            self._wait(t, f"{key}/all", r)
        try:
            decision, final = decide(Reports(f"{key}/p", t.dir_get(f"{key}/p")))
        except Exception as e:  # e.g. a malformed report: every process learns why
            t.set(f"{key}/decision", _FAILED + f"{t.process_index}:{type(e).__name__}: {e}")
            raise
        published = (_FINAL if final else _GOES_ON) + decision
        t.set(f"{key}/decision", published)
        if r:  # every process arrived here, so all have read the previous decision
            t.delete(f"{self.prefix}/{r - 1}")
        return published

    @property
    def _decider(self) -> str:
        return f"the leader (process {LEADER})" if self._at_leader else "the process that arrived last"

    def _decision(self, published: str, where: str) -> str:
        """The decision in ``published``, whose first character says whether the exchange ends
        or the process deciding could not decide (then its index and why follow)."""
        kind = published[:1]
        if kind not in (_FINAL, _GOES_ON):
            self.leave()
            if kind == _FAILED:
                decider, _, why = published[1:].partition(":")
                raise PeerFailedError(f"process {decider} could not decide {where} "
                                      f"of {self.name.what}: {why}")
            raise MalformedValueError(f"malformed decision in {self.decision_key!r} (written by "
                                      f"{self._decider}): {published[:200]!r}")
        if kind == _FINAL:
            self.leave()
        return published[1:]

    def _wait(self, t: Transport, key: str, r: int) -> str:
        """The value of ``key``, waiting up to ``timeout_s``. A wait that lasts
        :data:`~jaxload._src.whereabouts.SUSPECT_S` posts where this process waits, ends on a peer's
        failure, and looks for processes out of step with this one."""
        deadline, graced = time.monotonic() + self._timeout_s, self._watch is None
        posted = None
        try:
            while True:
                slice_s = whereabouts.SUSPECT_S if posted is None else whereabouts.LOOK_EVERY_S
                left = deadline - time.monotonic()
                try:
                    return t.get(key, max(0.001, min(left, slice_s)))
                except TransportUnavailable:
                    raise
                except TransportTimeout:
                    if time.monotonic() >= deadline and graced:
                        raise
                    if time.monotonic() >= deadline:  # a peer whose pipeline got stuck while
                        # it read ahead for this round finds it within 1.25 timeout_s of the
                        # read's start (watchdog.py) and tells the cause: a wait grants that
                        deadline, graced = time.monotonic() + self._timeout_s / 4 + _GRACE_S, True
                if self._watch is not None:
                    interruption = self._watch.interruption(self.prefix)
                    if interruption is not None:
                        raise interruption
                if posted is None:
                    posted = whereabouts.post(t, self.name, r)
                if self._blocking():
                    self._look_out_of_step(t, r)
        finally:
            if posted is not None:
                try:
                    t.delete(posted)
                except Exception:  # noqa: BLE001 - a stale post only names a finished wait
                    pass

    def _look_out_of_step(self, t: Transport, r: int) -> None:
        arrived = (self._arrived(t, r) or set()) if t.process_index == LEADER else None
        found = whereabouts.out_of_step(t, self.name, r, arrived, self._created)
        if found is None:
            return
        error = OutOfStepError(found)
        if self._watch is not None:
            self._watch.out_of_step(self.prefix, error)
        raise error

    def _arrived(self, t: Transport, r: int) -> set[int] | None:
        prefix = f"{self.prefix}/{r}/p"
        try:
            return set(Reports(prefix, t.dir_get(prefix)))
        except Exception:  # noqa: BLE001 - the coordinator itself may be gone
            return None

    def failed(self) -> str | None:
        """The failure a process published for this exchange (:func:`jaxload._src.watchdog.Watchdog.publish`),
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

    def _timeout_error(self, t: Transport, r: int, where: str, cause: Exception) -> PeerTimeoutError:
        arrived = self._arrived(t, r)
        if arrived is None and t.process_index == LEADER:  # the service runs in this process
            who = (f"the coordination service stopped answering ({cause}), as it does once it "
                   "finds a process gone")
        elif arrived is None:
            who = f"the coordinator (process 0) did not answer ({cause})"
        else:
            missing = sorted(set(range(t.process_count)) - arrived)
            who = (f"processes [{ranges(missing)}] did not arrive" if missing else
                   f"every process arrived, but {self._decider} did not publish the decision")
        return PeerTimeoutError(
            f"process {t.process_index} waited for the other processes at {where} of "
            f"{self.name.what} (timeout_s={self._timeout_s:g}): {who}. A process died, hangs in "
            "its input pipeline, or stopped iterating this loader (every process must iterate "
            f"every loader in the same order).{whereabouts.where_others_wait(t)}")
