"""One pass over a loader's data: read ahead, decide, assemble (the prefetch producer).

Stages, once per round of the step agreement (:mod:`jaxload._src.protocol`):

1. **read ahead** (:class:`ReadAhead`): this process's next batches, validated (most of them
   read between the previous round's handouts: the pipeline never idles while one is consumed);
2. **decide**: a :class:`~jaxload._src.protocol.Report` to the leader, a
   :class:`~jaxload._src.protocol.Decision` back: how many steps exist, or why the pass ends;
3. **assemble**: the agreed steps, padded where this process's data has run out, become
   global ``jax.Array`` batches, each handed on as a :class:`Handout`.

A failure in any stage is told to every process at once (:mod:`~jaxload._src.watchdog`) and in
the next round if one follows; the process that failed raises its own exception. A pass stopped
early (``close()``) reports that it stopped, so the others end the pass instead of waiting.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Iterable
from typing import Any, NamedTuple, TypeVar

import jax

from jaxload._src import group_proof, protocol, round_check, same_dataset, signature, stream_proof
from jaxload._src.agreement import Decide, PeerFailedError, Reports
from jaxload._src.assemble import build_global
from jaxload._src.check import plan_and_batch_records
from jaxload._src.failures import Failure, add_note
from jaxload._src.layout import Layout
from jaxload._src.pass_context import PassContext
from jaxload._src.protocol import Decision, Report
from jaxload._src.read_ahead import Local, ReadAhead
from jaxload._src.remainder import pad_rows
from jaxload._src.stage import Stage
from jaxload._src.stats import timed
from jaxload._src.trees import GlobalBatch, HostBatch

T = TypeVar("T")


class Handout(NamedTuple):
    """One global batch on its way to the training loop.

    Attributes:
      batch: the pytree of global ``jax.Array``\\ s.
      step: its step in the pass (0-based; a resumed pass starts at the step it resumed at).
      position: the loader state after it: ``{"step": step + 1, "position": backend position}``.
      nbytes: bytes of this process's part of it.
      checks: the checks due at this step: ``""``, ``"[plan+]batch"`` or ``"[plan+]replication"``
    """

    batch: GlobalBatch
    step: int
    position: dict[str, Any]
    nbytes: int
    checks: str


class Pass:
    """One pass of a loader as a generator of :class:`Handout`\\ s (see the module docstring),
    from its :class:`~jaxload._src.pass_context.PassContext`; when it is closed,
    ``context.failure`` tells it whether the loop failed (the reshard): reported then."""

    def __init__(self, context: PassContext, source: Iterable[tuple[HostBatch, Any]],
                 checked_in_round: Layout | None = None):
        self._context = context
        self._check_layout = checked_in_round  # the first step's check rides the first round
        self._held: Handout | None = None  # the first step, assembled before the first round
        self._assembled: Local | None = None  # the last batch assembled (its digests)
        self._exchange, self._plan_at = context.exchange, context.plan_at
        self._pad, self._stats = context.config.pad, context.stats
        self._check_period = context.config.check_period
        self._first_step = self._step = context.start["step"]
        self._position = context.start["position"]
        self._watchdog, self._recorder = context.watchdog, context.recorder
        watch = functools.partial(context.watchdog.reading, context.exchange.prefix,
                                  limit_s=context.config.timeout_s)
        plan = context.plan  # a loading group of several processes proves its rows each step,
        self._rows = len(plan.loading_groups[plan.shard_index]) > 1 and self._check_period > 0
        self._streams = bool(getattr(source, "proves", False))  # a split proves its elements
        self._proving = self._rows or self._streams  # blocks compared for duplicates only
        self._distinct = bool(getattr(source, "uneven", True))  # where groups read their own
        self._reader = ReadAhead(source, self._plan_at, self._pad, self._stats, self._step,
                                 context.recorder, watch, self._rows, context.seed, context.config.batched)
        self._template: str | None = None  # the signature to pad with, if this process has none
        self._ended = self._reported = False  # no round follows; this process's failure told
        self._doing = Stage.ASSEMBLING  # or READING, PADDING: the part of stage 3 under way
        self._deferred: Exception | None = None  # a read between handouts that failed

    def __iter__(self) -> Generator[Handout, None, None]:
        window, total, round_index = 1, None, 0
        while True:
            decision = self._decide(self._read_ahead(window, total, round_index), window, total)
            total, window, round_index = decision.total, decision.window, round_index + 1
            between = decision.more and (total is None or self._proving)  # reads ahead
            for i in range(decision.count):
                handout, self._held = self._held or self._stage(Stage.ASSEMBLING, self._assemble), None
                try:
                    yield handout
                except GeneratorExit:
                    self.stop()
                    raise
                if between:
                    self._read_between(decision.count - i - 1, window, decision.count)
            if not decision.more:
                stream_proof.raise_if_diverged(decision)
                group_proof.raise_if_diverged(decision)
                if decision.stopped is None:  # the data's end, as agreed
                    self._reader.ended(held=self._held is not None)
                return

    # -- stage 1 -----------------------------------------------------------------------------
    def _read_ahead(self, window: int, total: int | None, round_index: int) -> Report:
        """Reads ahead (where the step count is not known yet) and builds this round's report."""
        reader = self._reader
        known = total is not None and not self._proving  # no read-ahead: read at assembly

        def read() -> None:
            if self._deferred is not None:  # a read between handouts failed: raised here
                raise self._deferred
            reader.fill(1 if known and not round_index else 0 if known else window)

        self._stage(Stage.READING, read)
        check, layout, size = None, self._check_layout, self._context.plan.global_batch_size
        if round_index == 0 and layout is not None and self._check_period and reader.ahead:
            first = self._held = self._stage(Stage.ASSEMBLING, self._assemble)  # the first step
            with timed(self._stats, "check"):  # its check in this round's report
                check = self._stage(Stage.CHECKING, lambda: plan_and_batch_records(
                    layout, size, first.batch, distinct=self._distinct))
        return Report(
            ready=len(reader.ahead) + (self._held is not None), digest=reader.digest, nbytes=reader.nbytes,
            length=protocol.as_jsonable(reader.length) if round_index == 0 else None,
            needs_template=(self._pad and reader.signature is None and self._template is None
                            and reader.exhausted), check=check, dataset=reader.take_described(),
            **reader.digests(self._assembled if self._held else None, self._rows, self._streams))

    def _read_between(self, left: int, window: int, count: int) -> None:
        """Reads part of the next round's window after a handout, so that the pipeline keeps
        reading while the round's ``left`` steps are consumed; a failure raises at the next."""
        if self._deferred is not None:
            return
        reader = self._reader
        per = -(-window // max(count, 1))  # the window, spread over the round's handouts
        try:
            reader.fill(min(left + window, len(reader.ahead) + per))
        except Exception as e:  # noqa: BLE001 - raised at the next round's read
            self._deferred = e

    # -- stage 2 -----------------------------------------------------------------------------
    def _decide(self, report: Report, window: int, total: int | None) -> Decision:
        step, pad, ahead = self._agreeing, self._pad, self._proving
        groups = self._plan_at(step).loading_groups if self._rows else ()

        def decide(reports: Reports) -> tuple[str, bool]:
            parsed = protocol.parse(reports)
            decision = protocol.decide(parsed, step=step, window=window, pad=pad, total=total,
                                       ahead=ahead)
            for verdict in (round_check.verdict, same_dataset.verdict):
                decision = verdict(decision, parsed)
            decision = stream_proof.verdict(decision, parsed, step)  # the cause comes first
            decision = group_proof.verdict(decision, parsed, step, groups)
            # a round carrying the template (or naming an element) follows the decision
            return decision.to_json(), decision.final and decision.template_from is None and (
                decision.stream_diverged is None)

        with timed(self._stats, "agree"):
            decision = Decision.from_json(self._round(report, decide),
                                          self._exchange.decision_key, 0)
            if decision.mismatch:
                self._raise_mismatch(decision)
            if decision.template_from is not None:
                self._template = self._template_round(decision.template_from, decision.final)
            if decision.stream_diverged is not None:  # which element: one more round
                decision = stream_proof.locate(decision, self._reader.at(decision.count, (
                    self._assembled if self._held else None)), self._exchange.process_index, self._round)
        self._ended = decision.final  # no round follows
        self._reader.dropping = decision if decision.undelivered else self._reader.dropping
        if decision.error is not None:
            raise PeerFailedError(decision.error)
        same_dataset.raise_if_refused(decision)  # before the check: a cause, not a symptom
        round_check.raise_if_failed(decision, self._exchange.decision_key)
        if decision.checked and self._held is not None:
            self._held = self._held._replace(checks="")
        return decision

    @property
    def _agreeing(self) -> int:
        """The first step the round agrees on (the held first step is assembled already)."""
        return int(self._step) - (self._held is not None)

    def _round(self, report: Report, decide: Decide) -> str:
        text = report.to_json()
        self._stats.rounds += 1
        self._stats.round_bytes += len(text)
        decision = self._exchange.round(text, decide, where=f"step {self._agreeing}")
        assert decision is not None  # only a round that ends the pass has none
        return decision

    def _raise_mismatch(self, decision: Decision) -> None:
        """A round of full signatures (one process per digest), then every process raises."""
        reader, groups = self._reader, decision.mismatch or {}
        speaks = reader.digest and self._exchange.process_index == min(groups[reader.digest])

        def message(reports: Reports) -> tuple[str, bool]:
            readable = {p: signature.readable(r.signature)
                        for p, r in protocol.parse(reports).items() if r.signature}
            return protocol.mismatch_error(self._agreeing, readable, groups), True

        self._ended = True
        raise ValueError(self._round(Report(signature=reader.signature if speaks else None), message))

    def _template_round(self, source: int, final: bool) -> str:
        """A round in which process ``source`` sends its signature to pad with."""
        def carried(reports: Reports) -> tuple[str, bool]:
            return protocol.parse(reports)[source].signature or "", final

        return self._round(Report(signature=self._reader.signature if (
            self._exchange.process_index == source) else None), carried)

    # -- stage 3 -----------------------------------------------------------------------------
    def _assemble(self) -> Handout:
        self._doing = Stage.READING  # a pass of known length reads each batch only now
        local = self._reader.take()
        self._doing, self._assembled = Stage.ASSEMBLING, local
        if local is None and not self._pad:
            raise RuntimeError(
                f"this process's pipeline ended at step {self._step}, before the step count "
                "its length promised (a len() or cardinality() that overstates the data)")
        plan = self._plan_at(self._step)
        with timed(self._stats, "assemble"):
            self._doing = Stage.PADDING
            if local is None:  # this process's data has run out: padding
                text = self._reader.signature or self._template
                assert text is not None  # a template round came first
                leaves, treedef = jax.tree_util.tree_flatten(signature.zeros(text, 0))
            else:
                treedef, leaves, self._position = local.treedef, local.leaves, local.position
            if self._recorder is not None:  # this process's real rows, before padding
                self._recorder.add(self._step, None if local is None else
                                   jax.tree_util.tree_unflatten(treedef, leaves))
            if self._pad:
                real = leaves[0].shape[0] if local is not None and leaves else 0
                self._stats.padding_rows += plan.local_batch_size - real
                leaves, treedef = jax.tree_util.tree_flatten(pad_rows(
                    jax.tree_util.tree_unflatten(treedef, leaves), plan.local_batch_size))
            self._doing = Stage.ASSEMBLING
            batch = build_global(treedef, leaves, plan)
        step = self._step
        self._step += 1
        due = self._check_period and (step == self._first_step or step % self._check_period == 0)
        checks = (("plan+" if step == self._first_step else "") + (
            "batch" if self._distinct else "replication")) if due else ""
        return Handout(batch, step, {"step": step + 1, "position": self._position},
                       sum(leaf.nbytes for leaf in leaves), checks)

    # -- failures and stops ------------------------------------------------------------------
    def _stage(self, stage: Stage, work: Callable[[], T]) -> T:
        """Runs ``work``; a failure is reported to every process, then raised here."""
        try:
            return work()
        except Exception as e:
            step = self._reader.next_step if stage is Stage.READING else self._agreeing
            stage = self._doing if stage is Stage.ASSEMBLING else stage
            if self._reader.validating:  # the batch was read; its shapes cannot be assembled
                stage = Stage.ASSEMBLING
            self._report_failure(e, stage, step)
            raise

    def _report_failure(self, error: BaseException, stage: Stage, step: int) -> None:
        if self._reported:
            return
        self._reported = True
        text = f"{type(error).__name__}: {error}"
        # every process learns of it now, not at the next round (there may be none)
        failure = Failure(self._watchdog.process_index, stage, step, text, self._exchange.prefix)
        if not isinstance(error, PeerFailedError):
            self._watchdog.publish(failure, error, claim=not self._ended)
            add_note(error, f"jaxload: {failure.text.splitlines()[0]} (told every process)")
        if self._ended:  # no round follows: nobody waits for this process's report
            return
        self._ended, report = True, Report(error=text, stage=stage, step=step)
        try:
            self._exchange.round(report.to_json(), protocol.ended_by_report, ends=True)
        except Exception:  # noqa: BLE001 - the process's own exception is what it raises
            pass

    def stop(self) -> None:
        """The consumer stopped in the middle of the pass (``close()``), or before it began."""
        if self._ended:  # no round follows: nobody waits for this process
            self._exchange.leave()
            return
        if (failure := self._context.failure) is not None:
            self._report_failure(failure.error, failure.stage, failure.step)
            return
        self._ended = True
        try:  # the others end the pass
            self._exchange.round(Report(stopped=True).to_json(), protocol.ended_by_report, ends=True)
        except Exception:  # noqa: BLE001 - stopping must not raise; the others time out
            pass
