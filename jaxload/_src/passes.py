"""One pass over a loader's data: read ahead, decide, assemble (the prefetch producer).

Stages, once per round of the step agreement (:mod:`jaxload._src.protocol`):

1. **read ahead** (:class:`ReadAhead`): this process's next batches from its pipeline,
   validated, their signature compared with the pass's first one;
2. **decide**: a :class:`~jaxload._src.protocol.Report` to the leader, a
   :class:`~jaxload._src.protocol.Decision` back: how many steps exist, or why the pass ends;
3. **assemble**: the agreed steps, padded where this process's data has run out, become
   global ``jax.Array`` batches, each handed on as a :class:`Handout`.

A failure in any stage is reported to every process in the next round (each process raises
the cause there), and the process that failed raises its own exception, even when the report
cannot be sent. A pass stopped early (``close()``) reports that it stopped, so the others end the
pass instead of waiting.
"""

from __future__ import annotations

import collections
import contextlib
import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxload._src import protocol, signature
from jaxload._src.agreement import Exchange, PeerFailedError
from jaxload._src.assemble import build_global, check_local_batch
from jaxload._src.layouts import Plan
from jaxload._src.protocol import Decision, Report
from jaxload._src.records import Recorder
from jaxload._src.remainder import PAD, check_paddable, pad_rows
from jaxload._src.stats import Stats, timed
from jaxload._src.watchdog import Failure, Watchdog, add_note

PyTree = Any


class Handout(NamedTuple):
    """One global batch on its way to the training loop.

    Attributes:
      batch: the pytree of global ``jax.Array``\\ s.
      step: its step in the pass (0-based; a resumed pass starts at the step it resumed at).
      position: the loader state after it: ``{"step": step + 1, "position": backend position}``.
      nbytes: bytes of this process's part of it.
      checks: the run-time checks due at this step: ``""``, ``"batch"`` or ``"plan+batch"``.
    """

    batch: PyTree
    step: int
    position: dict
    nbytes: int
    checks: str


class Local(NamedTuple):
    """A validated per-process batch: its tree structure, numpy leaves and backend position."""

    treedef: Any
    leaves: list[np.ndarray]
    position: Any


class ReadAhead:
    """Stage 1: this process's batches, read ahead and validated.

    ``source`` yields ``(batch, backend position after it)``; its optional ``length`` attribute
    is how many batches it holds (``protocol.INFINITE`` for no end). ``watch(step, first)``
    wraps each read, so that the watchdog finds a pipeline stuck in it.
    """

    def __init__(self, source: Iterator, plan: Plan, pad: bool, stats: Stats, first_step: int,
                 recorder: Recorder | None = None,
                 watch: Callable[[int, bool], ContextManager] | None = None):
        self.length = getattr(source, "length", None)
        self._source = iter(source)
        self._plan, self._pad, self._stats = plan, pad, stats
        self._recorder = recorder
        self.ahead: collections.deque[Local] = collections.deque()
        self.exhausted = False
        self.validating = False  # a batch read is being checked before assembly
        self.signature: str | None = None  # this pass's batch signature (JSON)
        self.digest: str | None = None
        self.nbytes = 0
        self._key = None
        self.next_step = self._first_step = first_step  # the step of the next batch read
        self._watch = watch or (lambda step, first: contextlib.nullcontext())

    def fill(self, n: int) -> None:
        """Reads until ``n`` batches are ready or the pipeline ends."""
        while len(self.ahead) < n and not self.exhausted:
            first = self.next_step == self._first_step
            with timed(self._stats, "backend"), self._watch(self.next_step, first):
                local, position = next(self._source, (None, None))
                if local is None:
                    self.exhausted = True
                    return
            self.validating = True
            self.ahead.append(self._validated(local, position))
            self.validating = False

    def take(self) -> Local | None:
        """The next batch (read now if none is ahead), or None when the pipeline has ended."""
        if not self.ahead:
            self.fill(1)
        return self.ahead.popleft() if self.ahead else None

    def _validated(self, local: PyTree, position: Any) -> Local:
        if self._pad:
            check_paddable(local)
        if self._recorder is not None:
            self._recorder.check(local)
        named = check_local_batch(local, self._plan, partial=self._pad)
        leaves = [a for _, a in named]
        treedef = jax.tree_util.tree_structure(local)
        key = (treedef, tuple((a.dtype.str, a.shape[1:]) for a in leaves))
        if self._key is None:
            self._key = key
            self.signature = signature.describe(jax.tree_util.tree_unflatten(treedef, leaves))
            self.digest = signature.digest(self.signature)
            self.nbytes = sum(a.nbytes for a in leaves)
        elif key != self._key:
            now = signature.describe(jax.tree_util.tree_unflatten(treedef, leaves))
            raise ValueError(
                f"the batch at step {self.next_step} differs from the first one: "
                f"{signature.differences(self.signature, now, self._first_step)}. Features need one static "
                "shape and dtype (pad or crop variable-length features in the pipeline); a "
                "changing shape would also recompile the training step.")
        self.next_step += 1
        return Local(treedef, leaves, position)


