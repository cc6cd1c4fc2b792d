"""The tutorials' pipeline, ``from_tensor_slices(arrays)`` with or without a ``shuffle``, read
by index: each loading group gathers its own rows from the arrays with numpy.

Split by elements through tf.data, every process would slice, shuffle and batch every row of
the arrays to keep one in ``K`` of them (at 4 processes, four times the recipe's copies, and
a tf.data iterator built per pass, about 3 ms). Yet a seeded shuffle's order depends only on
its seeds, its buffer size and how many rows it is given
(:mod:`~jaxload._src.pipelines.tf.shuffle`). So a pass takes the order of the user's shuffle
over the row indices
(:meth:`~jaxload._src.pipelines.tf.shuffle.Passes.order`: one batch of ``int64`` a pass, read
from one iterator kept over the passes), and each group's batch at a step is its rows of that
step's global batch (rows ``k::K``, those ``shard(K, k).batch(local_batch_size)`` gives),
gathered from the arrays (a view of the tensors' buffers: nothing is copied to build it) into a
64-byte aligned buffer, which the assembly then places without another copy. The rows, their
order and the positions are those of the tf.data pass it replaces.

Example:
  >>> import tensorflow as tf
  >>> ds = tf.data.Dataset.from_tensor_slices({"x": np.arange(10) * 10}).prefetch(2)
  >>> memory = InMemory.of(ds)
  >>> [b["x"].tolist() for b in memory.batches(None, 0, Steps(per_step=4, groups=2, group=1,
  ...                                                            rows=2, drop=False))]
  [[10, 30], [50, 70], [90]]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np

from jaxload._src import compat
from jaxload._src.assemble import aligned_empty
from jaxload._src.trees import HostBatch

_ABOVE = ("_OptionsDataset", "_PrefetchDataset")  # one-to-one ops that change no element
# A pass's order is computed whole (about 0.5 us a row), where tf.data hands out its first
# element once the shuffle's buffer is full (about 2 us an element): read by index only where
# that costs the first batch no more, i.e. rows <= 4 x buffer + _SLACK (1,000,000 rows through
# a buffer of 10,000: 0.6-0.8 s against 0.04-0.11 s to the first batch)
_SLACK = 65_536


@dataclasses.dataclass(frozen=True)
class Steps:
    """What a loading group takes of each step: ``per_step`` elements of the pass a step
    (``K * local_batch_size`` split by elements, else ``local_batch_size``), its rows
    ``group::groups`` of them, batches of ``rows`` rows, the last partial one dropped where
    ``drop``."""

    per_step: int
    groups: int
    group: int
    rows: int
    drop: bool


@dataclasses.dataclass(frozen=True)
class InMemory:
    """A ``from_tensor_slices`` pipeline's arrays (its flat leaves, views of the tensors), its
    element spec and its number of rows."""

    leaves: tuple[np.ndarray, ...]
    spec: Any = dataclasses.field(repr=False)
    rows: int

    @classmethod
    def of(cls, ds: Any) -> InMemory | None:
        """The arrays under ``ds`` where it is ``from_tensor_slices`` of dense arrays, with or
        without one ``shuffle`` over it (whose buffer is not far smaller than the rows), under
        ``prefetch`` and ``with_options`` only; else None (the pipeline is read through
        tf.data)."""
        import tensorflow as tf

        node, (kind, op) = ds, compat.tf_op(ds)
        while type(node).__name__ in _ABOVE and kind == "one_to_one":
            node = op[0]
            kind, op = compat.tf_op(node)
        shuffle = op if kind == "shuffle" else None
        if shuffle is not None:
            node, buffer = shuffle[0], shuffle[1]
            kind, op = compat.tf_op(node)
        if kind != "slices" or not all(
                type(spec) is tf.TensorSpec and spec.shape.is_fully_defined()
                for spec in tf.nest.flatten(node.element_spec)):
            return None
        leaves = tuple(np.asarray(t) for t in compat.tf_source_tensors(node))  # no copy on CPU
        if not leaves or any(leaf.dtype == object or not leaf.ndim for leaf in leaves):
            return None
        rows = int(leaves[0].shape[0])
        if shuffle is not None and rows > 4 * buffer + _SLACK:
            return None
        return cls(leaves, ds.element_spec, rows)

    def batches(self, order: np.ndarray | None, skip: int, steps: Steps) -> Iterator[HostBatch]:
        """The group's batches of a pass whose rows come in ``order`` (None: in their order),
        from element ``skip`` of it on."""
        import tensorflow as tf

        at = order[skip:] if order is not None else np.arange(skip, self.rows)
        for first in range(0, len(at), steps.per_step):
            mine = at[first + steps.group:first + steps.per_step:steps.groups]
            if not len(mine) or steps.drop and len(mine) < steps.rows:
                return
            yield tf.nest.pack_sequence_as(self.spec, [_gathered(leaf, mine) for leaf in self.leaves])


def _gathered(leaf: np.ndarray, rows: np.ndarray) -> np.ndarray:
    out = aligned_empty((len(rows), *leaf.shape[1:]), leaf.dtype)
    np.take(leaf, rows, axis=0, out=out)
    return out
