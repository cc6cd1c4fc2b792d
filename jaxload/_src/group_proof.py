"""A loading group of several processes proves at every step that its processes hand out the
same rows.

The processes of one loading group (model replicas across processes, or a group the user split
with ``shard=False``) must hand out identical rows at every step: otherwise the replicas train on
different data and nothing in JAX notices. What a pipeline gives each process cannot be told
from its ops alone (an unseeded random op, a file list that differs by host, a length that
differs by process), so the rows themselves are compared:

- each such process hashes every batch it reads (:func:`digest`: XXH3-64 over each leaf's
  dtype, shape and bytes, 16 hex digits), and its report carries the digests of the batches it
  has ready, from the round's first step on;
- such a pass reads each round's window ahead (as where lengths are unknown; 1 step, then 4,
  16, 64, up to :data:`~jaxload._src.protocol.MAX_KNOWN_WINDOW` where they are known), so the round
  that agrees on a step has its digests before any process hands it out;
- the leader compares them per group and step (:func:`verdict`); every process hands out the
  steps before the first one that differs, then raises the same :class:`~jaxload.ReplicationError`
  naming that step, the group and which processes hold which rows.

A group of one process has nothing to compare: it hashes nothing and sends nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import xxhash

from jaxload._src import fingerprints
from jaxload._src.comparisons import ReplicationError
from jaxload._src.protocol import Decision, Report
from jaxload._src.whereabouts import ranges

CAUSES = ("an unseeded random op before the split, data or a file list that differs by host, "
          "an order that is not deterministic, or a length that differs by process")


def digest(leaves: Sequence[np.ndarray]) -> str:
    """A batch's digest: XXH3-64 over each leaf's dtype, shape and bytes, as 16 hex digits.

    Example:
      >>> a = np.arange(6, dtype=np.int32)
      >>> digest([a]) == digest([a.copy()]), digest([a]) == digest([a.reshape(2, 3)])
      (True, False)
    """
    h = xxhash.xxh3_64()
    for leaf in leaves:
        fingerprints.add(h, leaf)
    return h.hexdigest()


def verdict(decision: Decision, reports: dict[int, Report], step: int,
            groups: Sequence[Sequence[int]]) -> Decision:
    """``decision``, cut short where the processes of a loading group would hand out different
    rows in the steps it agrees on: the steps before, then the error (``diverged``).
    ``step``: the round's first step; ``groups``: the process indices of each loading group.

    Example:
      >>> same = {0: Report(ready=1, rows=["aa"]), 1: Report(ready=1, rows=["aa"])}
      >>> verdict(Decision(count=1), same, 3, [[0, 1]]).diverged is None
      True
      >>> other = {0: Report(ready=2, rows=["aa", "b"]), 1: Report(ready=2, rows=["aa", "c"])}
      >>> d = verdict(Decision(count=2, more=True), other, 3, [[0, 1]])
      >>> d.count, d.more
      (1, False)
      >>> print(d.diverged)  # doctest: +ELLIPSIS
      at step 4 the processes of loading group 0, which must hand out identical rows, read different ones: ...
    """
    if decision.count < 1 or any(x is not None for x in (
            decision.error, decision.stopped, decision.mismatch, decision.refused,
            decision.check_error, decision.diverged, decision.stream_diverged)):
        return decision
    for s in range(decision.count):
        for g, members in enumerate(groups):
            seen = _rows_at(reports, members, s)
            if seen is not None and len(set(seen.values())) > 1:
                return dataclasses.replace(decision, count=s, more=False, template_from=None,
                                           diverged=_message(step + s, g, seen))
    return decision


def raise_if_diverged(decision: Decision) -> None:
    """Raises the divergence of ``decision`` (after its steps were handed out), if any."""
    if decision.diverged is not None:
        raise ReplicationError(decision.diverged)


def _rows_at(reports: dict[int, Report], members: Sequence[int], s: int) -> dict[int, str] | None:
    """The group's rows at the round's step ``s``: a digest, or ``""`` for a process that has no
    batch there (it pads); None where a member sent no digests (a group of one, or no report)."""
    if len(members) < 2 or any(p not in reports or reports[p].rows is None for p in members):
        return None
    return {p: (rows[s] if s < len(rows := reports[p].rows or []) else "") for p in members}


def by_digest(seen: dict[int, str]) -> dict[str, list[int]]:
    """The processes of ``seen`` (process -> digest) grouped by digest, in process order.

    Example:
      >>> by_digest({1: "b", 0: "a", 2: "a"})
      {'a': [0, 2], 'b': [1]}
    """
    held: dict[str, list[int]] = {}
    for p, d in sorted(seen.items()):
        held.setdefault(d, []).append(p)
    return held


def _message(step: int, group: int, seen: dict[int, str]) -> str:
    held = by_digest(seen)
    what = "; ".join(f"{f'rows with digest {d}' if d else 'no rows (its data ended: padding)'} on "
                     f"process{'es' if len(ps) > 1 else ''} [{ranges(ps)}]"
                     for d, ps in held.items())
    return (f"at step {step} the processes of loading group {group}, which must hand out "
            f"identical rows, read different ones: {what}; every process ends the pass before "
            f"that step. Each of them runs the pipeline on its own; likely causes: {CAUSES}. "
            "Seed every random op, give every process of the group the same data and order, or "
            "make each process its own loading group (a layout with model replicas within "
            "processes).")
