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
global batch (``tf.fingerprint`` of each feature's bytes, 8 bytes per element), and one of those
fingerprints, the step's digest (:func:`fingerprinted`). The step agreement compares the digests
of every process before any process hands the step out (:mod:`~jaxload._src.stream_proof`).

The trailing maps then run on the group's rows only, as in a pass positioned by replay: the
global batch's share is unbatched, mapped (the same traced functions, each row carrying its
fingerprints past them) and batched again.

Example:
  >>> import tensorflow as tf
  >>> plan = jaxload.data_parallel(devices=jaxload.simulated_devices(2, 2)).plan(
  ...     global_batch_size=4, process_index=1)
  >>> ds = tf.data.Dataset.range(10).map(lambda x: 10 * x)
  >>> split = Split.of(ds, plan, drop=False)
  >>> [(b.tolist(), c.shape) for b, c in split.dataset(split.below).as_numpy_iterator()]
  [([10, 30], (2, 3, 8)), ([50, 70], (2, 3, 8)), ([90], (1, 3, 8))]
  >>> split.length(10)   # batches of this process from 10 elements
  3
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from jaxload._src import compat
from jaxload._src.plan import Plan
from jaxload._src.protocol import INFINITE
from jaxload._src.trees import HostBatch

# one-to-one ops over the split left out: the user's options go on the whole pipeline, and
# jaxload prefetches its batches
_DROPPED = frozenset({"_OptionsDataset", "_PrefetchDataset"})


@dataclasses.dataclass(frozen=True)
class Split:
    """How one loading group splits a pipeline by elements and hashes what it reads.

    Attributes:
      below: the pipeline under its trailing one-to-one ops (``map``, ``prefetch``).
      above: those ops, each as a function applying it to another input, in their order.
      groups, group, rows: ``K``, this group's ``k``, and the elements a group keeps of each
        step: ``local_batch_size``, or 1 where the elements are batches already (``batched``).
      drop: a process's last, partial batch is dropped (``remainder="drop"``).
    """

    below: Any
    above: tuple[Callable[[Any], Any], ...]
    groups: int
    group: int
    rows: int
    drop: bool
    batched: bool = False

    @classmethod
    def of(cls, ds: Any, plan: Plan, drop: bool, batched: bool = False) -> Split | None:
        """The split of ``ds`` for this process's loading group under ``plan``; None where the
        elements below the trailing ops cannot be batched whole (a feature of unknown shape,
        ragged or sparse: hashed element by element it would cost too much)."""
        import tensorflow as tf

        above: list[Callable[[Any], Any]] = []
        while True:
            if type(ds).__name__ in _DROPPED and (step := compat.tf_one_to_one(ds)):
                ds = step[0]
            elif (carried := compat.tf_map_carrying(ds)) is not None:
                ds, apply = carried
                above.append(apply)
            else:
                break
        if not all(isinstance(spec, tf.TensorSpec) and spec.shape.is_fully_defined()
                   for spec in tf.nest.flatten(ds.element_spec)):
            return None
        return cls(ds, tuple(reversed(above)), plan.shard_count, plan.shard_index,
                   1 if batched else plan.local_batch_size, drop, batched)

    def dataset(self, below: Any) -> Any:
        """This group's batches of ``below`` (the pipeline under the trailing ops, from some
        element on), each as ``(batch, carried)``: the batch after the trailing ops, and for
        each of its rows ``[K + 1, 8]`` uint8: the fingerprint of the whole global batch, then
        those of the ``K`` elements of the row's block (the elements ``j*K`` to ``j*K + K - 1``
        of row ``j``'s global batch, zeros past its end)."""
        import tensorflow as tf

        structure, groups, group = below.element_spec, self.groups, self.group

        def share(*args: Any) -> tuple[Any, Any]:
            leaves = tf.nest.flatten(args)
            fps = [tf.fingerprint(tf.reshape(x, [tf.shape(x)[0], -1])) for x in leaves]
            fp = fps[0] if len(fps) == 1 else tf.fingerprint(tf.concat(fps, axis=1))
            n = tf.shape(fp)[0]
            # rows k::K by gather: a strided slice of a batch costs TensorFlow 2.21 twice as much;
            # none where a last, partial global batch ends before row k (tf.range refuses k > n)
            kept = [tf.gather(x, tf.range(tf.minimum(group, n), n, groups)) for x in leaves]
            rows = tf.shape(kept[0])[0]
            blocks = (n + groups - 1) // groups
            per_block = tf.reshape(tf.pad(fp, [[0, blocks * groups - n], [0, 0]]),
                                   [blocks, groups, 8])[:rows]
            whole = tf.tile(tf.fingerprint(tf.reshape(fp, [1, -1]))[None], [rows, 1, 1])
            return (tf.nest.pack_sequence_as(structure, kept),
                    tf.concat([whole, per_block], axis=1))

        blocks = below.batch(groups * self.rows).map(share)
        if not self.above and not self.batched:
            return blocks.filter(self._keeps)
        rows = blocks.unbatch()
        for apply in self.above:
            rows = apply(rows)
        return rows if self.batched else rows.batch(self.rows, drop_remainder=self.drop)

    def _keeps(self, kept: Any, carried: Any) -> Any:
        import tensorflow as tf

        n = tf.shape(carried)[0]
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


def fingerprinted(batches: Iterator[tuple[Any, Any]]
                  ) -> Iterator[tuple[HostBatch, Any, tuple[str, bytes]]]:
    """``(batch, position, (digest, fingerprints))`` from a pass's ``((batch, carried),
    position)``: the global batch's fingerprint as 16 hex digits, and those of the elements of
    the batch's rows' blocks, in order (8 bytes each). An iterator checkpoint's position says
    ``"proved": True``: it fits this split's pipeline, not a plain ``shard``'s. A count ``n``
    becomes ``{"batches": n, "stream": digest}``: a resume from it reads batch ``n`` again and
    compares (:func:`continued`)."""
    for (batch, carried), position in batches:
        carried = carried.reshape(-1, *carried.shape[-2:])  # one row: a batch already
        digest = carried[0, 0].tobytes().hex()
        if isinstance(position, dict) and "saved" in position:
            position = {**position, "proved": True}
        elif isinstance(position, dict):  # a count naming its pass
            position = {**position, "stream": digest}
        elif isinstance(position, int):
            position = {"batches": position, "stream": digest}
        yield batch, position, (digest, np.ascontiguousarray(carried[:, 1:]).tobytes())


def stream_of(position: Any) -> str:
    """The stream digest a count position records ("" for any other position)."""
    return position.get("stream", "") if isinstance(position, dict) and "saved" not in position else ""


def continued(batches: Iterator[Any], digest: str, consumed: int) -> Iterator[Any]:
    """``batches`` of a pass resumed from a count with its stream's digest, which start with
    batch ``consumed`` (the last one handed out before the state), read again: left out where
    its digest is the state's, else a ValueError on every process (each reads the same global
    batch) before any batch is handed out."""
    first = next(batches, None)
    found = "no batch" if first is None else f"digest {first[2][0]}"
    if first is None or first[2][0] != digest:
        raise ValueError(
            f"the state was taken over other elements than this pipeline reads: the last batch "
            f"handed out before it (batch {consumed} of its pass) had the stream digest {digest}, "
            f"this pipeline's batch {consumed} has {found}. Data that changed since (a generator, "
            "a py_function, files rewritten) or another pipeline: resume the pipeline the state "
            "was taken with, or start the pass again without set_state")
    yield from batches
