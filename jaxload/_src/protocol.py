"""The loader's step agreement: what a process reports, and the decision taken from all reports.

Each round of a pass (:class:`jaxload._src.exchange.Exchange`), every process sends a
:class:`Report`: how many batches it has read ahead, a digest of its batches' signature, or the
error that stopped it. The leader turns the reports into one :class:`Decision` with
:func:`decide`, a pure function, so it is tested against fake reports without processes.

Reports are compact (about 60 bytes): the signature travels as a 16-digit digest. Only when
digests differ does a second round carry the full text of one process per signature, so the
error still names which processes have which shapes.

Where every process knows how many batches its pipeline holds (a Grain ``MapDataset``'s ``len``,
a tf.data ``cardinality()``), the first round fixes the pass's step count and agrees on up to
:data:`MAX_KNOWN_WINDOW` of its steps; later rounds, as far apart, only carry failures, and a
last one after the last step ends the pass on every process together (a process that failed,
or that went on to another loader or check, is found there, not after the others have left).
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from jaxload._src import wire
from jaxload._src.whereabouts import ranges

if TYPE_CHECKING:
    from jaxload._src.exchange import Reports

MAX_WINDOW = 16  # steps read ahead and agreed on in one round when lengths are unknown
MAX_KNOWN_WINDOW = 256  # steps between rounds when every process knows its length
WINDOW_BYTES = 256 * 2**20  # per-process batches read ahead for one round, at most
INFINITE = -1  # a length: the pipeline never ends (tf.data repeat())

C = TypeVar("C", bound="_Compact")


class _Compact:
    """JSON with only the fields that differ from their defaults: small messages."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # subclasses are dataclasses

    def to_json(self) -> str:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if getattr(self, f.name) != f.default}
        return json.dumps(fields, separators=(",", ":"))

    @classmethod
    def from_json(cls: type[C], text: str, key: str = "a report",
                  writer: int | str = "another process") -> C:
        """Parses ``text``, read from ``key`` (written by ``writer``), checking every field."""
        return wire.fields_of(cls, text, key=key, writer=writer)


@dataclasses.dataclass(frozen=True)
class Report(_Compact):
    """One process's report for one round.

    Attributes:
      ready: batches read ahead and validated, ready to be assembled.
      digest: the digest of this pass's batch signature, once the process has read a batch.
      nbytes: bytes of one of its batches (sizes the next read-ahead window).
      length: first round only: the batches its pipeline holds from here on (``INFINITE``),
        or None where unknown.
      error: why this process stopped (``"ValueError: ..."``), at which step, in which stage
        (``"loading"``, ``"assembling"``, ``"resharding"``).
      stopped: this process stopped iterating (``break``, ``close()``).
      needs_template: ``remainder="pad"``, this process has no batch and may have to pad.
      signature: the full signature, sent only in the round after a mismatch.
      check: first round only: the records of the first step's check (plan and batch), where
        this process assembled that step before the round (:mod:`~jaxload._src.round_check`).
      dataset: first round only: what this process says of the dataset it shards (its length,
        a hash of a few elements), compared between processes (:mod:`~jaxload._src.same_dataset`).
      rows: in a loading group of several processes, the digests of the batches it has ready,
        from the round's first step on (:mod:`~jaxload._src.group_proof`); else None.
      stream: split by elements, the digests of the global batches its batches were kept
        from, from the round's first step on (:mod:`~jaxload._src.stream_proof`); else None.
    """

    ready: int = 0
    digest: str | None = None
    nbytes: int = 0
    length: int | None = None
    error: str | None = None
    stage: str = "loading"
    step: int | None = None
    stopped: bool = False
    needs_template: bool = False
    signature: str | None = None
    check: dict[str, Any] | None = None
    dataset: dict[str, Any] | None = None
    rows: list[str] | None = None
    stream: list[str] | None = None


@dataclasses.dataclass(frozen=True)
class Decision(_Compact):
    """What every process does after a round.

    Attributes:
      count: steps to hand out now (padding included).
      more: whether another round follows.
      window: batches to read ahead for the next round.
      total: the pass's step count from its start, once all lengths are known.
      error: a failure that every process raises (the failing process raises its own).
      stopped: the process that stopped iterating; the pass ends on every process.
      mismatch: signature digest -> processes, when they differ; a round of full signatures
        follows, then every process raises.
      template_from: ``remainder="pad"``: the process whose signature the processes without
        a batch pad with; a round carrying it follows.
      template: that signature (the decision of the round that carries it).
      checked: the first step's check was made in this round (every process sent its
        records); ``check_error``: the :class:`~jaxload.check.CheckError` it found (its type's
        name and message), which every process raises.
      refused: the processes shard different datasets (what differs, and on which processes):
        the pass ends before its first step and every process raises a ValueError with it.
      diverged: the processes of a loading group read different rows at step ``count`` of the
        round (:mod:`~jaxload._src.group_proof`): every process hands out the ``count`` steps
        before it, then raises a ReplicationError with this message.
      stream_diverged: the processes read different elements before the split at step
        ``count`` of the round (:mod:`~jaxload._src.stream_proof`): every process hands out the
        ``count`` steps before it, then raises a ValueError with this message; ``stream_read``:
        which processes read which digest there (a round follows, naming the first element that
        differs).
      undelivered: ``remainder="drop"``: the batches each process holds beyond the pass's step
        count (process index as text -> batches), where some hold more than others: exactly in
        the first round where every length is known, at least (read ahead) in the round that
        ends a pass of unknown length (:func:`jaxload._src.remainder.undelivered_warning`);
        ``exact`` says which.
    """

    count: int = 0
    more: bool = False
    window: int = 1
    total: int | None = None
    error: str | None = None
    stopped: int | None = None
    mismatch: dict[str, list[int]] | None = None
    template_from: int | None = None
    template: str | None = None
    checked: bool = False
    check_error: list[str] | None = None
    refused: str | None = None
    diverged: str | None = None
    stream_diverged: str | None = None
    stream_read: dict[str, list[int]] | None = None
    undelivered: dict[str, int] | None = None
    exact: bool = False

    @property
    def final(self) -> bool:
        """The pass ends after this round (no further round runs)."""
        return not self.more


