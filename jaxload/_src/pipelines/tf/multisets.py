"""The names that the ops reading files are given, as multisets: in the unsharded pipeline
(what it means) and in a loading group's share (what the group reads). Over the groups, split by
TensorFlow's file sharding, the shares add up to the whole exactly where every file the pipeline
reads is read once (:func:`jaxload._src.same_dataset.differences` adds them up).

Example:
  >>> import tensorflow as tf
  >>> from jaxload._src import compat
  >>> names = tf.data.Dataset.from_tensor_slices(["a", "b", "c"])
  >>> graph = compat.tf_graph(names.interleave(tf.data.TFRecordDataset))
  >>> policy = tf.data.experimental.AutoShardPolicy.FILE
  >>> shares = [names_read(compat.tf_shard_graph(graph, 2, k, policy)) for k in (0, 1)]
  >>> [share.split(":")[0] for share in shares], names_read(graph).split(":")[0]
  (['2', '1'], '3')
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import xxhash

from jaxload._src.pipelines.tf.graph import READERS, dataset_inputs
from jaxload._src.pipelines.tf.names import (
    _BATCH,
    _ONE_BY_ONE,
    HEAD,
    LIMIT,
    FileNames,
    _flat,
    _named,
    _names,
    _text,
    inserted_shards,
)


def names_read(graph: Any) -> str | None:
    """The names that the ops reading files are given in ``graph`` (a ``GraphDef``), as a
    multiset: ``"<count>:<sum>"``, the sum of each name's XXH3-64 modulo 2**64 (a name with a
    label or an id: the tuple). None where a reader takes its names as a tensor, not from a
    dataset, or where they are endless or more than :data:`LIMIT`.

    Over the loading groups' shares, split by TensorFlow's file sharding, the counts and sums add
    up to those of the unsharded pipeline exactly where the groups read every file the pipeline
    reads, once (:func:`jaxload._src.same_dataset.differences` adds them up): an op on the names
    that the sharding rewrite changes (a subset drawn after a shuffle that it moves below its
    split) shows there, whatever the op."""
    import tensorflow as tf

    from jaxload._src.pipelines.tf.file_ops import reading_files

    nodes = {node.name: node for node in graph.node}
    count, total = 0, 0
    for name, depth in sorted(reading_files(graph, nodes).items()):
        if depth != 0:
            continue
        inputs = dataset_inputs(nodes[name], nodes)
        if nodes[name].op in READERS or not inputs:
            return None
        names = _names(graph, inputs[0], nodes[inputs[0]])
        if names.cardinality() == tf.data.INFINITE_CARDINALITY:
            return None
        read = _multiset(names)
        if read is None:
            return None
        count, total = count + read[0], (total + read[1]) % 2**64
    return f"{count}:{total:016x}"


def names_at_once(rewritten: Any, whole: Any, groups: int, group: int) -> FileNames | None:
    """:func:`file_names` of ``rewritten`` with ``read`` and ``meant`` (:func:`names_read` of
    ``rewritten`` and of ``whole``, the graph it was rewritten from), from one reading of the
    names, where the pipeline's only op that reads files takes them from the one shard that
    TensorFlow's rewrite inserted, through ops that only reorder them (a shuffle, as
    ``list_files`` makes; a prefetch) in both graphs alike: the names meant are then the
    shard's input, and this group's every ``groups``-th of them from ``group`` on. None where
    the pipeline has another shape (the caller reads each). A name costs tf.data 0.1-0.2 ms to
    read one by one, so one reading, not three, of a list of files."""
    import tensorflow as tf

    from jaxload._src.pipelines.tf.file_ops import reading_files

    nodes, original = ({node.name: node for node in g.node} for g in (rewritten, whole))
    shards = inserted_shards(rewritten)
    reading = [name for name, depth in reading_files(rewritten, nodes).items() if depth == 0]
    if len(shards) != 1 or len(reading) != 1 or nodes[reading[0]].op in READERS:
        return None
    shard, reader = nodes[shards[0]], reading[0]
    start = shard.input[0].split(":")[0]
    between = _reorders(nodes, reader, shard.name)
    if (between is None or reader not in original or original[reader].op != nodes[reader].op
            or nodes[start].op == "RepeatDataset" or between != _reorders(original, reader, start)):
        return None
    names = _names(rewritten, start, shard)
    if names.cardinality() == tf.data.INFINITE_CARDINALITY:
        return None
    return _read_once(names, groups, group)


_REORDERING = frozenset({"ShuffleDataset", "ShuffleDatasetV2", "ShuffleDatasetV3",
                         "PrefetchDataset", "OptionsDataset"})


def _reorders(nodes: dict[str, Any], reader: str, until: str) -> list[str] | None:
    """The ops between ``reader``'s input and node ``until`` (each op's first input), where all
    only reorder their elements; else None."""
    ops: list[str] = []
    name = next(iter(dataset_inputs(nodes[reader], nodes)), None)
    while name is not None and name != until:
        if nodes[name].op not in _REORDERING:
            return None
        ops.append(nodes[name].op)
        name = next(iter(dataset_inputs(nodes[name], nodes)), None)
    return ops if name == until else None


def _read_once(names: Any, groups: int, group: int) -> FileNames | None:
    """:func:`_hash_names` (count, digest, first) and :func:`_multiset` of all of ``names``
    (``meant``) and of this group's (``read``), read once."""
    import tensorflow as tf

    digest = hashlib.blake2b(digest_size=8)
    count = 0
    head: list[str] = []
    sums = [0, 0, 0, 0]  # meant: names, sum of XXH3; read: names, sum of XXH3
    alone = len(tf.nest.flatten(names.element_spec)) == 1
    fixed = all(spec.shape.is_fully_defined() for spec in tf.nest.flatten(names.element_spec))

    def add(parts: list[np.ndarray], start: int) -> None:  # elements start, start + 1, ...
        for i in range(len(parts[0])):
            items = _items(parts, i, alone)
            hashed = sum(map(xxhash.xxh3_64_intdigest, items))
            sums[0], sums[1] = sums[0] + len(items), sums[1] + hashed
            if (start + i) % groups == group:
                sums[2], sums[3] = sums[2] + len(items), sums[3] + hashed

    for value in names:  # as _hash_names reads them: one by one, then in batches
        flat = _flat(value)
        if count < _ONE_BY_ONE:
            head.extend(_named(flat, HEAD - len(head)) if len(head) < HEAD else ())
        digest.update(b"\0".join(flat) + b"\0")
        add([np.asarray(p).reshape(1, -1) for p in tf.nest.flatten(value)], count)
        count += 1
        if count == _ONE_BY_ONE and fixed or count > LIMIT:
            break
    if count == _ONE_BY_ONE and fixed:
        for batch in names.skip(count).take(LIMIT + 1 - count).batch(_BATCH):
            rows = len(tf.nest.flatten(batch)[0])
            if count + rows <= LIMIT:
                digest.update(b"\0".join(_flat(batch)) + b"\0")
            add([np.asarray(p).reshape(rows, -1) for p in tf.nest.flatten(batch)], count)
            count += rows
    digest.update(b"|")
    if count > LIMIT or sums[0] > LIMIT:  # the three readings stop there: read them apart
        return None
    return FileNames(count, digest.hexdigest(), head[0] if head else "",
                     read=f"{sums[2]}:{sums[3] % 2**64:016x}",
                     meant=f"{sums[0]}:{sums[1] % 2**64:016x}", head=tuple(head))


