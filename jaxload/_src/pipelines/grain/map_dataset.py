"""A Grain ``MapDataset``: sharded by index, batched on the ``MapDataset``, read by index."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from jaxload._src import compat
from jaxload._src.adapters.stack import stack_elements
from jaxload._src.pipelines.base import Batches, LocalSpec, weakly
from jaxload._src.pipelines.grain import described
from jaxload._src.pipelines.grain.iter_dataset import (
    batch_rows,
    batched_iter,
    dropped_counted,
    iterated,
)
from jaxload._src.plan import Plan
from jaxload._src.remainder import DROP, rows_read
from jaxload._src.state import Elastic, LocalBatches, why_not_sliceable
from jaxload._src.told import warn_once
from jaxload._src.trees import HostBatch


class GrainMapDataset:
    """This loading group's share of a ``MapDataset``: ``ds[rows:][k::K]`` from global row
    ``rows``, batched to ``local_batch_size`` rows and read by index on the loader's thread
    (``read_options``: Grain's thread pool instead). Its length is known; it starts at any
    global row, so it resumes on another topology (unless ``shard=False`` or ``batched``).
    A ``MapDataset`` that drops elements (``filter``) is read through ``to_iter_dataset``: split
    over several loading groups, each filters its own share ``ds[k::K]`` (see
    :func:`warn_filtered_split`); refused under a padded global batch, whose rows are placed by
    index (:func:`check_not_filtered`). Every process describes it for the cross-process
    comparison (:mod:`~jaxload._src.pipelines.grain.described`).
    """

    backend: str = "grain"
    not_resumable: str | None = None

    def __init__(self, ds: Any, plan: Plan, *, global_batch_size: int, shard: bool,
                 batched: bool, remainder: str, read_options: Any):
        self._ds, self._plan, self._global = ds, plan, global_batch_size
        self._shard, self._batched, self._remainder = shard, batched, remainder
        self._read_options = read_options
        self._padded = plan.global_batch_size != global_batch_size
        if self._padded:
            check_not_filtered(ds, plan)
        self._splits_a_filter = shard and plan.shard_count > 1 and compat.drops_elements(ds)
        if self._splits_a_filter and not self._padded:
            warn_filtered_split(plan, remainder)
        self._describe = described.map_dataset(
            ds, plan, shard=shard, reads=not self._padded or rows_read(plan, global_batch_size) > 0)
        rows = plan.local_batch_size
        self._rows = max(rows_read(plan, global_batch_size), 1) if self._padded else rows
        self.batches = self.from_row(0)
        self.by_index = read_options is None and not compat.drops_elements(self._group(0))
        self.elastic = self._elastic()

    def spec(self) -> LocalSpec | None:
        return None

    def from_row(self, start: int) -> Callable[[Any], Iterable[tuple[HostBatch, Any]]]:
        """``batches(position)`` of this group's share from global row ``start`` on."""
        group = self._group(start)
        by_index = (None if compat.drops_elements(group) else group) if self._batched else (
            _batched_by_index(group, self._rows, self._remainder))  # a filter: None at its holes
        batches: LocalBatches
        if by_index is None:  # Grain cannot batch it by index: iterate, then batch
            elements = group.to_iter_dataset(self._read_options or _no_threads())
            if self._splits_a_filter and self._remainder == DROP and not self._batched:
                batches = dropped_counted(elements, self._rows, self._plan.shard_index)
            else:
                batches = iterated(batched_iter(elements, self._rows, self._batched,
                                                self._remainder))
        elif self._read_options is None:
            batches = _indexed(by_index, self._rows if self._batched and self._remainder == DROP
                               else None)
        else:
            batches = iterated(by_index.to_iter_dataset(self._read_options))
        return described.with_description(batches, self._describe, uneven=not self._shard)

    def _group(self, start: int) -> Any:
        """This group's elements of the global order from row ``start`` on."""
        ds, plan = self._ds, self._plan
        if self._padded:  # this group's real rows of each step
            return _real_rows(ds[start:], self._global, plan)
        if not self._shard or (not start and plan.shard_count == 1):
            return ds  # a slice adds work per element; [0:][0::1] is ds
        return ds[start:][plan.shard_index :: plan.shard_count]

    def _elastic(self) -> Elastic:
        ds = self._ds
        per = self._global // self._plan.shard_count if self._batched else 1  # rows an element
        identity = dict(length=len(ds) * per, rows_per_step=self._global,
                        fingerprint=functools.cache(lambda: stable_fingerprint(ds)))
        why_not = why_not_sliceable(self._shard, self._batched, "the whole MapDataset")
        if why_not:
            return Elastic(why_not=why_not, **identity)  # type: ignore[arg-type]
        return Elastic(from_row=weakly(self.from_row), refuses=_filtered if compat.drops_elements(ds)
                       else None, **identity)  # type: ignore[arg-type]


def _batched_by_index(ds: Any, rows: int, remainder: str) -> Any:
    """``ds.batch(rows)`` on the MapDataset, or None where Grain cannot batch it by index
    (after a ``filter`` or ``flat_map``, which drop elements: found in its ``parents``)."""
    if compat.drops_elements(ds):
        return None
    return ds.batch(rows, drop_remainder=remainder == DROP, batch_fn=stack_elements)


def _indexed(batches: Any, full: int | None = None) -> Callable[[Any], Batches]:
    """The batches of a batched MapDataset read by index, each with its position after it;
    with ``full`` (the user's own batches, ``remainder="drop"``), a last batch of fewer rows
    left out (read once, to know)."""
    count: list[int] = []

    def local_batches(position: Any) -> Batches:
        start = next_batch(position)
        if not count:
            last = len(batches) - 1
            short = full is not None and last >= 0 and batch_rows(batches[last]) < full
            count.append(last + 1 - short)
        # the length lets the loader agree on the step count once, then read batch by batch
        return Batches(((batches[i], {"next_batch": i + 1}) for i in range(start, count[0])),
                       length=max(count[0] - start, 0))

    return local_batches


def next_batch(position: Any) -> int:
    """The index of the batch a position (``{"next_batch": k}``, None: the start) resumes at."""
    if position is None:
        return 0
    if not isinstance(position, dict) or not isinstance(position.get("next_batch"), int):
        raise ValueError(f"a Grain MapDataset position is {{'next_batch': <int>}}, got "
                         f"{position!r:.200}")
    return int(position["next_batch"])


def _no_threads() -> Any:
    """Grain's ReadOptions without a thread pool, for a MapDataset that must be iterated."""
    import grain

    return grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


def _real_rows(ds: Any, global_batch_size: int, plan: Plan) -> Any:
    """The elements of this group's real rows when the global batch is padded: of every
    ``global_batch_size`` elements, those at this group's rows (none for a group of padding)."""
    import grain

    start, rows = plan.global_rows[0], rows_read(plan, global_batch_size)
    full, last = divmod(len(ds), global_batch_size)
    count = full * rows + min(max(last - start, 0), rows) if rows else 0
    return grain.MapDataset.range(count).map(
        lambda k: ds[(k // rows) * global_batch_size + start + k % rows])


_KEPT_APART = ("make the kept elements a MapDataset of their own (e.g. grain.MapDataset.source "
               "of the kept indices, then .map)")


def check_not_filtered(ds: Any, plan: Plan) -> None:
    """Refuses a MapDataset that drops elements (``filter``, ``flat_map``) under a padded global
    batch, whose rows of each step are read by index: a filter breaks that arithmetic."""
    if not compat.drops_elements(ds):
        return
    raise ValueError(
        "from_grain got a MapDataset that drops elements (filter or flat_map) to split over a "
        "padded global batch (rows of each step placed by index), which a filter breaks. "
        f"Either {_KEPT_APART}, or pass a global_batch_size that is a multiple of the "
        f"{plan.num_batch_shards} batch shards.")


def warn_filtered_split(plan: Plan, remainder: str) -> None:
    """Tells (once per process) what a filtered MapDataset over several loading
    groups gives: each group filters its own share ``ds[k::K]``, so a step holds each group's
    next kept rows, not a block of the kept order; with ``remainder="drop"`` a pass ends when
    the group with the fewest kept rows runs out, dropping what the others have left."""
    if remainder != DROP:
        return
    warn_once(
        f"from_grain splits a MapDataset that drops elements (filter or flat_map) over "
        f"{plan.shard_count} loading groups: each group filters its own share (group k "
        f"the indices k, k + {plan.shard_count}, ...), so the groups keep different numbers of "
        "rows. With "
        "remainder='drop' a pass ends when one group runs out, and the kept rows the others "
        "have left are not delivered (each process counts its group's at the pass's end and "
        "names them in a warning); remainder='pad' delivers every kept row once (the short "
        "groups padded, mask False).", stacklevel=4)


def _filtered(state: dict[str, Any]) -> str | None:
    """A MapDataset that filters elements reads more indices than it delivers rows, so the rows
    consumed are no prefix of its order: seen in the state's loading group, which must have
    been the only one (several groups each filtered their own share)."""
    position = state.get("position")
    read = position.get("next_index", 0) if isinstance(position, dict) else 0
    rows = state["step"] * state["plan"]["local_batch_size"]
    groups = state["plan"]["shard_count"]
    if read <= rows and groups == 1:
        return None
    seen = (f"the state's loading group read {read} indices for {rows} rows" if groups == 1
            else f"the state's {groups} loading groups each filtered their own share")
    return (f"the MapDataset drops elements (filter): {seen}, so the rows consumed are not a "
            f"prefix of its order; {_KEPT_APART}, or resume on the same topology")


def stable_fingerprint(ds: Any) -> str | None:
    """:func:`fingerprint`, or None where two readings differ (random maps without a seed)."""
    return described.stable_hash(ds, _ends_and_middle(len(ds)))


def fingerprint(ds: Any) -> str | None:
    """A short hash of a MapDataset's first, middle and last elements
    (:func:`~jaxload._src.pipelines.grain.described.hash_elements`): a different dataset or
    shuffle of the same length almost surely differs.

    Example:
      >>> import grain
      >>> ds = grain.MapDataset.range(10)
      >>> fingerprint(ds.shuffle(seed=1)) != fingerprint(ds.shuffle(seed=2))
      True
      >>> len(fingerprint(ds))
      16
    """
    return described.hash_elements(ds, _ends_and_middle(len(ds)))


def _ends_and_middle(length: int) -> list[int]:
    return sorted({0, length // 2, length - 1}) if length else []
