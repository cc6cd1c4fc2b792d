"""The file names that TensorFlow's file sharding deals out to the loading groups: counted and
hashed before any record is read, in bounded time.

Each loading group keeps the names ``k, k + K, ...`` of one list, so the groups' files are
disjoint and make up the whole list only where every process builds the same list in the same
order. The graph shows most of what could make it differ (an unseeded shuffle, an unordered
interleave; :mod:`~jaxload._src.pipelines.tf.graph`), but not a generator or a glob whose order
differs between machines: each process hashes its list here, and the processes compare the
hashes in the pass's first round (:mod:`jaxload._src.same_dataset`).

Example:
  >>> import tensorflow as tf
  >>> from jaxload._src import compat
  >>> names = tf.data.Dataset.from_tensor_slices(["a", "b", "c"])
  >>> share = compat.tf_shard_graph(compat.tf_graph(names.interleave(tf.data.TFRecordDataset)),
  ...                               2, 0, tf.data.experimental.AutoShardPolicy.FILE)
  >>> found = file_names(share)
  >>> found.count, len(found.digest)
  (3, 16)
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np

from jaxload._src import compat
from jaxload._src.pipelines.tf.reseed import pin_orders

LIMIT = 1_000_000  # names counted at most (a longer list is "at least" this long)
_BATCH = 4096  # names read from tf.data at once, after the first _ONE_BY_ONE (one by one:
# each new op on a dataset rebuilt from a graph costs tf.data about 20 ms to set up; a next() 0.1-0.2 ms)
_ONE_BY_ONE = 64
HEAD = 8  # the first names kept, whose files are sampled (same_dataset compares their sizes)


@dataclasses.dataclass(frozen=True)
class FileNames:
    """The names dealt out.

    Attributes:
      count: how many (the fewest, where several sources are sharded); ``LIMIT`` at most.
      digest: a hash of every list in order (16 hex digits).
      first: the first name, to show where the lists differ.
      repeated: the list is repeated (``list_files(...).repeat()``): counted once.
      read: the names this loading group's reads are given, as a multiset
        (:func:`~jaxload._src.pipelines.tf.multisets.names_read`).
      meant: the names the pipeline's reads are given unsharded, as a multiset.
      head: the first names (``HEAD`` at most), whose files the processes compare.
    """

    count: int
    digest: str
    first: str
    repeated: bool = False
    read: str | None = None
    meant: str | None = None
    head: tuple[str, ...] = dataclasses.field(default=(), compare=False)


def file_names(graph: Any) -> FileNames | None:
    """The names flowing into the shard ops that TensorFlow's file sharding inserted in
    ``graph`` (the rewritten pipeline's ``GraphDef``, left as it is); None where it inserted
    none."""
    nodes = {node.name: node for node in graph.node}
    counts, repeated = [], False
    head: list[str] = []
    digest = hashlib.blake2b(digest_size=8)
    for name in inserted_shards(graph):
        start = nodes[name].input[0].split(":")[0]
        while nodes[start].op == "RepeatDataset":  # counted once, not over every repetition
            start, repeated = nodes[start].input[0].split(":")[0], True
        count, names = _hash_names(_names(graph, start, nodes[name]), digest)
        counts.append(count)
        head = head or names
    if not counts:
        return None
    return FileNames(min(counts), digest.hexdigest(), head[0] if head else "", repeated,
                     head=tuple(head))


def _text(values: np.ndarray) -> list[bytes]:
    """``values`` (an array) as bytes, in order: names as they are, other values by their
    text."""
    items = values.reshape(-1) if values.dtype == object else values.reshape(-1).tolist()
    return [v if type(v) is bytes else str(v).encode() for v in items]


def inserted_shards(graph: Any) -> list[str]:
    """The names of the shard ops TensorFlow's file sharding inserted (they require every
    worker to get a file)."""
    return [node.name for node in graph.node
            if node.op == "ShardDataset" and node.attr["require_non_empty"].b]


def _names(graph: Any, start: str, shard: Any) -> Any:
    """The dataset of names that node ``start`` of ``graph`` yields into ``shard`` (each a name,
    or a list of names an interleave reads together; or a tuple of those and other values, such
    as a label per file, all of which are hashed)."""
    import tensorflow as tf

    names = type(graph)()
    names.CopyFrom(graph)
    retval(names).input[0] = start
    kept = pin_orders(names)  # one order for every read, and the pipeline's passes not drawn
    types = shard.attr["output_types" if "output_types" in shard.attr else "Toutput_types"]
    specs = tuple(tf.TensorSpec(tf.TensorShape(shape), tf.dtypes.as_dtype(dtype)) for shape, dtype
                  in zip(shard.attr["output_shapes"].list.shape, types.list.type, strict=True))
    dataset = compat.tf_from_graph(names, specs[0] if len(specs) == 1 else specs)
    dataset._jaxload_generators = kept  # they live as long as the dataset
    return dataset


def _hash_names(names: Any, digest: Any) -> tuple[int, list[str]]:
    """``(count, the first names)`` of ``names`` (``HEAD`` at most), each name added to
    ``digest``; at most
    :data:`LIMIT`. The first :data:`_ONE_BY_ONE` are read one by one (new ops on a dataset
    rebuilt from a graph cost tf.data about 20 ms to set up), the rest in batches."""
    import tensorflow as tf

    count = 0
    head: list[str] = []
    for value in names:
        flat = _flat(value)
        head.extend(_named(flat, HEAD - len(head)) if len(head) < HEAD else ())
        digest.update(b"\0".join(flat) + b"\0")
        count += 1
        if count == _ONE_BY_ONE:
            break
    if count == _ONE_BY_ONE and all(spec.shape.is_fully_defined()
                                    for spec in tf.nest.flatten(names.element_spec)):
        for batch in names.skip(count).take(LIMIT - count).batch(_BATCH):
            values = _flat(batch)
            count += len(tf.nest.flatten(batch)[0])
            digest.update(b"\0".join(values) + b"\0")
    elif count == _ONE_BY_ONE:
        for value in names.skip(count).take(LIMIT - count):
            digest.update(b"\0".join(_flat(value)) + b"\0")
            count += 1
    digest.update(b"|")
    return count, head


def _named(flat: list[bytes], n: int) -> list[str]:
    """The first ``n`` names among ``flat`` (the bytes of one element: its names, and other
    values by their text), decoded."""
    return [v.decode(errors="replace") for v in flat if type(v) is bytes][:n]


def _flat(value: Any) -> list[bytes]:
    """Every name in ``value`` (a tensor of names, or a tuple with other values, which count by
    their text), as bytes in order."""
    import tensorflow as tf

    return [v for part in tf.nest.flatten(value) for v in _text(np.asarray(part.numpy()))]


def retval(graph: Any) -> Any:
    """The node whose input is the dataset a ``GraphDef`` of :func:`compat.tf_graph` returns."""
    (node,) = [node for node in graph.node if node.op == "_Retval"]
    return node
