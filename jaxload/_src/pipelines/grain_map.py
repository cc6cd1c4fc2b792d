"""A Grain ``MapDataset``: sharded by index, batched on the ``MapDataset``, read by index."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable
from typing import Any

import jax
import numpy as np

from jaxload._src import check, compat
from jaxload._src.adapters.stack import stack_elements
from jaxload._src.pipelines.base import Batches, LocalSpec
from jaxload._src.pipelines.grain_iter import batched_iter, iterated
from jaxload._src.plan import Plan
from jaxload._src.remainder import DROP, rows_read
from jaxload._src.state import Elastic, why_not_sliceable
from jaxload._src.trees import HostBatch


class GrainMapDataset:
    """This loading group's share of a ``MapDataset``: ``ds[rows:][k::K]`` from global row
    ``rows``, batched to ``local_batch_size`` rows and read by index on the loader's thread
    (``read_options``: Grain's thread pool instead). Its length is known; it starts at any
    global row, so it resumes on another topology (unless ``shard=False`` or ``batched``).
    A ``MapDataset`` that drops elements (``filter``) is read through ``to_iter_dataset``.
    """

    backend: str = "grain"
    not_resumable: str | None = None

    def __init__(self, ds: Any, plan: Plan, *, global_batch_size: int, shard: bool,
                 batched: bool, remainder: str, read_options: Any):
        self._ds, self._plan, self._global = ds, plan, global_batch_size
        self._shard, self._batched, self._remainder = shard, batched, remainder
        self._read_options = read_options
        self._padded = plan.global_batch_size != global_batch_size
        rows = plan.local_batch_size
        self._rows = max(rows_read(plan, global_batch_size), 1) if self._padded else rows
        self.batches = self.from_row(0)
        self.by_index = (read_options is None and
                         (batched or not compat.drops_elements(self._group(0))))
        self.elastic = self._elastic()

    def spec(self) -> LocalSpec | None:
        return None

    def from_row(self, start: int) -> Callable[[Any], Iterable[tuple[HostBatch, Any]]]:
        """``batches(position)`` of this group's share from global row ``start`` on."""
        group = self._group(start)
        by_index = group if self._batched else _batched_by_index(group, self._rows,
                                                                 self._remainder)
        if by_index is None:  # Grain cannot batch it by index: iterate, then batch
            options = self._read_options or _no_threads()
            return iterated(batched_iter(group.to_iter_dataset(options), self._rows,
                                         self._batched, self._remainder))
        if self._read_options is None:
            return _indexed(by_index)
        return iterated(by_index.to_iter_dataset(self._read_options))

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
        identity = dict(length=len(ds), rows_per_step=self._global,
                        fingerprint=functools.cache(lambda: stable_fingerprint(ds)))
        why_not = why_not_sliceable(self._shard, self._batched, "the whole MapDataset")
        if why_not:
            return Elastic(why_not=why_not, **identity)  # type: ignore[arg-type]
        return Elastic(from_row=self.from_row, refuses=_filtered,
                       **identity)  # type: ignore[arg-type]


def _batched_by_index(ds: Any, rows: int, remainder: str) -> Any:
    """``ds.batch(rows)`` on the MapDataset, or None where Grain cannot batch it by index
    (after a ``filter`` or ``flat_map``, which drop elements: found in its ``parents``)."""
    if compat.drops_elements(ds):
        return None
    return ds.batch(rows, drop_remainder=remainder == DROP, batch_fn=stack_elements)


def _indexed(batches: Any) -> Callable[[Any], Batches]:
    """The batches of a batched MapDataset read by index, each with its position after it."""

    def local_batches(position: Any) -> Batches:
        start = next_batch(position)
        # the length lets the loader agree on the step count once, then read batch by batch
        return Batches(((batches[i], {"next_batch": i + 1}) for i in range(start, len(batches))),
                       length=max(len(batches) - start, 0))

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


def _filtered(state: dict[str, Any]) -> str | None:
    """A MapDataset that filters elements reads more indices than it delivers rows, so the rows
    consumed are no prefix of its order (seen in the state's own loading group)."""
    position = state.get("position")
    read = position.get("next_index", 0) if isinstance(position, dict) else 0
    rows = state["step"] * state["plan"]["local_batch_size"]
    if read <= rows:
        return None
    return (f"the MapDataset drops elements (filter): the state's loading group read {read} "
            f"indices for {rows} rows, so the rows consumed are not a prefix of its order; "
            "make the kept elements a MapDataset of their own (e.g. grain.MapDataset.source of "
            "the kept indices, then .map), or resume on the same topology")


def stable_fingerprint(ds: Any) -> str | None:
    """:func:`fingerprint`, or None where two readings differ (random maps without a seed)."""
    first = fingerprint(ds)
    return first if first == fingerprint(ds) else None


def fingerprint(ds: Any) -> str | None:
    """A short hash of a MapDataset's first, middle and last elements (their features' names,
    dtypes and bytes): a different dataset or shuffle of the same length almost surely differs.
    None if an element cannot be read here; Python objects count by their type only.

    Example:
      >>> import grain
      >>> ds = grain.MapDataset.range(10)
      >>> fingerprint(ds.shuffle(seed=1)) != fingerprint(ds.shuffle(seed=2))
      True
      >>> len(fingerprint(ds))
      16
    """
    digest = hashlib.sha256()
    for index in sorted({0, len(ds) // 2, len(ds) - 1} if len(ds) else ()):
        try:
            element = ds[index]
        except Exception:  # the loader reports a failing element where it reads it
            return None
        for path, leaf in jax.tree_util.tree_flatten_with_path(element)[0]:
            described = f"{index}{jax.tree_util.keystr(path)}{type(leaf).__name__}"
            leaf = np.asarray(leaf)
            digest.update(f"{described}{leaf.dtype}{leaf.shape}".encode())
            if not leaf.dtype.hasobject:
                digest.update(check.fingerprint(leaf).encode())
    return digest.hexdigest()[:16]
