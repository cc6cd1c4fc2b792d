"""What each coordination key belongs to, and where each process is when they disagree.

Every exchange is named by what it belongs to, never by a process-wide counter: a loader's pass
is ``loader/<loader>/pass/<n>``, the loader being named by the user (``name="train"``) or by the
line of the program that built it (``loader@train.py:42``); a check is named by its loader's pass
and step, or by the line that called it (``check.replication@train.py:57``) and how many times
that line has called it. An exchange name is a *series* and an *ordinal* in it; each process
records how many exchanges of each series it has created (:data:`CREATED`), so that it can tell
whether it ever took part in an exchange that another process waits in.

When the processes disagree about which exchange they are at (process 0 alone iterated an extra
loader, or one process skipped a check), each waits for the others in an exchange the others
never reach. A wait that lasts :data:`SUSPECT_S` posts where it waits
(``jaxload/waiting/<process>/...``: nothing is posted while exchanges complete promptly), and a
process whose program is blocked in such a wait compares its exchange with the others' posts: a
process that has not arrived here while it waits in an exchange this process never created is
out of step with it (their programs have diverged: this process cannot get there, being blocked
here, and the other cannot come here before its own exchange completes). Process 0 reads every
post (one read, O(N)); the others read only process 0's. The finding is published to every
process (:mod:`jaxload._src.watchdog`), so all of them raise :class:`OutOfStepError` or
:class:`~jaxload.PeerFailedError` naming each one's exchange within seconds, not after
``timeout_s``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import types
from typing import NamedTuple

from jaxload._src import wire
from jaxload._src.transport import Transport

SUSPECT_S = 2.0  # a wait this long posts where it waits and looks for processes out of step
LOOK_EVERY_S = 2.0  # then looks again this often
_WAITING = "jaxload/waiting"
_HELP = ("Every process must create and iterate the same loaders, and run the same checks, in "
         "the same order: a loader iterated by some processes only cannot agree on its steps "
         "with the others. To look at a few examples on one process, read the pipeline itself "
         "(the tf.data Dataset or Grain dataset), not a jaxload loader; to tell loaders apart "
         "when they are built in a loop or a helper, give each a name= of its own.")


class OutOfStepError(RuntimeError):
    """The processes are at different loaders or checks, each waiting for the others: their
    programs diverged. The message names where each process is.

    Example:
      Every process must create and iterate the same loaders, and run the same checks, in the
      same order; where their programs diverge, every process raises this within seconds (it
      takes two processes to diverge; here is one):

      >>> import grain
      >>> loader = jaxload.from_grain(grain.MapDataset.range(64), jaxload.data_parallel(),
      ...                             global_batch_size=16, name="train")
      >>> try:
      ...     steps = sum(1 for batch in loader)
      ... except jaxload.OutOfStepError as e:      # names the loader each process is at
      ...     print(e)
      >>> steps
      4
    """


class Name(NamedTuple):
    """An exchange's name: a ``series`` (what it belongs to) and an ``ordinal`` in it."""

    series: str
    ordinal: int
    what: str  # how the exchange is described in a message

    @property
    def prefix(self) -> str:
        """The exchange's keys in the coordination service's store."""
        return f"jaxload/{self.series}/{self.ordinal}"


class Created:
    """How many exchanges of each series this process has created (one number per series: the
    series are loaders and call sites, so this stays small however long the run)."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def new(self, series: str, what: str) -> Name:
        """The next exchange of ``series``, described by ``what`` (``{ordinal}`` is replaced)."""
        with self._lock:
            ordinal = self._counts.get(series, 0)
            self._counts[series] = ordinal + 1
        return Name(series, ordinal, what.replace("{ordinal}", str(ordinal)))

    def has(self, series: str, ordinal: int) -> bool:
        """Whether this process created exchange ``ordinal`` of ``series``."""
        return self._counts.get(series, 0) > ordinal

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()


CREATED = Created()
_loaders: dict[str, int] = {}  # loader name -> loaders built under it on this process


def forget_names() -> None:
    """Forgets every exchange and loader name this process created, as in a new process (a warm
    test cluster's next call must agree on names with the other processes)."""
    CREATED.clear()
    _loaders.clear()


def call_site() -> str:
    """``train.py:42``: the line of the user's program that called into jaxload."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # jaxload/
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame = frame.f_back
    if frame is None:
        return "unknown"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def check_name(name: str | None) -> str | None:
    """Validates a user's ``name=`` for a loader or a check."""
    if name is None:
        return None
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"name={name!r} must be a non-empty str without '/' (it names the "
                         "loader's keys in the coordination service)")
    return name


