"""A ``tf.data.Dataset``: sharded with ``shard``, batched with ``batch``, positioned by a count of
batches (skip-by-count: exact for a deterministic pipeline)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from jaxload._src.pipelines.base import Batches, LocalSpec
from jaxload._src.pipelines.tf_spec import batch_spec, check_element_spec
from jaxload._src.plan import Plan
from jaxload._src.protocol import INFINITE
from jaxload._src.remainder import DROP, rows_read
from jaxload._src.state import Elastic, why_not_sliceable


class TfDataset:
    """This loading group's share of a ``tf.data.Dataset``: ``ds.skip(rows).shard(K, k)`` from
    global row ``rows``, batched to ``local_batch_size``. Its length is tf.data's cardinality
    where known; it reads no batch by index, and starts at any global row (skipping: the rows
    skipped are read), unless ``shard=False`` or ``batched``. Its spec is the element spec."""

    backend: str = "tf.data"
    by_index: bool = False
    not_resumable: str | None = None

    def __init__(self, ds: Any, plan: Plan, *, global_batch_size: int, shard: bool,
                 batched: bool, remainder: str):
        check_element_spec(ds.element_spec, plan.local_batch_size if batched else None, remainder)
        self._ds, self._plan, self._global = ds, plan, global_batch_size
        self._shard, self._batched, self._remainder = shard, batched, remainder
        self.batches = self.from_row(0)
        length = int(ds.cardinality())
        why_not = why_not_sliceable(shard, batched, "the whole dataset")
        self.elastic = Elastic(from_row=None if why_not else self.from_row, why_not=why_not,
                               length=length if length >= 0 else None,
                               rows_per_step=global_batch_size)

    def spec(self) -> LocalSpec:
        """A per-process batch from the element spec: nothing is read."""
        return batch_spec(self._ds.element_spec, self._plan.local_batch_size, self._batched)

    def from_row(self, start: int) -> Callable[[int | None], Batches]:
        """This group's batches from global row ``start`` on, resuming after ``consumed``
        batches (the skipped elements are read)."""
        import tensorflow as tf

        group, plan = self._group(start), self._plan
        # elements, unless they are batches already (batched=True, a padded batch's real rows)
        unbatched = plan.global_batch_size == self._global and not self._batched
        drop = self._remainder == DROP

        def batches(consumed: int | None) -> Batches:
            consumed = consumed or 0
            elements = plan.local_batch_size if unbatched else 1
            pipeline = group.skip(consumed * elements) if consumed else group
            if unbatched:
                pipeline = pipeline.batch(plan.local_batch_size, drop_remainder=drop)
            pipeline = pipeline.prefetch(tf.data.AUTOTUNE)
            return Batches(zip(pipeline.as_numpy_iterator(), itertools.count(consumed + 1)),
                           length=_length(pipeline))

        return batches

    def _group(self, start: int) -> Any:
        """``ds.skip(start).shard(K, k)``, or with a padded global batch its real rows of each
        step, as batches. With ``shard=False`` (``start`` is 0), ``ds`` itself."""
        ds, plan = self._ds, self._plan
        if not self._shard:
            return ds
        rest = ds.skip(start) if start else ds
        if plan.global_batch_size != self._global:
            return _real_rows(rest, self._global, plan)
        return rest.shard(plan.shard_count, plan.shard_index)


def _real_rows(ds: Any, global_batch_size: int, plan: Plan) -> Any:
    """Batches of this group's real rows when the global batch is padded: of every
    ``global_batch_size`` elements, the ones at this group's rows (none for a group of padding).
    """
    import tensorflow as tf

    start, rows = plan.global_rows[0], rows_read(plan, global_batch_size)
    if not rows:
        return ds.take(0).batch(1)
    share = ds.batch(global_batch_size).map(
        lambda b: tf.nest.map_structure(lambda x: x[start : start + rows], b))
    return share.filter(lambda b: tf.shape(tf.nest.flatten(b)[0])[0] > 0)


def _length(ds: Any) -> int | None:
    """The batches a pipeline holds, where tf.data knows it (``INFINITE`` after repeat())."""
    import tensorflow as tf

    n = int(ds.cardinality())
    if n == int(tf.data.INFINITE_CARDINALITY):
        return INFINITE
    return n if n >= 0 else None
