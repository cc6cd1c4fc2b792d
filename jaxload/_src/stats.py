"""Where a loader's time goes: per process, and over all processes with the slowest named.

The training loop's view is ``wait``: how long ``next(loader)`` blocked. With prefetching it is
near zero while the loader keeps up; when it is not, ``backend`` (reading the pipeline),
``agree`` (the step agreement, which includes waiting for slower processes), ``assemble``
(building the global arrays) and ``check`` say why, and :meth:`StatsSummary.slowest` which
process the others are waiting for.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

from jaxload._src import agreement, wire
from jaxload._src.agreement import Reports
from jaxload._src.whereabouts import Name

_PARTS = ("wait", "backend", "agree", "assemble", "check")
# upper bounds (seconds) of the buckets of the loop's waits for data; the last is +inf
WAIT_BUCKETS_S = (0.0001, 0.001, 0.01, 0.1, 1.0, 10.0)
_lock = threading.Lock()


@dataclasses.dataclass
class Stats:
    """Totals of one process's loader since it was created (all passes).

    Attributes:
      process_index: the process these are from.
      steps: batches handed to the training loop.
      wait_s: time ``next(loader)`` blocked the loop.
      backend_s: time reading per-process batches from the pipeline (and validating them):
        read ahead before a round where the pipeline's length is unknown, or step by step, just
        before each is assembled, where every process knows its length.
      agree_s: time in the step agreement, including waiting there for other processes.
      assemble_s: time building global arrays (padding and resharding included).
      check_s: time in the run-time placement checks.
      nbytes: bytes of this process's batches handed out.
      elapsed_s: the loop's time between its first request and its latest batch, per pass.
      ready_sum: batches ready in the prefetch queue, summed over the loop's requests.
      rounds: step-agreement rounds (exchanges with the other processes): about one per 16
        steps, or one per 256 where every process knows its pipeline's length.
      round_bytes: bytes of this process's reports in those rounds (what it sent the
        coordinator).
      padding_rows: rows of padding this process assembled (``remainder="pad"``).
      waits: how many of the loop's waits for a batch fell in each bucket of
        ``WAIT_BUCKETS_S`` (``<=`` its bound), the last for longer waits.

    Example:
      >>> import grain
      >>> loader = jaxload.from_grain(grain.MapDataset.range(64), jaxload.data_parallel(),
      ...                             global_batch_size=16)
      >>> for batch in loader:
      ...     pass                                      # the training step
      >>> stats = loader.stats()
      >>> stats.steps, stats.ms_per_step("backend") >= 0
      (4, True)
      >>> print(stats)                                  # with this run's numbers
      process 0: 4 steps, wait ... ms/step, backend ..., agree ..., assemble ..., check ...
      ms/step; ... batches ready on average; ... MB/s
    """

    process_index: int
    steps: int = 0
    wait_s: float = 0.0
    backend_s: float = 0.0
    agree_s: float = 0.0
    assemble_s: float = 0.0
    check_s: float = 0.0
    nbytes: int = 0
    elapsed_s: float = 0.0
    ready_sum: int = 0
    rounds: int = 0
    round_bytes: int = 0
    padding_rows: int = 0
    waits: list[int] = dataclasses.field(default_factory=lambda: [0] * (len(WAIT_BUCKETS_S) + 1))

    def copy(self) -> Stats:
        """A snapshot that later steps leave as it is."""
        return dataclasses.replace(self, waits=list(self.waits))

    def waited(self, seconds: float) -> None:
        """Counts one wait of the loop for a batch."""
        self.wait_s += seconds
        self.waits[bisect.bisect_left(WAIT_BUCKETS_S, seconds)] += 1

    def ms_per_step(self, part: str) -> float:
        """Mean milliseconds per step of ``"wait"``, ``"backend"``, ``"agree"``, ``"assemble"``
        or ``"check"``."""
        if part not in _PARTS:
            raise ValueError(f"part={part!r} must be one of {_PARTS}")
        seconds: float = getattr(self, f"{part}_s")
        return 1000 * seconds / max(self.steps, 1)

    @property
    def ready_mean(self) -> float:
        """Prefetched batches ready, on average, when the loop asked for the next one."""
        return self.ready_sum / max(self.steps, 1)

    @property
    def wait_share(self) -> float:
        """The share of the loop's time spent waiting for data (0 to 1): one minus the data
        loading's goodput."""
        return min(self.wait_s / self.elapsed_s, 1.0) if self.elapsed_s else 0.0

    @property
    def bytes_per_s(self) -> float:
        """This process's batch bytes delivered per second of the loop's time."""
        return self.nbytes / self.elapsed_s if self.elapsed_s else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The totals plus the derived per-step means, JSON-serializable."""
        return {**dataclasses.asdict(self), **{f"{p}_ms_per_step": self.ms_per_step(p) for p in _PARTS},
                "ready_mean": self.ready_mean, "bytes_per_s": self.bytes_per_s,
                "wait_share": self.wait_share}

    def __str__(self) -> str:
        ms = {p: self.ms_per_step(p) for p in _PARTS}
        return (f"process {self.process_index}: {self.steps} steps, wait {ms['wait']:.2f} ms/step, "
                f"backend {ms['backend']:.1f}, agree {ms['agree']:.1f}, assemble "
                f"{ms['assemble']:.1f}, check {ms['check']:.1f} ms/step; {self.ready_mean:.1f} "
                f"batches ready on average; {self.bytes_per_s / 1e6:.1f} MB/s")


@dataclasses.dataclass(frozen=True)
class StatsSummary:
    """Every process's :class:`Stats`, from :meth:`jaxload.Loader.stats` with ``all_processes``.

    The leader (process 0) gathers all processes' numbers and names the slowest; only the
    slowest's numbers travel back to the other processes, so that the coordinator moves O(N)
    bytes, not O(N^2). ``per_process`` therefore holds every process's :class:`Stats` on
    process 0, and elsewhere this process's and the slowest's (sorted by process index).

    Example:
      >>> import grain
      >>> loader = jaxload.from_grain(grain.MapDataset.range(64), jaxload.data_parallel(),
      ...                             global_batch_size=16)
      >>> for batch in loader:
      ...     pass
      >>> summary = loader.stats(all_processes=True)   # on every process, at the same point
      >>> summary.slowest, summary.process_count, summary.of(summary.slowest).steps
      (0, 1, 4)
      >>> print(summary)                                # with this run's numbers
      process  steps     wait ms  backend ms    agree ms assemble ms    check ms  ready     MB/s
            0      4 ...
      slowest: process 0 (... ms/step in its pipeline, ... assembling)
    """

    per_process: tuple[Stats, ...]
    slowest: int  # the process that spends the most time per step producing its batches
    process_count: int

    def of(self, process_index: int) -> Stats:
        """The :class:`Stats` of one process (any on process 0; here or the slowest elsewhere)."""
        for s in self.per_process:
            if s.process_index == process_index:
                return s
        raise KeyError(f"process {process_index}'s stats are only on process 0; this summary "
                       f"holds processes {[s.process_index for s in self.per_process]}")

    def __str__(self) -> str:
        head = (f"{'process':>7} {'steps':>6} " + " ".join(f"{p + ' ms':>11}" for p in _PARTS)
                + f" {'ready':>6} {'MB/s':>8}")
        rows = [f"{s.process_index:>7} {s.steps:>6} "
                + " ".join(f"{s.ms_per_step(p):>11.2f}" for p in _PARTS)
                + f" {s.ready_mean:>6.1f} {s.bytes_per_s / 1e6:>8.1f}" for s in self.per_process]
        slow = self.of(self.slowest)
        note = (f"slowest: process {self.slowest} ({slow.ms_per_step('backend'):.2f} ms/step in "
                f"its pipeline, {slow.ms_per_step('assemble'):.2f} assembling)")
        if len(self.per_process) < self.process_count:
            note += f"; all {self.process_count} processes are listed on process 0"
        return "\n".join([head, *rows, note])


def _production_ms(s: Stats) -> float:
    """Time per step producing batches (backend + assemble): what the others wait for."""
    return s.ms_per_step("backend") + s.ms_per_step("assemble")


def gather(stats: Stats, name: Name, timeout_s: float) -> StatsSummary:
    """Every process's ``stats`` summarized (a collective: every process calls it at the same
    point). The leader reads all; the others get back the slowest's numbers only."""
    gathered: dict[int, Stats] = {}

    def decide(reports: Reports) -> tuple[str, bool]:
        gathered.update(reports.parsed(Stats))
        slowest = max(gathered.values(), key=_production_ms)
        return json.dumps({"slowest": dataclasses.asdict(slowest), "count": len(gathered)}), True

    text = agreement.gather(name, json.dumps(dataclasses.asdict(stats)), decide, timeout_s)
    key = f"{name.prefix}/0/decision"
    verdict = wire.loads(text, key=key, writer=0)
    if not isinstance(verdict, dict) or not isinstance(verdict.get("count"), int):
        raise wire.MalformedValueError(f"malformed value in {key!r} written by process 0: "
                                       f"{text[:200]!r}")
    slowest = wire.from_fields(Stats, verdict.get("slowest"), text, key=key, writer=0)
    known = gathered or {stats.process_index: stats, slowest.process_index: slowest}
    return StatsSummary(tuple(known[p] for p in sorted(known)), slowest.process_index,
                        verdict["count"])


@contextlib.contextmanager
def timed(stats: Stats, part: str) -> Iterator[None]:
    """Adds the time spent inside ``with timed(stats, "backend"):`` to ``stats.backend_s``.

    Both the prefetch thread and the loop's thread add to the same totals, hence the lock."""
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        with _lock:
            setattr(stats, f"{part}_s", getattr(stats, f"{part}_s") + elapsed)
