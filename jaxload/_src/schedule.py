"""Batch-size schedules: ``global_batch_size=[(0, 64), (1000, 128), (5000, 256)]``.

Step ``s`` has the size of the last pair whose first step is ``<= s``. Rows are consumed in the
pipeline's global order across the changes: step ``s`` takes rows ``[rows_before(s),
rows_before(s + 1))``, so over an epoch every element is seen once (``remainder="pad"``) or at
most once (``"drop"``), and a state's global row means the same under any schedule.

How: the loading groups do not depend on the batch size (only on the layout's sharding), so
each group keeps its share of the order (``k + K * j``) and takes ``size / K`` of its elements
per step. The pipeline is batched to ``unit`` rows, the greatest common divisor of the
``size / K``, and :meth:`Schedule.regrouped` joins ``size / K / unit`` of those batches into
each step's batch; the backend position after a step is its last part's.

With ``remainder="pad"`` a size that the batch shards do not divide is placed on the devices
rounded up (:func:`~jaxload._src.remainder.padded_batch_size`); it must be a multiple of the
``K`` loading groups, each of which then loads ``size / K`` real rows at the start of its block,
the rest padding (``mask`` False).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import numpy as np

from jaxload._src.assemble import aligned_empty
from jaxload._src.plan import Plan
from jaxload._src.protocol import INFINITE
from jaxload._src.trees import HostBatch
from jaxload._src.validate import is_nonnegative_int, is_positive_int


def parse(value: Any) -> tuple[tuple[int, int], ...] | None:
    """The ``(first_step, size)`` pairs of a schedule, or None for a plain size; a ValueError
    or TypeError naming the pair and what was expected.

    Example:
      >>> parse([(0, 16), (3, 32)])
      ((0, 16), (3, 32))
      >>> parse([(0, 16), (3, 0)])
      Traceback (most recent call last):
      ...
      ValueError: global_batch_size schedule: the size from step 3 must be a positive int, got 0
    """
    if not isinstance(value, list | tuple):
        return None
    pairs = []
    for pair in value:
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise TypeError("global_batch_size schedule: expected (first_step, global_batch_size) "
                            f"pairs, got {pair!r}")
        step, size = pair
        if not is_nonnegative_int(step):
            raise ValueError(f"global_batch_size schedule: a first step must be an int >= 0, "
                             f"got {step!r}")
        if not is_positive_int(size):
            raise ValueError(f"global_batch_size schedule: the size from step {step} must be a "
                             f"positive int, got {size!r}")
        pairs.append((step, size))
    if not pairs or pairs[0][0] != 0:
        raise ValueError(f"global_batch_size schedule: the first pair must start at step 0, got "
                         f"{value!r:.200}")
    for (a, _), (b, _) in zip(pairs, pairs[1:], strict=False):
        if b <= a:
            raise ValueError(f"global_batch_size schedule: first steps must increase, got step {b} "
                             f"after step {a}")
    return tuple(pairs)


def from_option(value: Any, plan_of: Callable[[Any], Plan], unsupported: str | None
                ) -> tuple[Any, Plan, Schedule | None]:
    """``global_batch_size=`` as given: the global batch size to build the pipeline with, its
    plan, and the schedule if any (the pipeline then batches ``unit`` rows per loading group).
    ``unsupported`` names a source that cannot follow a schedule (it batches itself)."""
    pairs = parse(value)
    if pairs is None:
        return value, plan_of(value), None
    if unsupported:
        raise ValueError(f"a global_batch_size schedule needs a pipeline jaxload batches; "
                         f"{unsupported} does not (pass one global_batch_size)")
    schedule = Schedule.build(pairs, plan_of)
    return schedule.unit * schedule.first.shard_count, schedule.pipeline_plan, schedule


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A validated schedule and each size's plan (all with the same loading groups)."""

    pairs: tuple[tuple[int, int], ...]
    plans: dict[int, Plan] = dataclasses.field(compare=False)
    unit: int  # rows per loading group of the pipeline's batches: gcd of the size / K

    @classmethod
    def build(cls, pairs: tuple[tuple[int, int], ...], plan_of: Any) -> Schedule:
        """``plan_of(size)`` is each size's plan (a ValueError naming a size that the layout
        cannot split); the plans must agree on the loading groups."""
        plans: dict[int, Plan] = {}
        for step, size in pairs:
            try:
                plan = plan_of(size)
            except ValueError as e:
                raise ValueError(f"global_batch_size schedule, size {size} from step {step}: {e}"
                                 ) from e
            if size % plan.shard_count:  # padded (remainder="pad") to the batch shards
                raise ValueError(
                    f"global_batch_size schedule, size {size} from step {step}: a size the "
                    f"{plan.num_batch_shards} batch shards do not divide must be a multiple of "
                    f"the {plan.shard_count} loading groups under a schedule (each loads "
                    f"size / {plan.shard_count} real rows per step); e.g. "
                    f"{max(size // plan.shard_count, 1) * plan.shard_count}")
            plans[size] = plan
        groups = {(p.shard_index, p.loading_groups) for p in plans.values()}
        if len(groups) > 1:  # a layout's groups follow its sharding, not the size: a guard
            raise ValueError("global_batch_size schedule: the sizes give different loading "
                             f"groups: {sorted(groups)}")
        count = next(iter(plans.values())).shard_count
        return cls(pairs, plans, math.gcd(*(size // count for size in plans)))

    @property
    def first(self) -> Plan:
        return self.plans[self.pairs[0][1]]

    @property
    def pipeline_plan(self) -> Plan:
        """What the pipeline batches: ``unit`` rows of this loading group's share."""
        k, unit = self.first.shard_index, self.unit
        return dataclasses.replace(self.first, global_batch_size=unit * self.first.shard_count,
                                   local_batch_size=unit, global_rows=(k * unit, (k + 1) * unit))

    @property
    def plan(self) -> Plan:
        """Step 0's plan, carrying the schedule (what ``loader.plan`` and ``Plan.explain``
        show)."""
        return dataclasses.replace(self.first, schedule=self.pairs)

    def size_at(self, step: int) -> int:
        return [size for first, size in self.pairs if first <= step][-1]

    def plan_at(self, step: int) -> Plan:
        return self.plans[self.size_at(step)]

    def rows_before(self, step: int) -> int:
        """Global rows consumed by steps ``0 .. step - 1``."""
        rows = 0
        for (first, size), (end, _) in zip(self.pairs, [*self.pairs[1:], (step, 0)], strict=True):
            rows += size * max(min(end, step) - first, 0)
        return rows

    def parts(self, step: int) -> int:
        """How many of the pipeline's batches make step ``step``'s per-process batch."""
        return self.size_at(step) // self.first.shard_count // self.unit

    def steps_in(self, parts: int, first_step: int, pad: bool) -> int:
        """How many steps from ``first_step`` on ``parts`` pipeline batches make (the last one
        incomplete under ``pad``)."""
        if parts == INFINITE:
            return INFINITE
        step = first_step
        while True:  # a segment (steps of one size) at a time: O(pairs), not O(steps)
            per = self.parts(step)
            end = next((first for first, _ in self.pairs if first > step), None)
            span = parts // per if end is None else min(parts // per, end - step)
            step, parts = step + span, parts - span * per
            if end is None or step < end:  # the parts ran out inside this segment
                return step - first_step + (1 if pad and parts else 0)

    def after(self, steps: int) -> Schedule:
        """This schedule for a pass that starts ``steps`` steps into it (the loader's earlier
        passes): its step 0 is this one's step ``steps``; the pipeline's ``unit`` stays."""
        later = [(first - steps, size) for first, size in self.pairs if first > steps]
        return dataclasses.replace(self, pairs=((0, self.size_at(steps)), *later))

    def regrouped(self, source: Iterable[tuple[HostBatch, Any]], first_step: int, pad: bool
                  ) -> Regrouped:
        return Regrouped(self, source, first_step, pad)

    def as_json(self) -> list[list[int]]:
        return [list(pair) for pair in self.pairs]


class Regrouped:
    """Each step's per-process batch joined from the pipeline's ``unit``-row batches, with the
    backend position after its last part; ``length`` in steps where the pipeline's is known."""

    def __init__(self, schedule: Schedule, source: Iterable[tuple[HostBatch, Any]],
                 first_step: int, pad: bool):
        self._schedule, self._source, self._first, self._pad = schedule, source, first_step, pad
        parts = getattr(source, "length", None)
        self.describe = getattr(source, "describe", None)  # what it shards, compared in round 0
        self.uneven = getattr(source, "uneven", False)  # what "drop" leaves out is named
        self.length = None if parts is None else schedule.steps_in(parts, first_step, pad)

    def __iter__(self) -> Iterator[tuple[HostBatch, Any]]:
        items, step = iter(self._source), self._first
        try:
            while True:
                wanted, parts = self._schedule.parts(step), []
                for _ in range(wanted):
                    item = next(items, None)
                    if item is None:
                        break
                    parts.append(item)
                if not parts or (len(parts) < wanted and not self._pad):
                    return
                yield _joined([batch for batch, _ in parts]), parts[-1][1]
                step += 1
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()


def step_of(position: dict[str, Any]) -> int:
    """The schedule's step at ``position``: steps of the loader's earlier passes
    (``steps_before``) plus the pass's own."""
    return int(position.get("steps_before", 0) + position["step"])


def next_pass(position: dict[str, Any], start: dict[str, Any]) -> dict[str, Any]:
    """``start`` for a new pass after the one at ``position``: the schedule goes on."""
    return {**start, "steps_before": step_of(position)}


def _joined(batches: list[HostBatch]) -> HostBatch:
    """The batches' rows in one batch, each leaf written once into an aligned buffer (which
    XLA:CPU then uses in place, as the pipelines' own batches)."""
    if len(batches) == 1:
        return batches[0]

    def join(*leaves: Any) -> np.ndarray:
        arrays = [np.asarray(leaf) for leaf in leaves]
        out = aligned_empty((sum(len(a) for a in arrays), *arrays[0].shape[1:]), arrays[0].dtype)
        return np.concatenate(arrays, out=out)

    joined: HostBatch = jax.tree_util.tree_map(join, *batches)
    return joined
