"""What one pass works with: :class:`PassContext`, given to it when it starts.

The loader builds it, the pass (:class:`~jaxload._src.passes.Pass`) reads it, and the iterator
(:class:`~jaxload._src.iterator.LoaderIterator`) that hands the pass's batches to the loop
writes into it the loop's own failure (:class:`LoopFailure`), which the pass reports when it
is closed. Neither of them holds the other.
"""

from __future__ import annotations

import dataclasses
import threading
import zlib
from typing import Any

from jaxload._src.agreement import Exchange
from jaxload._src.config import LoaderConfig
from jaxload._src.plan import Plan
from jaxload._src.records import Recorder
from jaxload._src.schedule import Schedule
from jaxload._src.stage import Stage
from jaxload._src.stats import Stats
from jaxload._src.watchdog import Watchdog


@dataclasses.dataclass(frozen=True)
class LoopFailure:
    """A failure on the loop's side of a pass (the reshard), which the pass reports to the
    other processes when it is closed."""

    error: BaseException
    stage: Stage
    step: int


@dataclasses.dataclass
class PassContext:
    """What one pass works with, given to it when it starts.

    Attributes:
      exchange: the pass's exchange with the other processes (its rounds).
      plan, config: what this process loads, and the loader's options.
      schedule: the batch-size schedule, if any: each step's plan is then ``plan_at(step)``.
      start: where the pass starts: ``step``, ``origin`` (global row), backend ``position``.
      stats, recorder: the loader's, which the pass adds to.
      watchdog: this process's (failures, stuck reads).
      waiting: set while the loop waits in ``next()`` (blocked on the pass's rounds).
      failure: the loop's own failure, if one ended the pass.
    """

    exchange: Exchange
    plan: Plan
    config: LoaderConfig
    start: dict[str, Any]
    stats: Stats
    recorder: Recorder
    watchdog: Watchdog
    waiting: threading.Event = dataclasses.field(default_factory=threading.Event)
    failure: LoopFailure | None = None
    schedule: Schedule | None = None

    def plan_at(self, step: int) -> Plan:
        """What this process loads at ``step``."""
        return self.plan if self.schedule is None else self.schedule.plan_at(step)

    @property
    def seed(self) -> int:
        """A number every process shares, another for each pass (its exchange's name): what the
        pass draws from, such as which elements the processes compare."""
        return zlib.crc32(self.exchange.prefix.encode())