class Source:
    """A pass's per-process batches, ``(batch, backend position after it)``, and where known
    how many there are (``protocol.INFINITE``: no end), as adapters return them.

    Example:
      >>> import itertools
      >>> batches = [{"x": np.zeros((4, 2))}, {"x": np.ones((4, 2))}]   # per-process batches
      >>> source = Source(zip(batches, itertools.count(1)), length=len(batches))
      >>> [position for batch, position in source], source.length
      ([1, 2], 2)
    """

    def __init__(self, batches, length: int | None = None):
        self._batches = batches
        self.length = length

    def __iter__(self):
        return iter(self._batches)


class Pass:
    """One pass of a loader as a generator of :class:`Handout`\\ s (see the module docstring).

    ``failure`` (a callable) tells the pass, when it is closed, whether the loop stopped
    because of an exception of its own (reshard, checks), to report that instead of a stop.
    """

    def __init__(self, exchange: Exchange, source: Iterator, plan: Plan, *, remainder: str,
                 start: dict, stats: Stats, check_period: int,
                 failure: Callable[[], BaseException | None] = lambda: None,
                 recorder: Recorder | None = None, watchdog: Watchdog | None = None,
                 read_limit_s: float | None = None):
        self._exchange = exchange
        self._plan = plan
        self._pad = remainder == PAD
        self._stats = stats
        self._check_period = check_period
        self._failure = failure
        self._first_step = self._step = start["step"]
        self._position = start["position"]
        self._watchdog = watchdog
        watch = (None if watchdog is None or read_limit_s is None else
                 functools.partial(watchdog.reading, exchange.prefix, limit_s=read_limit_s))
        self._reader = ReadAhead(source, plan, self._pad, stats, self._step, recorder, watch)
        self._recorder = recorder
        self._template: str | None = None  # the signature to pad with, when this process has none
        self._ended = False
        self._doing = "assembling"  # or "loading", "padding": the part of stage 3 under way

    def __iter__(self) -> Iterator[Handout]:
        window, total, round_index = 1, None, 0
        while True:
            decision = self._decide(self._read_ahead(window, total, round_index), window, total)
            total, window, round_index = decision.total, decision.window, round_index + 1
            for _ in range(decision.count):
                handout = self._stage("assembling", self._assemble)
                try:
                    yield handout
                except GeneratorExit:
                    self._stopped()
                    raise
            if not decision.more:
                return

    # -- stage 1 -----------------------------------------------------------------------------
    def _read_ahead(self, window: int, total: int | None, round_index: int) -> Report:
        """Reads ahead (where the step count is not known yet) and builds this round's report."""
        reader = self._reader
        known = total is not None
        self._stage("loading", lambda: reader.fill(1 if known and not round_index else
                                                   0 if known else window))
        return Report(
            ready=len(reader.ahead), digest=reader.digest, nbytes=reader.nbytes,
            length=protocol.as_jsonable(reader.length) if round_index == 0 else None,
            needs_template=(self._pad and reader.signature is None and self._template is None
                            and reader.exhausted))

    # -- stage 2 -----------------------------------------------------------------------------
    def _decide(self, report: Report, window: int, total: int | None) -> Decision:
        step, pad = self._step, self._pad

        def decide(reports: dict[int, str]) -> tuple[str, bool]:
            decision = protocol.decide(protocol.parse(reports), step=step, window=window,
                                       pad=pad, total=total)
            # a round carrying the template follows the decision that asks for it
            return decision.to_json(), decision.final and decision.template_from is None

        with timed(self._stats, "agree"):
            decision = Decision.from_json(self._round(report, decide),
                                          self._exchange.decision_key, 0)
            if decision.mismatch:
                self._raise_mismatch(decision)
            if decision.template_from is not None:
                self._template = self._template_round(decision.template_from, decision.final)
        self._ended = decision.final  # no round follows
        if decision.error is not None:
            raise PeerFailedError(decision.error)
        return decision

    def _round(self, report: Report, decide) -> str:
        self._stats.rounds += 1
        return self._exchange.round(report.to_json(), decide, where=f"step {self._step}")

    def _raise_mismatch(self, decision: Decision) -> None:
        """A round of full signatures (one process per digest), then every process raises."""
        reader, groups = self._reader, decision.mismatch
        speaks = reader.digest and self._exchange.process_index == min(groups[reader.digest])
        mine = Report(signature=reader.signature if speaks else None)

        def message(reports: dict[int, str]) -> tuple[str, bool]:
            texts = {p: r.signature for p, r in protocol.parse(reports).items() if r.signature}
            readable = {p: signature.readable(t) for p, t in texts.items()}
            return protocol.mismatch_error(self._step, readable, groups), True

        self._ended = True
        raise ValueError(self._round(mine, message))

    def _template_round(self, source: int, final: bool) -> str:
        """A round in which process ``source`` sends its signature to pad with."""
        mine = Report(signature=self._reader.signature if self._exchange.process_index == source else None)

        def carried(reports: dict[int, str]) -> tuple[str, bool]:
            return protocol.parse(reports)[source].signature, final

        return self._round(mine, carried)

    # -- stage 3 -----------------------------------------------------------------------------
    def _assemble(self) -> Handout:
        self._doing = "loading"  # a pass of known length reads each batch only now
        local = self._reader.take()
        self._doing = "assembling"
        if local is None and not self._pad:
            raise RuntimeError(
                f"this process's pipeline ended at step {self._step}, before the step count "
                "its length promised (a len() or cardinality() that overstates the data)")
        with timed(self._stats, "assemble"):
            self._doing = "padding"
            if local is None:  # this process's data has run out: padding
                text = self._reader.signature or self._template
                padded = signature.zeros(text, 0)
                treedef = jax.tree_util.tree_structure(padded)
                leaves = jax.tree_util.tree_leaves(padded)
            else:
                treedef, leaves, self._position = local
            if self._recorder is not None:  # this process's real rows, before padding
                self._recorder.add(self._step, None if local is None else
                                   jax.tree_util.tree_unflatten(treedef, leaves))
            if self._pad:
                padded = pad_rows(jax.tree_util.tree_unflatten(treedef, leaves),
                                  self._plan.local_batch_size)
                treedef = jax.tree_util.tree_structure(padded)
                leaves = jax.tree_util.tree_leaves(padded)
            self._doing = "assembling"
            batch = build_global(treedef, leaves, self._plan)
        step = self._step
        self._step += 1
        checks = ""
        if self._check_period and (step == self._first_step or step % self._check_period == 0):
            checks = "plan+batch" if step == self._first_step else "batch"
        return Handout(batch, step, {"step": step + 1, "position": self._position},
                       sum(leaf.nbytes for leaf in leaves), checks)

    # -- failures and stops ------------------------------------------------------------------
    def _stage(self, stage: str, work: Callable[[], Any]) -> Any:
        """Runs ``work``; a failure is reported to every process, then raised here."""
        try:
            return work()
        except Exception as e:
            step = self._reader.next_step if stage == "loading" else self._step
            stage = self._doing if stage == "assembling" else stage
            if self._reader.validating:  # the batch was read; its shapes cannot be assembled
                stage = "assembling"
            self._report_failure(e, stage, step)
            raise

    def _report_failure(self, error: BaseException, stage: str, step: int) -> None:
        if self._ended:
            return
        self._ended = True
        text = f"{type(error).__name__}: {error}"
        if self._watchdog is not None:  # every process learns of it now, not at the next round
            failure = Failure(self._watchdog.process_index, stage, step, text,
                              self._exchange.prefix)
            if not isinstance(error, PeerFailedError):
                self._watchdog.publish(failure, error)
                add_note(error, f"jaxload: {failure.text.splitlines()[0]} (told every process)")
        report = Report(error=text, stage=stage, step=step)
        try:
            self._exchange.round(report.to_json(), _ended_by_report, ends=True)
        except Exception:  # noqa: BLE001 - the process's own exception is what it raises
            pass

    def _stopped(self) -> None:
        """The consumer stopped in the middle of the pass (``close()``)."""
        if self._ended:  # no round follows: nobody waits for this process
            self._exchange.leave()
            return
        failure = self._failure()
        if failure is not None:
            self._report_failure(failure, getattr(failure, "jaxload_stage", "handing out"),
                                 getattr(failure, "jaxload_step", self._step - 1))
            return
        self._ended = True
        try:
            self._exchange.round(Report(stopped=True).to_json(), _ended_by_report, ends=True)
        except Exception:  # noqa: BLE001 - stopping must not raise; the others time out
            pass


def _ended_by_report(reports: dict[int, str]) -> tuple[str, bool]:
    """The leader's decision when its own report (a failure or a stop) ends the pass."""
    decision = protocol.decide(protocol.parse(reports), step=0, window=1, pad=False)
    return decision.to_json(), True