def loader_name(name: str | None) -> str:
    """A new loader's name: ``name`` or ``loader@<file>:<line>`` of the line that built it,
    with ``#k`` for the k-th loader built under the same name on this process."""
    base = check_name(name) or f"loader@{call_site()}"
    k = _loaders.get(base, 0)
    _loaders[base] = k + 1
    return base if k == 0 else f"{base}#{k}"


def one_off(kind: str, name: str | None = None) -> Name:
    """A one-round exchange (a check, a gather) named ``name`` or by the line that called it."""
    at = check_name(name) or call_site()
    return CREATED.new(f"{kind}@{at}", f"{kind} {at!r} (call {{ordinal}})")


# -- where each process waits ---------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Post:
    """That a process waits in round ``round`` of an exchange (``what`` describes it)."""

    series: str
    ordinal: int
    round: int
    what: str


def post(t: Transport, name: Name, round_index: int) -> str:
    """Posts that this process waits in round ``round_index`` of ``name``; returns the key."""
    key = f"{_WAITING}/{t.process_index}/{name.series}/{name.ordinal}"
    t.set(key, json.dumps(dataclasses.asdict(Post(name.series, name.ordinal, round_index,
                                                  name.what))))
    return key


def out_of_step(t: Transport, name: Name, round_index: int, arrived: set[int] | None,
                created: Created = CREATED) -> str | None:
    """Why this process, blocked in round ``round_index`` of ``name``, waits for processes that
    wait in exchanges it never created; None if none does (yet).

    ``arrived``: the processes that reached this round (process 0 knows them; the others pass
    None and look at process 0 only, which keeps the coordinator's load O(N) per look).
    """
    elsewhere: dict[int, Post] = {}
    for process, waits in _others_posts(t, _WAITING if arrived is not None else f"{_WAITING}/0"):
        if arrived is not None and process in arrived:
            continue
        if (waits.series, waits.ordinal) == (name.series, name.ordinal):
            continue  # it waits here too (in a later round, or from another thread)
        if not created.has(waits.series, waits.ordinal):
            elsewhere.setdefault(process, waits)
    if not elsewhere:
        return None
    shown = sorted(elsewhere)[:8]
    theirs = "; ".join(f"process {p} waits in {elsewhere[p].what} (round "
                       f"{elsewhere[p].round})" for p in shown)
    more = f" and {len(elsewhere) - len(shown)} more" if len(elsewhere) > len(shown) else ""
    return (f"the processes are out of step: process {t.process_index} waits in {name.what} "
            f"(round {round_index}) for processes that never reach it, because they wait in "
            f"exchanges process {t.process_index} never started: {theirs}{more} (processes "
            f"[{ranges(sorted(elsewhere))}]). {_HELP}")


def where_others_wait(t: Transport) -> str:
    """Where the other processes wait (posted by waits longer than :data:`SUSPECT_S`), for a
    timeout's message; empty if none posted."""
    try:
        posts = sorted(_others_posts(t, _WAITING), key=lambda pair: pair[0])
    except Exception:  # noqa: BLE001 - a message must not fail
        return ""
    if not posts:
        return ""
    shown = "; ".join(f"process {p} in {v.what} (round {v.round})" for p, v in posts[:8])
    return f" Where the others wait: {shown}."


def ranges(indices: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``'0-2, 5'``: readable with thousands of processes."""
    parts: list[str] = []
    start: int | None = None
    for i, p in enumerate(indices):
        if start is None:
            start = p
        if i + 1 == len(indices) or indices[i + 1] != p + 1:
            parts.append(str(start) if start == p else f"{start}-{p}")
            start = None
    return ", ".join(parts)


def _others_posts(t: Transport, prefix: str) -> list[tuple[int, Post]]:
    """The other processes' posts under ``prefix``. A malformed one is ignored: it cannot be
    told apart from noise, and ignoring it only delays the finding to ``timeout_s``."""
    posts = []
    for key, value in t.dir_get(prefix):
        process = key[len(_WAITING) + 1:].split("/", 1)[0]
        if not process.isdigit() or int(process) == t.process_index:
            continue
        try:
            posts.append((int(process), wire.fields_of(Post, value, key=key,
                                                       writer=int(process))))
        except wire.MalformedValueError:
            continue
    return posts
