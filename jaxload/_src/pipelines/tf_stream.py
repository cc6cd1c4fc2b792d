"""A tf.data pipeline split by elements that proves, step by step, that every process reads the
same elements before it keeps its share.

Split by elements, each of the ``K`` loading groups reads the whole pipeline and keeps one
element in ``K``. That is right only if every process reads the same elements in the same order,
which its graph cannot always show (a generator, a ``py_function``, a random op in a
``filter``, a file list that differs by host). So the split itself hashes what it reads: the
pipeline below its trailing one-to-one ops (the ``map``\\ s a pass applies to its own share, where
a random augmentation may draw other values on each process) is read a global batch at a time,
``batch(K * local_batch_size)``, and each group keeps rows ``k::K`` of it — the rows
``shard(K, k).batch(local_batch_size)`` would give — with a fingerprint of every element of the
global batch (``tf.fingerprint`` of each feature's bytes, 8 bytes per element). Python folds those
into one digest per step (:func:`digests`); the step agreement compares the digests of every
process before any process hands the step out (:mod:`~jaxload._src.stream_proof`).

The trailing ops then run on the group's rows only, as in a pass positioned by replay: the
global batch's share is sliced back into elements, mapped, and batched again, inside one
``flat_map`` per global batch.

Example:
  >>> import tensorflow as tf
  >>> plan = jaxload.data_parallel(devices=jaxload.simulated_devices(2, 2)).plan(
  ...     global_batch_size=4, process_index=1)
  >>> ds = tf.data.Dataset.range(10).map(lambda x: 10 * x)
  >>> split = Split.of(ds, plan, drop=False)
  >>> [(b.tolist(), len(fps)) for b, fps in split.dataset(split.below).as_numpy_iterator()]
  [([10, 30], 4), ([50, 70], 4), ([90], 2)]
  >>> split.length(10)   # batches of this process from 10 elements
  3
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import xxhash

from jaxload._src import compat
from jaxload._src.plan import Plan
from jaxload._src.protocol import INFINITE
from jaxload._src.trees import HostBatch

# one-to-one ops not applied again to each global batch's share: the user's options go on the
# whole pipeline, and a prefetch inside would start a thread per global batch
_NOT_PER_SHARE = frozenset({"_OptionsDataset", "_PrefetchDataset"})


@dataclasses.dataclass(frozen=True)
class Split:
    """How one loading group splits a pipeline by elements and hashes what it reads.

    Attributes:
      below: the pipeline under its trailing one-to-one ops (``map``, ``prefetch``).
      above: those ops, each as a function applying it to another input, in their order.
      groups, group, rows: ``K``, this group's ``k``, and ``local_batch_size``.
      drop: a process's last, partial batch is dropped (``remainder="drop"``).
    """

    below: Any
    above: tuple[Callable[[Any], Any], ...]
    groups: int
    group: int
    rows: int
    drop: bool

    @classmethod
    def of(cls, ds: Any, plan: Plan, drop: bool) -> Split | None:
        """The split of ``ds`` for this process's loading group under ``plan``; None where the
        elements below the trailing ops cannot be batched whole (a feature of unknown shape,
        ragged or sparse: hashed element by element it would cost too much)."""
        import tensorflow as tf

        above: list[Callable[[Any], Any]] = []
        while (step := compat.tf_one_to_one(ds)) is not None:
            if type(ds).__name__ not in _NOT_PER_SHARE:
                above.append(step[1])
            ds = step[0]
        if not all(isinstance(spec, tf.TensorSpec) and spec.shape.is_fully_defined()
                   for spec in tf.nest.flatten(ds.element_spec)):
            return None
        return cls(ds, tuple(reversed(above)), plan.shard_count, plan.shard_index,
                   plan.local_batch_size, drop)

    def dataset(self, below: Any) -> Any:
        """This group's batches of ``below`` (the pipeline under the trailing ops, from some
        element on), each as ``(batch, fingerprints)``: the batch after the trailing ops, and
        one fingerprint (8 bytes) per element of the global batch it was kept from."""
        import tensorflow as tf

        structure = below.element_spec
        width, group = self.groups * self.rows, self.group

        def share(*args: Any) -> tuple[Any, Any]:
            leaves = tf.nest.flatten(args)
            fps = [tf.fingerprint(tf.reshape(x, [tf.shape(x)[0], -1])) for x in leaves]
            fp = fps[0] if len(fps) == 1 else tf.fingerprint(tf.concat(fps, axis=1))
            kept = tf.nest.pack_sequence_as(structure, [x[group::self.groups] for x in leaves])
            return kept, fp

        blocks = below.batch(width).map(share)
        if not self.above:
            return blocks.filter(self._keeps)

        def regrouped(kept: Any, fp: Any) -> Any:
            rows = tf.data.Dataset.from_tensor_slices(kept)
            for again in self.above:
                rows = again(rows)
            batch = rows.batch(self.rows, drop_remainder=self.drop)
            return batch.map(lambda *b: (tf.nest.pack_sequence_as(
                batch.element_spec, tf.nest.flatten(b)), fp))

        return blocks.flat_map(regrouped)

    def _keeps(self, kept: Any, fp: Any) -> Any:
        import tensorflow as tf

        n = tf.shape(tf.nest.flatten(kept)[0])[0]
        return tf.equal(n, self.rows) if self.drop else n > 0

    def length(self, elements: int) -> int | None:
        """The batches this group's pipeline holds from ``elements`` elements below the split
        (``INFINITE``: no end; negative and unknown: None)."""
        if elements == INFINITE:
            return INFINITE
        if elements < 0:
            return None
        full, rest = divmod(elements, self.groups * self.rows)
        last = len(range(self.group, rest, self.groups))  # its rows of the last global batch
        return full + (last > 0 and (not self.drop or last == self.rows))


def digests(batches: Iterator[tuple[Any, Any]]) -> Iterator[tuple[HostBatch, Any, str]]:
    """``(batch, position, digest)`` from a pass's ``((batch, fingerprints), position)``: the
    digest is XXH3-64 of the step's global batch's fingerprints, as 16 hex digits."""
    for (batch, fps), position in batches:
        yield batch, position, xxhash.xxh3_64_hexdigest(np.ascontiguousarray(fps).tobytes())
