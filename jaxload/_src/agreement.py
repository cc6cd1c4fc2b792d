"""Agreement between processes: every process reports, the leader (process 0) decides from all
the reports, and every process learns the decision (a pass's rounds are decided by the process
that arrives last instead: :mod:`~jaxload._src.exchange`).

:func:`gather` is one such round, for a check, the stats, the records or a shared token; each
caller parses the reports and merges them in its ``decide``. The rounds themselves, their names,
waits and lifetimes in the store are :class:`~jaxload._src.exchange.Exchange`'s; a loader's pass
runs many rounds of one exchange.
"""

from __future__ import annotations

import uuid
from typing import Literal, overload

from jaxload._src.exchange import LEADER, Decide, Exchange, Reports
from jaxload._src.peers import (
    PeerFailedError,
    PeerTimeoutError,
    Watch,
    failure_key,
    this_process_transport,
)
from jaxload._src.transport import Transport
from jaxload._src.whereabouts import Name

__all__ = ("LEADER", "Decide", "Exchange", "PeerFailedError", "PeerTimeoutError", "Reports", "Watch",
           "failure_key", "gather", "shared_token", "this_process_transport")


@overload
def gather(name: str | Name, report: str, decide: Decide, timeout_s: float, *,
           transport: Transport | None | Literal["auto"] = ..., watch: Watch | None = ...,
           wait: Literal[True] = ...) -> str: ...


@overload
def gather(name: str | Name, report: str, decide: Decide, timeout_s: float, *,
           transport: Transport | None | Literal["auto"] = ..., watch: Watch | None = ...,
           wait: bool) -> str | None: ...


def gather(name: str | Name, report: str, decide: Decide, timeout_s: float, *,
           transport: Transport | None | Literal["auto"] = "auto", watch: Watch | None = None,
           wait: bool = True) -> str | None:
    """Every process's ``report`` at the leader, whose ``decide(reports)`` returns the decision;
    one round, the same decision on every process, and no key of it left in the store.

    ``wait=False``: this process returns None as soon as its report is published, without
    waiting for the decision (the leader always waits: it decides).

    Example:
      >>> gather("example", "7", lambda reports: (max(reports.values()), True), 60)
      '7'
    """
    exchange = Exchange(name, timeout_s, transport, watch=watch, at_leader=True)
    ends = not wait and exchange.process_index != LEADER
    decision = exchange.round(report, decide, ends=ends)
    exchange.leave()
    return decision


def shared_token(name: str | Name, timeout_s: float, watch: Watch | None = None) -> str:
    """A random token that the leader draws and every process reads: the same on all processes
    of this run, different in the next run (e.g. to name a tf.data service job)."""
    drawn = uuid.uuid4().hex[:12]
    return gather(name, "", lambda _: (drawn, True), timeout_s, watch=watch)
