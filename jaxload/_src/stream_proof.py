"""A pipeline split by elements proves at every step that every process read the same elements.

Split by elements, every process reads the whole pipeline and keeps its loading group's share
(:mod:`~jaxload._src.pipelines.tf.stream`): right only if they all read the same elements in
the same order, which no list of ops can promise (a generator, a ``py_function``, a random op in
a ``filter``, a file list that differs by host). So each process's report carries, for every
step it has read ahead, the digest of the global batch its batch was kept from; the leader
compares them (:func:`verdict`), before any process hands the step out. Where they differ, every
process hands out the steps before and raises the same ValueError, naming the step and which
processes read what. A process without a batch at a step (its share of the last, partial global
batch is empty) has nothing to compare there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from jaxload._src import protocol
from jaxload._src.group_proof import by_digest
from jaxload._src.protocol import Decision, Report
from jaxload._src.whereabouts import ranges

if TYPE_CHECKING:
    from jaxload._src.exchange import Decide, Reports
    from jaxload._src.read_ahead import Local

CAUSES = ("a random op before the split without a seed (in a filter, an interleave, a batch "
          "later unbatched), a generator or py_function that yields another order or other "
          "data on each process, data or a file list that differs by host, or a split of "
          "your own (shard(jax.process_count(), jax.process_index()): then each process's "
          "pipeline is its share already, pass shard=False)")


def verdict(decision: Decision, reports: dict[int, Report], step: int) -> Decision:
    """``decision``, cut short where the processes read different elements before the split at
    a step it agrees on: the steps before, then the error (``stream_diverged``). ``step``: the
    round's first step.

    Example:
      >>> same = {0: Report(ready=1, stream=["aa"]), 1: Report(ready=1, stream=["aa"])}
      >>> verdict(Decision(count=1), same, 0).stream_diverged is None
      True
      >>> other = {0: Report(ready=2, stream=["aa", "b"]), 1: Report(ready=2, stream=["aa", "c"])}
      >>> d = verdict(Decision(count=2, more=True), other, 5)
      >>> d.count, d.more
      (1, False)
      >>> print(d.stream_diverged)  # doctest: +ELLIPSIS
      at step 6 the processes read different elements of the pipeline before splitting it: ...
    """
    if decision.count < 1 or any(x is not None for x in (
            decision.error, decision.stopped, decision.mismatch, decision.refused,
            decision.diverged, decision.stream_diverged)):
        return decision
    for s in range(decision.count):
        seen = {p: r.stream[s] for p, r in reports.items()
                if r.stream is not None and s < len(r.stream) and r.stream[s]}
        if len(set(seen.values())) > 1:
            read = by_digest(seen)
            # the check of the round's first step fails there as a symptom (rows of one
            # process equal to another's by chance): the cause is said instead
            return dataclasses.replace(decision, count=s, more=False, template_from=None,
                                       stream_diverged=_message(step + s, read), stream_read=read,
                                       check_error=decision.check_error if s else None)
    return decision


def locate(decision: Decision, local: Local | None, process_index: int,
           round: Callable[[Report, Decide], str]) -> Decision:
    """``decision`` (diverged) with its message naming the first element of the step's global
    batch that differs: one more ``round``, in which one process per digest sends the
    fingerprints of that global batch's elements (``local``: its batch at that step)."""
    read, message = decision.stream_read or {}, decision.stream_diverged or ""
    elements = local.elements if local is not None and local.stream in read and (
        process_index == min(read[local.stream])) else None  # one process per digest speaks
    mine = Report(signature=None if elements is None else elements.hex())

    def first(reports: Reports) -> tuple[str, bool]:
        sent = [r.signature for r in protocol.parse(reports).values() if r.signature]
        return located(message, sent), True

    return dataclasses.replace(decision, stream_diverged=round(mine, first))


def located(message: str, sent: list[str]) -> str:
    """``message`` naming the first element whose fingerprints (16 hex digits each, per
    process in ``sent``) differ.

    Example:
      >>> located("... digest b on process [1]. Split", ["00" * 8 + "11" * 8, "00" * 8 + "22" * 8])
      '... digest b on process [1], first at its element 1 (0-based). Split'
    """
    if len(sent) < 2:
        return message
    for i in range(max(len(s) for s in sent) // 16):
        if len({s[16 * i:16 * i + 16] for s in sent}) > 1:
            return message.replace(". Split", f", first at its element {i} (0-based). Split", 1)
    return message


def raise_if_diverged(decision: Decision) -> None:
    """Raises the divergence of ``decision`` (after its steps were handed out), if any."""
    if decision.stream_diverged is not None:
        raise ValueError(decision.stream_diverged)


def _message(step: int, read: dict[str, list[int]]) -> str:
    what = "; ".join(f"digest {d} on process{'es' if len(ps) > 1 else ''} [{ranges(ps)}]"
                     for d, ps in read.items())
    return (f"at step {step} the processes read different elements of the pipeline before "
            f"splitting it: the global batch of that step has {what}. Split by elements, each "
            "process reads the whole pipeline and keeps its share of every global batch, so they "
            "would deliver some records twice and others never; every process ends the pass "
            f"before that step. Likely causes: {CAUSES}. Seed every random op before the split "
            "(seed=..., or a tf.random.stateless_* op), give every process the same data and "
            "order, or move the random op into a map after the others (a map at the end of the "
            "pipeline runs on each group's share only).")