def decide(reports: dict[int, Report], *, step: int, window: int, pad: bool,
           total: int | None = None, ahead: bool = False) -> Decision:
    """The decision of a round: the same reports give the same decision on every process.

    Args:
      reports: each process's report (all processes; or the leader's alone when it ends).
      step: the pass's step count before this round.
      window: batches each process was asked to read ahead.
      pad: ``remainder="pad"``: go on while any process has data (the others pad), else stop
        at the first step some process cannot fill.
      total: the pass's step count, if an earlier round fixed it.
      ahead: every round agrees only on the window read ahead, also where the step count is
        known (a loading group proving its rows: :mod:`~jaxload._src.group_proof`).

    Example:
      >>> decide({0: Report(ready=2, digest="ab"), 1: Report(ready=1, digest="ab")},
      ...        step=0, window=2, pad=False)
      Decision(count=1, more=False, window=4, total=None, error=None, stopped=None, \
mismatch=None, template_from=None, template=None, checked=False, check_error=None, \
refused=None, diverged=None, stream_diverged=None, stream_read=None, \
undelivered={'0': 1}, exact=False)
    """
    failed = {p: r for p, r in reports.items() if r.error is not None}
    if failed:
        p, r = min(failed.items())
        return Decision(error=f"process {p} failed while {r.stage} step {r.step}: {r.error}")
    stopped = [p for p, r in reports.items() if r.stopped]
    if stopped:
        return Decision(stopped=min(stopped))
    kinds: dict[str, list[int]] = {}
    for p, r in sorted(reports.items()):
        if r.digest is not None:
            kinds.setdefault(r.digest, []).append(p)
    if len(kinds) > 1:
        return Decision(mismatch=kinds, more=True)
    held: dict[int, int] = {}  # drop: what each process holds beyond the step count
    exact = False  # known from every length (else: what the processes read ahead)
    if total is None:
        remaining = _known_total(reports, pad)
        total = remaining if remaining in (None, INFINITE) else step + remaining
        if remaining not in (None, INFINITE) and not pad:  # every length known: exact
            held = {p: r.length - remaining for p, r in reports.items()
                    if r.length not in (None, INFINITE) and r.length > remaining}
            exact = True
    nbytes = max((r.nbytes for r in reports.values()), default=0)
    # a loading group proving a pass of known length reads up to MAX_KNOWN_WINDOW ahead, its
    # windows growing 4-fold (its rounds are an overhead, not the way to find the pass's end)
    most, grows = (MAX_KNOWN_WINDOW, 4) if ahead and total is not None else (MAX_WINDOW, 2)
    read_window = max(1, min(grows * window, most, WINDOW_BYTES // max(nbytes, 1)))
    if total is not None:  # no read-ahead: rounds only carry failures, MAX_KNOWN_WINDOW apart
        left = total - step if total != INFINITE else MAX_KNOWN_WINDOW
        count = min(left, max(window, 1) if ahead else MAX_KNOWN_WINDOW)
        more = total == INFINITE or count > 0  # a round at the end: no process ends alone
        next_window = read_window if ahead else MAX_KNOWN_WINDOW
    else:
        counts = [r.ready for r in reports.values()]
        count = max(counts) if pad else min(counts)
        more = count == window
        next_window = read_window
        if not more and not pad:
            held = {p: r.ready - count for p, r in reports.items() if r.ready > count}
    template_from = None
    if pad and count and any(r.needs_template for r in reports.values()) and kinds:
        template_from = min(next(iter(kinds.values())))
    return Decision(count=count, more=more, window=next_window, total=total,
                    template_from=template_from, exact=exact and bool(held),
                    undelivered={str(p): n for p, n in sorted(held.items())} or None)


def _known_total(reports: dict[int, Report], pad: bool) -> int | None:
    """The pass's step count if every process knows its length (first round only)."""
    lengths = [r.length for r in reports.values() if r.length is not None]
    if not lengths or len(lengths) < len(reports):
        return None
    finite = [n for n in lengths if n != INFINITE]
    if pad:
        return INFINITE if len(finite) < len(lengths) else max(finite)
    return min(finite) if finite else INFINITE


def mismatch_error(step: int, signatures: dict[int, str], groups: dict[str, list[int]]) -> str:
    """The message every process raises when the processes' batches differ (see :func:`decide`).

    ``signatures``: the readable signature of one process per group.
    """
    described = "\n".join(f"  processes [{ranges(ps)}]: {signatures[min(ps)]}"
                          for ps in groups.values())
    return (f"at step {step} the processes' batches differ in structure, feature shapes or "
            f"dtypes (shapes shown without the batch dim), so they cannot form one global "
            f"batch:\n{described}")


def ended_by_report(reports: Reports) -> tuple[str, bool]:
    """The leader's decision when its own report (a failure or a stop) ends the pass."""
    return decide(parse(reports), step=0, window=1, pad=False).to_json(), True


def parse(reports: Reports) -> dict[int, Report]:
    """Each process's report, its fields checked (a malformed one names its key and writer)."""
    return reports.parsed(Report)


def as_jsonable(value: Any) -> Any:
    """Lengths from backends come as numpy ints; reports carry plain ints."""
    return None if value is None else int(value)
