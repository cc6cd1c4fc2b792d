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
import warnings
from typing import Any

from jaxload._src import compat
from jaxload._src.pipelines.tf_graph import READERS, DatasetGraph
from jaxload._src.plan import Plan

FILES, ELEMENTS, HINT, NONE = "files", "elements", "hint", "none"
OPTIONS = ("auto", FILES, ELEMENTS)
_WARNED: set[str] = set()  # a fallback is told once per process


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
    """

    mode: str
    files: int | None = None
    fallback: str | None = None

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


def split(ds: Any, plan: Plan, shard: str, graph: DatasetGraph | None = None
          ) -> tuple[Any, Sharding]:
    """This loading group's share of ``ds`` and how it was split; for ``"elements"`` the share
    is None (the caller shards the elements, after skipping to its start row)."""
    import tensorflow as tf

    graph = graph or DatasetGraph.of(ds)
    policy = tf.data.experimental.AutoShardPolicy
    if graph.shard_hint():
        return unwrapped(compat.tf_auto_shard(ds, plan.shard_count, plan.shard_index,
                                              policy.HINT)), Sharding(HINT)
    if shard == ELEMENTS or (shard == "auto" and not graph.readers()):
        return None, Sharding(ELEMENTS)
    if plan.shard_count == 1 and graph.readers():  # one group reads every file
        return ds, Sharding(FILES)
    why_not, files, share = _by_files(ds, plan, graph)
    if why_not is None:
        return share, Sharding(FILES, files=files)
    if shard == FILES:
        raise ValueError(f"shard='files' cannot shard this pipeline by files: {why_not}. Use "
                         "shard='elements' (every process reads every element and keeps 1/K), "
                         "or pass dataset_fn to build each loading group's share")
    _warn(why_not, plan)
    return None, Sharding(ELEMENTS, fallback=why_not)


def _by_files(ds: Any, plan: Plan, graph: DatasetGraph) -> tuple[str | None, int, Any]:
    """(why not, files, share): TensorFlow's FILE rewrite for this group, with at least one
    file per loading group."""
    import tensorflow as tf

    if not graph.readers():
        return (f"it reads no files (no {', '.join(sorted(READERS)[:4])}, ... op; its sources "
                f"are {', '.join(sorted(_sources(graph)))})", 0, None)
    try:
        share = compat.tf_auto_shard(ds, plan.shard_count, plan.shard_index,
                                     tf.data.experimental.AutoShardPolicy.FILE)
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as e:
        first = str(getattr(e, "message", e)).split("\n")[0]
        return (f"TensorFlow cannot find where its {', '.join(graph.readers())} get their file "
                f"names ({first})", 0, None)
    rewritten = compat.tf_graph(share)  # read once: counted, then rebuilt
    files = count_files(share, graph=rewritten)
    if files is None:
        return (f"the file names its {', '.join(graph.readers())} read cannot be counted "
                "before reading", 0, None)
    if files < plan.shard_count:
        return (f"it reads {files} file{'s' * (files != 1)} for {plan.shard_count} loading "
                "groups, and each group needs at least one", files, None)
    return None, files, unwrapped(share, rewritten)


def unwrapped(share: Any, graph: Any = None) -> Any:
    """``share`` rebuilt without the options node that TensorFlow's sharding rewrite leaves on
    top of the user's pipeline (it sets only the auto-shard policy): below the batch, an
    options node cost tf.data about 10 us per element here (TensorFlow 2.21), a quarter of a
    pass over cheap records. The user's own options nodes stay. ``graph``: ``share``'s, if
    read already (it is changed)."""
    graph = graph if graph is not None else compat.tf_graph(share)
    retval = _retval(graph)
    name = retval.input[0].split(":")[0]
    top = next((node for node in graph.node if node.name == name), None)
    if top is None or top.op != "OptionsDataset":
        return share
    retval.input[0] = top.input[0]
    graph.node.remove(top)
    return compat.tf_from_graph(graph, share.element_spec)


def count_files(share: Any, limit: int = 10_000_000, graph: Any = None) -> int | None:
    """How many file names TensorFlow's FILE rewrite deals out (the fewest, where it shards
    several sources): the names that flow into the shard op it inserted, read without
    touching a file. ``graph``: ``share``'s, if read already (it is left as it is)."""
    import tensorflow as tf

    graph = graph if graph is not None else compat.tf_graph(share)
    counts = []
    for node in graph.node:
        if node.op != "ShardDataset" or not node.attr["require_non_empty"].b:
            continue
        names = type(graph)()
        names.CopyFrom(graph)
        _retval(names).input[0] = node.input[0]
        files = compat.tf_from_graph(names, tf.TensorSpec([], tf.string))
        n = int(files.cardinality())
        counts.append(n if n >= 0 else sum(1 for _ in files.take(limit)))
    return min(counts) if counts else None


def _retval(graph: Any) -> Any:
    """The node whose input is the dataset a ``GraphDef`` of :func:`compat.tf_graph` returns."""
    (retval,) = [node for node in graph.node if node.op == "_Retval"]
    return retval


def _sources(graph: DatasetGraph) -> set[str]:
    ops = {op for op in graph.ops() if "Dataset" in op}
    return {op for op in ops if op.startswith(("Range", "Tensor", "Generator", "Random"))} or ops


def _warn(why: str, plan: Plan) -> None:
    message = (f"from_tf_data(shard='auto') shards this pipeline by elements: {why}. Each "
               f"process then reads and parses all of its records and keeps 1/{plan.shard_count} "
               f"of them. To read only each loading group's share, write the data into at least "
               f"{plan.shard_count} files (a multiple of {plan.shard_count} evens out the groups), "
               "or pass dataset_fn to build each group's share; shard='elements' says this is "
               "meant (and silences this warning)")
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, ShardingWarning, stacklevel=4)