def _items(parts: list[np.ndarray], i: int, alone: bool) -> list[bytes]:
    """What a multiset counts of element ``i`` (``parts``: each leaf, one row per element):
    each name where the elements are names (how an interleave groups them does not matter),
    else the element's values together (a name and its label go together)."""
    if alone:
        return _text(parts[0][i].reshape(-1))
    return [b"\0".join(v for p in parts for v in _text(p[i]))]


def _multiset(names: Any) -> tuple[int, int] | None:
    """``(count, sum of XXH3-64)`` of ``names``: of each name where the elements are names (a
    name, or several an interleave reads together: how they are grouped does not matter), of
    each element where they hold other values too (a name and its label, which go together);
    None past :data:`LIMIT`."""
    import tensorflow as tf

    specs = tf.nest.flatten(names.element_spec)
    alone = len(specs) == 1  # names only
    count, total = 0, 0

    def add(parts: list[np.ndarray]) -> None:  # each leaf of a batch of elements, one row each
        nonlocal count, total
        items = [item for i in range(len(parts[0])) for item in _items(parts, i, alone)]
        total += sum(map(xxhash.xxh3_64_intdigest, items))
        count += len(items)

    read = 0
    for value in names:
        add([np.asarray(p).reshape(1, -1) for p in tf.nest.flatten(value)])
        read += 1
        if read == _ONE_BY_ONE and all(spec.shape.is_fully_defined() for spec in specs):
            for batch in names.skip(read).take(LIMIT + 1 - read).batch(_BATCH):
                add([np.asarray(p).reshape(len(p), -1) for p in tf.nest.flatten(batch)])
                if count > LIMIT:
                    break
            break
        if count > LIMIT:
            break
    return None if count > LIMIT else (count, total % 2**64)
