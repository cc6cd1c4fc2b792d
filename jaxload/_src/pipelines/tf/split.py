"""How a tf.data pipeline is split over the loading groups (``from_tf_data(shard=...)``).

- **by files** (``"files"``, and ``"auto"`` where the pipeline reads files): TensorFlow's file
  sharding rewrite (tf.distribute's ``AutoShardPolicy.FILE``) deals the file names out before the
  first op that reads them, so group ``k`` of ``K`` reads, parses and augments only files
  ``k, k + K, ...``; the user's ops stay as written. A file shuffle placed after the file list
  (``list_files``' default) shuffles each group's own files.
- **by a hint**: a ``shard(SHARD_HINT, SHARD_HINT)`` the user placed becomes ``shard(K, k)``.
- **by elements** (``"elements"``, and ``"auto"`` otherwise): every process reads every element
  and keeps ``1/K`` of them (``ds.shard(K, k)``), which needs the same order on every process.

Example:
  >>> import tensorflow as tf
  >>> plan = jaxload.data_parallel().plan(global_batch_size=8)
  >>> share, sharding = split(tf.data.Dataset.range(64), plan, "auto")
  >>> sharding.mode, sharding.reads(plan)
  ('elements', 'each process reads every element and keeps 1/1 of them')
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from jaxload._src import compat
from jaxload._src.pipelines.tf.decide import (
    ELEMENTS,
    FILES,
    HINT,
    ONE_GROUP,
    Shown,
    fallback,
    start,
    why_not_files,
)
from jaxload._src.pipelines.tf.file_ops import blocking, separate_caches
from jaxload._src.pipelines.tf.graph import UNSPLITTABLE, DatasetGraph
from jaxload._src.pipelines.tf.multisets import names_at_once, names_read
from jaxload._src.pipelines.tf.names import (
    FileNames,
    file_names,
    inserted_shards,
    retval,
)
from jaxload._src.plan import Plan
from jaxload._src.remainder import rows_read
from jaxload._src.told import warn_once

NONE = "none"
OPTIONS = ("auto", FILES, ELEMENTS)


class ShardingWarning(UserWarning):
    """``shard="auto"`` shards a pipeline that reads files by elements: every process reads
    every record (see :func:`jaxload.from_tf_data`). Told once per process, naming the cause.

    Example:
      Where reading everything is meant, say so with ``shard="elements"``, or filter it:

      >>> import warnings
      >>> with warnings.catch_warnings():
      ...     warnings.simplefilter("ignore", jaxload.ShardingWarning)
    """


@dataclasses.dataclass(frozen=True)
class Sharding:
    """How a pipeline is split over the loading groups.

    Attributes:
      mode: ``"files"``, ``"hint"`` (the user's ``SHARD_HINT``), ``"elements"`` or ``"none"``
        (``shard=False``, or ``dataset_fn``: the pipeline is this group's share already).
      files: with ``"files"``, how many files are dealt out.
      fallback: with ``shard="auto"`` on a pipeline that reads files, why it is sharded by
        elements.
      names: with ``"files"``, the names dealt out (counted and hashed).
      before: with ``"files"`` and ``"hint"``, the part of the pipeline before the split: what
        must give every process the same order.
    """

    mode: str
    files: int | None = None
    fallback: str | None = None
    names: FileNames | None = dataclasses.field(default=None, compare=False, repr=False)
    before: DatasetGraph | None = dataclasses.field(default=None, compare=False, repr=False)

    def reads(self, plan: Plan) -> str:
        """What each process reads, in words."""
        k, files = plan.shard_count, self.files
        if self.mode == FILES and files is None:
            return "one loading group reads every file"
        if self.mode == FILES and files is not None:
            each = f"{files // k}-{-(-files // k)}" if files % k else files // k
            return f"each loading group reads {each} of the {files} files (1/{k} of the records)"
        if self.mode == HINT:
            return f"each loading group reads what shard(SHARD_HINT) gives it (1/{k})"
        if self.mode == ELEMENTS:
            return f"each process reads every element and keeps 1/{k} of them"
        return "each process reads what its pipeline yields (its group's share)"


NOT_SPLIT = Sharding(ELEMENTS)  # what _by_files gives where it cannot split by files


def split(ds: Any, plan: Plan, shard: str, graph: DatasetGraph | None = None,
          whole: Any = None, global_batch_size: int | None = None) -> tuple[Any, Sharding]:
    """This loading group's share of ``ds`` and how it was split; for ``"elements"`` the share
    is None (the caller shards the elements, after skipping to its start row). ``graph``:
    ``ds``'s, read already (whole where it reads files: the share is built from it, by
    TensorFlow's rewrite of the graph, without serializing the pipeline again); ``whole``:
    the ``GraphDef`` ``ds`` was rebuilt from, where it is not ``graph``'s own;
    ``global_batch_size``: the user's, where ``plan``'s is padded from it. The choice is
    :mod:`~jaxload._src.pipelines.tf.decide`'s, from the facts read here."""
    import tensorflow as tf

    graph = graph or DatasetGraph.of(ds)
    whole = graph.graph if whole is None else whole
    hints = graph.shard_hints()
    shown = Shown(hints=bool(hints), readers=tuple(graph.readers()),
                  unsplittable=tuple(sorted(graph.ops() & UNSPLITTABLE)),
                  sources=tuple(_sources(graph)), names_read=False,
                  padding=all_padding(plan, global_batch_size))
    how = start(shown, shard, plan.shard_count)
    if how == HINT:
        rewritten = compat.tf_shard_graph(whole, plan.shard_count, plan.shard_index,
                                          tf.data.experimental.AutoShardPolicy.HINT)
        own_caches(rewritten, plan, HINT)
        return (compat.tf_from_graph(rewritten, ds.element_spec),
                Sharding(HINT, before=graph.feeding(hints)))
    if how == ELEMENTS:
        return None, Sharding(ELEMENTS)
    if how == ONE_GROUP:
        return ds, Sharding(FILES)
    why_not, share, sharding = _by_files(ds, plan, graph, whole, shown)
    if why_not is None:
        return share, sharding
    warn_once(fallback(why_not, shard, plan.shard_count), ShardingWarning, stacklevel=3)
    return None, Sharding(ELEMENTS, fallback=why_not)


def _by_files(ds: Any, plan: Plan, graph: DatasetGraph, whole: Any, shown: Shown
              ) -> tuple[str | None, Any, Sharding]:
    """(why not, share, how): TensorFlow's FILE rewrite for this group, where every op after
    the file reads keeps its meaning and each loading group gets a file (the facts read in
    that order, each only where the ones before allow it)."""
    import tensorflow as tf

    groups = plan.shard_count
    blocked = blocking(graph.graph) if shown.readers and not shown.unsplittable else None
    if blocked is not None:
        shown = dataclasses.replace(shown, blocked=str(blocked), fix=blocked.fix)
    if (why_not := why_not_files(shown, groups)) is not None:
        return why_not, None, NOT_SPLIT
    try:
        rewritten = compat.tf_shard_graph(whole, groups, plan.shard_index,
                                          tf.data.experimental.AutoShardPolicy.FILE)
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as e:
        shown = dataclasses.replace(shown, cannot_find=str(getattr(e, "message", e)))
        why_not = why_not_files(shown, groups)
        assert why_not is not None  # (cannot_find always says why)
        return why_not, None, NOT_SPLIT
    names = names_at_once(rewritten, whole, groups, plan.shard_index) or file_names(rewritten)
    shown = dataclasses.replace(shown, names_read=True,
                                files=None if names is None else names.count)
    if (why_not := why_not_files(shown, groups)) is not None or names is None:
        return why_not, None, NOT_SPLIT
    if names.meant is None:  # (not read at once)
        names = dataclasses.replace(names, read=names_read(rewritten),
                                    meant=names_read(graph.graph))
    before = graph.feeding(inserted_shards(rewritten), rewritten)
    own_caches(rewritten, plan, FILES)
    share = compat.tf_from_graph(restorable(rewritten), ds.element_spec)
    return None, share, Sharding(FILES, files=names.count, names=names, before=before)


def all_padding(plan: Plan, global_batch_size: int | None) -> tuple[int, int, int] | None:
    """Where ``global_batch_size`` is padded to ``plan``'s so that some loading groups hold only
    padding at every step (group ``k``'s block of rows starts at ``k * local_batch_size``):
    ``(those groups, global_batch_size, padded size)``; else None."""
    if global_batch_size is None:
        return None
    idle = sum(global_batch_size <= k * plan.local_batch_size for k in range(plan.shard_count))
    return (idle, global_batch_size, plan.global_batch_size) if idle else None


def files_of_group(ds: Any, count: int, index: int, graph: Any = None) -> Any:
    """Loading group ``index`` of ``count``'s share of ``ds``, split by TensorFlow's FILE
    rewrite (as :func:`split` splits a pipeline it found can be). ``graph``: ``ds``'s
    ``GraphDef``, where known (:func:`under`): then ``ds`` is not serialized."""
    import tensorflow as tf

    policy = tf.data.experimental.AutoShardPolicy.FILE
    graph = compat.tf_graph(ds) if graph is None else graph
    return compat.tf_from_graph(restorable(compat.tf_shard_graph(graph, count, index, policy)),
                                ds.element_spec)


def restorable(graph: Any) -> Any:
    """``graph`` (a pipeline's ``GraphDef`` after TensorFlow's file sharding; changed in place)
    with the shard ops that rewrite inserted no longer requiring a non-empty shard, a check
    :func:`~jaxload._src.pipelines.tf.decide.why_not_files` makes before (every loading group
    gets a file). TensorFlow restores such a shard op from a symbolic checkpoint at another
    position (TensorFlow 2.21, ``TFRecordDataset(files)``, whose rewrite is ``files.shard(K,
    k).flat_map(TFRecordDataset)``: a group of files of unequal sizes resumed in another
    group's file); the same op without the flag restores where it was."""
    for name in inserted_shards(graph):
        next(node for node in graph.node if node.name == name).attr["require_non_empty"].b = False
    return graph


def under(graph: Any, steps: int, through: str = "") -> Any:
    """A copy of ``graph`` (a pipeline's ``GraphDef``) whose result is the dataset ``steps``
    ops under its own (following each op's first input), without the nodes it no longer
    needs: the graph of a dataset the pipeline is built over, read without serializing it.
    None where the way passes an op that is not a dataset's, or where the last op passed is
    not ``through`` (where given)."""
    nodes = {node.name: node for node in graph.node}
    result = retval(graph)
    name, passed = result.input[0].split(":")[0], None
    for _ in range(steps):
        passed = nodes.get(name)
        if passed is None or "Dataset" not in passed.op or not passed.input:
            return None
        name = passed.input[0].split(":")[0]
    if through and (passed is None or passed.op != through):
        return None
    needed, todo = {result.name}, [name]
    while todo:
        current = todo.pop()
        if current not in needed and current in nodes:
            needed.add(current)
            todo.extend(i.split(":")[0].lstrip("^") for i in nodes[current].input)
    copy = type(graph)()
    copy.CopyFrom(graph)
    kept = [node for node in copy.node if node.name in needed]
    del copy.node[:]
    copy.node.extend(kept)
    retval(copy).input[0] = name
    return copy


def own_caches(graph: Any, plan: Plan, mode: str) -> list[tuple[str, str]]:
    """Gives every ``cache(filename)`` in ``graph`` (changed in place) a file of this process's
    own (see :func:`~jaxload._src.pipelines.tf.file_ops.separate_caches`), named in the log."""
    suffix = (f".{plan.shard_index}-of-{plan.shard_count}" if mode != ELEMENTS else "") + (
        f".process-{plan.process_index}")
    renamed = separate_caches(graph, suffix)
    for old, new in renamed:
        logging.getLogger("jaxload").info("cache(%r) writes and reads %r on this process", old,
                                          new)
    return renamed


def with_own_caches(ds: Any, graph: Any, plan: Plan, mode: str) -> Any:
    """``ds`` rebuilt from ``graph`` (its ``GraphDef``, not changed) with a file of this
    process's own for every ``cache(filename)``."""
    copy = type(graph)()
    copy.CopyFrom(graph)
    return compat.tf_from_graph(copy, ds.element_spec) if own_caches(copy, plan, mode) else ds


def _sources(graph: DatasetGraph) -> set[str]:
    ops = {op for op in graph.ops() if "Dataset" in op}
    return {op for op in ops if op.startswith(("Range", "Tensor", "Generator", "Random"))} or ops


def real_rows(ds: Any, global_batch_size: int, plan: Plan) -> Any:
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


FUNCTION = "function"  # shard= for a dataset_fn's pipeline: the group's share already
BY_FUNCTION = ("with dataset_fn each loading group's share is what your function builds, and "
                "jaxload cannot tell which elements another split would give each new group; "
                "resume on the same topology, or restart the pass (no set_state)")
BY_FILES = ("sharded by files, each loading group reads its own files and its position is its own: "
    "the state continues only on the topology and loading group it was taken in (each process "
    "from the state its own process took, as jaxload.checkpoint saves them). Resume on the same "
    "topology, restart the pass (no set_state), or build the loader with shard='elements', "
    "which can continue at any global row")
