"""A pipeline split by elements proves at every step that every process read the same elements.

Split by elements, every process reads the whole pipeline and keeps its loading group's share
(:mod:`~jaxload._src.pipelines.tf_stream`): right only if they all read the same elements in
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

from jaxload._src.protocol import Decision, Report
from jaxload._src.whereabouts import ranges

CAUSES = ("a random op before the split without a seed (in a filter, an interleave, a batch "
          "later unbatched), a generator or py_function that yields another order or other "
          "data on each process, or data or a file list that differs by host")


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
            decision.check_error, decision.diverged, decision.stream_diverged)):
        return decision
    for s in range(decision.count):
        seen = {p: r.stream[s] for p, r in reports.items()
                if r.stream is not None and s < len(r.stream) and r.stream[s]}
        if len(set(seen.values())) > 1:
            return dataclasses.replace(decision, count=s, more=False, template_from=None,
                                       stream_diverged=_message(step + s, seen))
    return decision


def raise_if_diverged(decision: Decision) -> None:
    """Raises the divergence of ``decision`` (after its steps were handed out), if any."""
    if decision.stream_diverged is not None:
        raise ValueError(decision.stream_diverged)


def _message(step: int, seen: dict[int, str]) -> str:
    read: dict[str, list[int]] = {}
    for p, d in sorted(seen.items()):
        read.setdefault(d, []).append(p)
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
