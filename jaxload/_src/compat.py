"""Every private attribute of JAX, Grain and TensorFlow that jaxload reads, in one place.

Their public APIs lack what these give (the coordination service's client, the mesh of the
older ``with mesh:`` context, a ``grain.DataLoader``'s data source, sharding and operations, the
datasets that drop elements, a tf.data pipeline's graph, TensorFlow's file-sharding rewrite and
its iterator checkpoints as bytes, the log level of the absl inside TensorFlow). Each accessor
names the attribute it reads, and ``tests/test_compat.py`` fails loudly, naming it, when an
upgrade removes one: the next JAX or Grain release cannot break jaxload silently.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

# (what reads it, the private path) for tests/test_compat.py
PRIVATE = (
    ("distributed_client", "jax._src.distributed.global_state.client"),
    ("thread_mesh", "jax._src.mesh.thread_resources.env.physical_mesh"),
    ("data_loader_source", "grain.DataLoader._data_source"),
    ("data_loader_shard_options", "grain.DataLoader._shard_options | ._sampler._shard_options"),
    ("data_loader_operations", "grain.DataLoader._operations, "
                               "grain._src.python.operations.BatchOperation (Grain 0.2.12)"),
    ("data_loader_sampler", "grain.DataLoader._sampler"),
    ("grain_split_and_seeds", "grain._src.python.dataset.transformations.slice.SliceMapDataset "
                              "(its str), .map.RandomMapMapDataset._rng_pool._seed, "
                              "RandomMapIterDataset._seed"),
    ("grain_below_maps", "grain._src.python.dataset.transformations.map.MapMapDataset, "
                         "MapWithIndexMapDataset, RandomMapMapDataset"),
    ("drops_elements", "grain._src.python.dataset.transformations.filter.FilterMapDataset, "
                       "grain._src.python.dataset.transformations.flatmap.FlatMapMapDataset"),
    ("tf_graph", "tf.data.Dataset._as_serialized_graph"),
    ("tf_auto_shard", "tensorflow.python.data.experimental.ops.distribute._AutoShardDataset"),
    ("tf_from_graph", "tensorflow.python.ops.gen_experimental_dataset_ops.dataset_from_graph, "
                      "tensorflow.python.data.ops.dataset_ops._VariantDataset"),
    ("tf_replay", "data.util.structure.get_flat_tensor_types, get_flat_tensor_shapes; "
                  "shuffle_op._ShuffleDataset._input_dataset, _buffer_size, _seed, _seed2, "
                  "_reshuffle_each_iteration; map_op._MapDataset, _ParallelMapDataset._map_func."
                  "function, _num_parallel_calls, _deterministic, _use_inter_op_parallelism, "
                  "_preserve_cardinality; prefetch_op._PrefetchDataset._buffer_size; "
                  "gen_dataset_ops.shuffle_dataset_v3, map_dataset, parallel_map_dataset_v2"),
    ("tf_is_tensor_slices", "from_tensor_slices_op._TensorSliceDataset (its class name)"),
    ("tf_source_tensors", "_TensorSliceDataset._tensors, from_tensors_op._TensorDataset._tensors, "
                          "DatasetV2._inputs()"),
    ("tf_skips_in_place", "_TensorSliceDataset, range_op._RangeDataset (their class names)"),
    ("tf_repeat", "repeat_op._RepeatDataset._input_dataset, _count"),
    ("tf_iterator_state", "tf.data.Iterator._iterator_resource, "
                          "tensorflow.python.ops.gen_dataset_ops.serialize_iterator, "
                          "deserialize_iterator"),
    ("tf_input_index", "tensorflow.python.framework.op_def_registry.get"),
    ("tf_op_attrs", "tensorflow.python.framework.op_def_registry.get"),
    ("tf_global_seed", "tensorflow.python.eager.context.global_seed"),
    ("tf_log_level", "absl::MinLogLevel, absl::SetMinLogLevel in libtensorflow_framework; "
                     "tsl::internal::MinLogLevelFromEnv (TensorFlow < 2.21)"),
)


def distributed_client() -> Any:
    """JAX's coordination-service client of this process (None before
    ``jax.distributed.initialize``): ``jax._src.distributed.global_state.client``."""
    from jax._src import distributed

    return distributed.global_state.client


def thread_mesh() -> Any:
    """The mesh of ``with mesh:`` on this thread (the older context; empty where unused):
    ``jax._src.mesh.thread_resources.env.physical_mesh``. None where JAX no longer has it."""
    from jax._src import mesh as mesh_lib

    env = getattr(getattr(mesh_lib, "thread_resources", None), "env", None)
    return getattr(env, "physical_mesh", None)


def data_loader_source(loader: Any) -> Any:
    """A ``grain.DataLoader``'s data source: ``loader._data_source``."""
    return loader._data_source


def data_loader_shard_options(loader: Any) -> Any:
    """How a ``grain.DataLoader`` shards: ``loader._shard_options`` or, in older Grain,
    ``loader._sampler._shard_options``."""
    options = getattr(loader, "_shard_options", None)
    return options if options is not None else loader._sampler._shard_options


def data_loader_operations(loader: Any) -> list[Any]:
    """A ``grain.DataLoader``'s operations (maps, batch): ``loader._operations``. Grain 0.2.12
    replaces a final ``grain.transforms.Batch`` by its private ``BatchOperation`` when
    ``worker_count > 0`` (``grain._src.python.operations``); that one is given back as the
    ``grain.transforms.Batch`` it stands for."""
    import grain

    try:
        from grain._src.python import operations
    except ImportError:  # a Grain without it does not put it in
        operations = None
    replaced = getattr(operations, "BatchOperation", ())
    return [grain.transforms.Batch(op.batch_size, drop_remainder=op.drop_remainder)
            if isinstance(op, replaced) else op for op in loader._operations]


def data_loader_sampler(loader: Any) -> Any:
    """A ``grain.DataLoader``'s sampler: ``loader._sampler``."""
    return loader._sampler


def grain_split_and_seeds(ds: Any) -> tuple[list[int] | None, list[int]]:
    """Along a Grain dataset's chain (each one's first parent) from the top: ``[start, step]``
    of the nearest slice (the user's own split: ``SliceMapDataset[start:stop:step]``, its
    ``str``), or None; and the seeds of the random maps above it (``RandomMapMapDataset._rng_pool._seed``,
    ``RandomMapIterDataset._seed``)."""
    from grain._src.python.dataset.transformations import map as map_ds
    from grain._src.python.dataset.transformations import slice as slice_ds

    seeds: list[int] = []
    while ds is not None:
        if isinstance(ds, slice_ds.SliceMapDataset):
            start, _, step = str(ds).partition("[")[2].rstrip("]").split(":")
            return [int(start), int(step)], seeds
        if isinstance(ds, (map_ds.RandomMapMapDataset, map_ds.RandomMapIterDataset)):
            seeds.append(int(ds._rng_pool._seed if hasattr(ds, "_rng_pool") else ds._seed))
        ds = next(iter(getattr(ds, "parents", ())), None)
    return None, seeds


def grain_below_maps(ds: Any) -> Any:
    """A Grain ``MapDataset`` below its top element-wise maps (``MapMapDataset``,
    ``MapWithIndexMapDataset``, ``RandomMapMapDataset``): element ``i`` of a map is its
    function of its parent's element ``i``, so the parent fixes the order at a fraction of the
    cost of reading through the maps (a decode, an augmentation)."""
    from grain._src.python.dataset.transformations import map as map_ds

    maps = tuple(getattr(map_ds, name) for name in (
        "MapMapDataset", "MapWithIndexMapDataset", "RandomMapMapDataset") if hasattr(map_ds, name))
    while isinstance(ds, maps) and len(getattr(ds, "parents", ())) == 1:
        ds = ds.parents[0]
    return ds


def drops_elements(ds: Any) -> bool:
    """Whether a Grain ``MapDataset`` has a ``filter`` or ``flat_map`` among its ancestors (they
    drop elements, so Grain cannot batch it by index), read from its ``parents`` graph."""
    from grain._src.python.dataset.transformations import filter as filter_ds
    from grain._src.python.dataset.transformations import flatmap as flatmap_ds

    dropping = (filter_ds.FilterMapDataset, flatmap_ds.FlatMapMapDataset)
    seen, to_check = set(), [ds]
    while to_check:
        current = to_check.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, dropping):
            return True
        to_check.extend(getattr(current, "parents", ()))
    return False


def tf_graph(ds: Any, *, fail_on_external_state: bool = False) -> Any:
    """A ``tf.data.Dataset``'s graph as a ``GraphDef`` (its functions in ``library``):
    ``ds._as_serialized_graph``, without device placements. With ``fail_on_external_state``
    it raises TensorFlow's ``FailedPreconditionError`` naming an op whose state tf.data cannot
    save (a ``py_function``, ...)."""
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2

    policy = tf.data.experimental.ExternalStatePolicy
    graph = graph_pb2.GraphDef()
    # a refusal is raised here, named by the caller: TensorFlow's own WARNING line of it
    # ("Local rendezvous is aborting ...") would only repeat it, so it is off while inside
    with _logs_at_least(_ERROR) if fail_on_external_state else contextlib.nullcontext():
        serialized = ds._as_serialized_graph(
            external_state_policy=policy.FAIL if fail_on_external_state else policy.IGNORE,
            strip_device_assignment=True)
    graph.ParseFromString(serialized.numpy())
    for nodes in [graph.node] + [f.node_def for f in graph.library.function]:
        for node in nodes:  # what stripping leaves (a py_function's "/device::0") fails later
            node.device = ""
    return graph


def tf_auto_shard(ds: Any, num_workers: int, index: int, policy: Any) -> Any:
    """TensorFlow's sharding rewrite (tf.distribute's ``AutoShardPolicy``) of ``ds`` for worker
    ``index`` of ``num_workers``: ``distribute._AutoShardDataset``. FILE inserts a shard of the
    file names before the first op that reads them; HINT fills in ``SHARD_HINT``."""
    import tensorflow as tf
    from tensorflow.python.data.experimental.ops import distribute

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = policy
    return distribute._AutoShardDataset(ds.with_options(options), num_workers, index)


def tf_from_graph(graph: Any, element_spec: Any) -> Any:
    """A ``tf.data.Dataset`` from a ``GraphDef`` (as :func:`tf_graph` returns, its ``_Retval``
    pointing at the dataset wanted): ``dataset_from_graph`` and ``dataset_ops._VariantDataset``."""
    from tensorflow.python.data.ops import dataset_ops
    from tensorflow.python.ops import gen_experimental_dataset_ops

    variant = gen_experimental_dataset_ops.dataset_from_graph(graph.SerializeToString())
    return dataset_ops._VariantDataset(variant, element_spec)


def tf_shuffle(ds: Any) -> tuple[Any, int, int, int, bool] | None:
    """``(input, buffer_size, seed, seed2, reshuffle_each_iteration)`` of a dataset that
    ``Dataset.shuffle`` made (``shuffle_op._ShuffleDataset``), both op seeds as TensorFlow
    derived them (0 and 0: none); None for any other dataset."""
    if type(ds).__name__ != "_ShuffleDataset":
        return None
    try:
        return (ds._input_dataset, int(ds._buffer_size), int(ds._seed), int(ds._seed2),
                ds._reshuffle_each_iteration is not False)  # None: TensorFlow's default, True
    except (AttributeError, TypeError, ValueError):
        return None


def tf_shuffled(ds: Any, buffer_size: int, seeds: tuple[int, int], reshuffle: bool) -> Any:
    """``ds`` shuffled as ``Dataset.shuffle`` shuffles it, with both op seeds given (which
    ``shuffle`` cannot take) and a seed generator of its own: ``gen_dataset_ops.
    shuffle_dataset_v3`` as a ``dataset_ops._VariantDataset``. Its ``n``-th iterator has the
    order of the ``n``-th iterator of ``Dataset.shuffle`` with those seeds."""
    from tensorflow.python.data.ops import dataset_ops
    from tensorflow.python.data.util import structure
    from tensorflow.python.ops import gen_dataset_ops

    spec = ds.element_spec  # a shuffle keeps it
    variant = gen_dataset_ops.shuffle_dataset_v3(
        ds._variant_tensor, buffer_size=buffer_size, seed=seeds[0], seed2=seeds[1],
        seed_generator=gen_dataset_ops.dummy_seed_generator(),
        reshuffle_each_iteration=reshuffle, output_types=structure.get_flat_tensor_types(spec),
        output_shapes=structure.get_flat_tensor_shapes(spec))
    return dataset_ops._VariantDataset(variant, ds.element_spec)


def tf_source_tensors(ds: Any) -> list[Any]:
    """The tensors of every ``from_tensor_slices`` and ``from_tensors`` under ``ds``, depth
    first (``_TensorSliceDataset._tensors``, ``_TensorDataset._tensors``, found through each
    dataset's ``_inputs()``); none under a dataset rebuilt from a graph."""
    found, todo, seen = [], [ds], set()
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if type(node).__name__ in ("_TensorSliceDataset", "_TensorDataset"):
            found.extend(node._tensors)
        todo.extend(reversed(node._inputs()))
    return found


def tf_is_tensor_slices(ds: Any) -> bool:
    """Whether ``ds`` is a ``Dataset.from_tensor_slices`` (``from_tensor_slices_op.
    _TensorSliceDataset``): its rows are constants of its graph."""
    return type(ds).__name__ == "_TensorSliceDataset"


def tf_repeat(ds: Any) -> tuple[Any, int] | None:
    """``(input, count)`` of a dataset that ``Dataset.repeat`` made (``repeat_op.
    _RepeatDataset._count``; -1: without end), else None."""
    if type(ds).__name__ != "_RepeatDataset":
        return None
    return ds._input_dataset, int(ds._count)


def tf_skips_in_place(ds: Any) -> bool:
    """Whether ``ds`` is a ``from_tensor_slices`` or a ``range`` (``_TensorSliceDataset``,
    ``_RangeDataset``): a source in memory, which tf.data skips in place."""
    return type(ds).__name__ in ("_TensorSliceDataset", "_RangeDataset")


def tf_one_to_one(ds: Any) -> tuple[Any, Callable[[Any], Any]] | None:
    """For a dataset that gives one element per element of its input, in its order, whatever
    the element (``map`` with or without ``num_parallel_calls``, ``prefetch``,
    ``with_options``): its input, and a function that applies the same op, the same traced
    function included, to another input of the same element spec. None for any other."""
    from tensorflow.python.data.ops import dataset_ops
    from tensorflow.python.ops import gen_dataset_ops

    kind = type(ds).__name__
    if kind == "_PrefetchDataset":
        return ds._input_dataset, lambda new: new.prefetch(int(ds._buffer_size))
    if kind == "_OptionsDataset":
        return ds._input_dataset, lambda new: new.with_options(ds.options())
    if kind not in ("_MapDataset", "_ParallelMapDataset"):
        return None
    function = ds._map_func.function
    common = {"use_inter_op_parallelism": ds._use_inter_op_parallelism,
              "preserve_cardinality": ds._preserve_cardinality, **ds._common_args}
    if kind == "_ParallelMapDataset":
        if hasattr(ds, "_use_unbounded_threadpool"):
            common["use_unbounded_threadpool"] = ds._use_unbounded_threadpool
        common.update(num_parallel_calls=ds._num_parallel_calls, deterministic=ds._deterministic)

    def again(new: Any) -> Any:
        op = (gen_dataset_ops.parallel_map_dataset_v2 if kind == "_ParallelMapDataset"
              else gen_dataset_ops.map_dataset)
        variant = op(new._variant_tensor, function.captured_inputs, f=function, **common)
        return dataset_ops._VariantDataset(variant, ds.element_spec)

    return ds._input_dataset, again


def tf_map_carrying(ds: Any) -> tuple[Any, Callable[[Any], Any]] | None:
    """For a ``map`` (with or without ``num_parallel_calls``) whose input and output are dense
    tensors: its input, and a function that maps another dataset of ``(element, extra)`` pairs,
    applying the same traced function to ``element`` and passing ``extra`` on. None for any
    other dataset."""
    import tensorflow as tf

    kind = type(ds).__name__
    if kind not in ("_MapDataset", "_ParallelMapDataset") or not all(
            isinstance(spec, tf.TensorSpec) for spec in tf.nest.flatten(
                (ds.element_spec, ds._input_dataset.element_spec))):
        return None
    function, spec = ds._map_func.function, ds.element_spec
    options: dict[str, Any] = {}
    if kind == "_ParallelMapDataset":
        options = {"num_parallel_calls": int(ds._num_parallel_calls),
                   "deterministic": {"true": True, "false": False}.get(ds._deterministic)}

    def apply(element: Any, extra: Any) -> tuple[Any, Any]:
        return tf.nest.pack_sequence_as(spec, tf.nest.flatten(function(
            *tf.nest.flatten(element)))), extra

    return ds._input_dataset, lambda pairs: pairs.map(apply, **options)


def tf_input_index(node: Any, name: str) -> int:
    """The position among ``node``'s inputs (a ``NodeDef`` of a tf.data graph) of its op's
    input argument ``name``, list arguments counted by their length: from the op's ``OpDef``,
    ``op_def_registry.get``."""
    from tensorflow.python.framework import op_def_registry

    index = 0
    for arg in op_def_registry.get(node.op).input_arg:
        if arg.name == name:
            return index
        if arg.type_list_attr:
            index += len(node.attr[arg.type_list_attr].list.type)
        elif arg.number_attr:
            index += node.attr[arg.number_attr].i
        else:
            index += 1
    raise ValueError(f"{node.op} has no input {name!r}")


def tf_save_iterator(iterator: Any, *, ignore_external_state: bool) -> bytes:
    """A tf.data iterator's checkpoint as bytes (what ``tf.train.Checkpoint`` writes of it):
    ``gen_dataset_ops.serialize_iterator`` of ``iterator._iterator_resource``."""
    import tensorflow as tf
    from tensorflow.python.ops import gen_dataset_ops

    policy = tf.data.experimental.ExternalStatePolicy
    with _no_info_logs():  # TensorFlow logs each symbolic save at INFO: a line per batch
        state = gen_dataset_ops.serialize_iterator(
            iterator._iterator_resource,
            external_state_policy=(policy.IGNORE if ignore_external_state else policy.FAIL).value)
    return bytes(tf.io.serialize_tensor(state).numpy())


def tf_restore_iterator(iterator: Any, state: bytes) -> None:
    """Puts a fresh iterator of the same pipeline where :func:`tf_save_iterator` took ``state``:
    ``gen_dataset_ops.deserialize_iterator``."""
    import tensorflow as tf
    from tensorflow.python.ops import gen_dataset_ops

    gen_dataset_ops.deserialize_iterator(iterator._iterator_resource,
                                         tf.io.parse_tensor(state, tf.variant))


_WARNING, _ERROR = 1, 2  # absl::LogSeverityAtLeast::kWarning, kError
_LOG_LEVEL_LOCK = threading.Lock()


@contextlib.contextmanager
def _no_info_logs() -> Iterator[None]:
    """TensorFlow's C++ INFO logs off while inside (where they are on): ``LOG(INFO) << "Saving
    symbolic checkpoint"`` in ``IteratorResource::Save`` would write a line to stderr at every
    batch. Where TensorFlow logs through its own logger instead (before 2.21), whose level is
    fixed when TensorFlow is imported, it warns once how to turn the line off."""
    if tf_log_level() is None and tf_logs_at_fixed_level():
        _warn_fixed_info_logs()
    with _logs_at_least(_WARNING):
        yield


@contextlib.contextmanager
def _logs_at_least(severity: int) -> Iterator[None]:
    """TensorFlow's C++ log lines below ``severity`` off while inside (absl's minimum log
    level raised, then put back), where :func:`tf_log_level` finds the level; else nothing."""
    level = tf_log_level()
    if level is None:
        yield
        return
    get, set_level = level
    with _LOG_LEVEL_LOCK:
        before = get()
        if before < severity:
            set_level(severity)
        try:
            yield
        finally:
            if before < severity:
                set_level(before)


@functools.cache
def _warn_fixed_info_logs() -> None:
    """Once per process, unless ``TF_CPP_MIN_LOG_LEVEL`` is 2 or more (which only the user
    sets: JAX's import sets 1 where it is unset, maybe after TensorFlow has read it)."""
    import os
    import warnings

    import tensorflow as tf

    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0").strip() not in ("", "0", "1"):
        return
    warnings.warn(
        f"tensorflow {tf.__version__} writes the INFO line 'Saving symbolic checkpoint' at every "
        "save of a tf.data iterator unless "
        "TF_CPP_MIN_LOG_LEVEL was 1 or more when TensorFlow was imported (its log level is "
        "fixed then): set TF_CPP_MIN_LOG_LEVEL=1 before importing TensorFlow (importing jax "
        "first does), or use tensorflow >= 2.21, whose level jaxload lowers during the save",
        stacklevel=4)


def _framework_library() -> str | None:
    """The path of TensorFlow's ``libtensorflow_framework`` (None where it is not found)."""
    import glob
    import os

    import tensorflow as tf

    paths = glob.glob(os.path.join(os.path.dirname(tf.__file__), "libtensorflow_framework*"))
    return paths[0] if paths else None


def _framework_symbol(pattern: bytes, tail: bytes) -> re.Match[bytes] | None:
    """The first match of ``pattern`` (which ends with ``tail``) among
    ``libtensorflow_framework``'s bytes (its symbols), copied out of the mapped library. Each
    ``tail`` is found with ``find`` (a few ms over the library, where a regular expression
    takes tens), then ``pattern`` matched on the bytes before it."""
    import mmap

    path = _framework_library()
    if path is None:
        return None
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            at = m.find(tail)
            while at >= 0:
                end = at + len(tail)
                found = re.search(pattern + rb"$", m[max(0, end - 256):end])
                if found is not None:
                    return found
                at = m.find(tail, end)
    except OSError:
        pass
    return None


def _framework_function(name: str) -> Any:
    """The C function ``name`` of the loaded ``libtensorflow_framework`` (``dlsym``), or None."""
    import ctypes
    import os

    path = _framework_library()
    if path is None:
        return None
    try:
        library = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | os.RTLD_GLOBAL)
        return getattr(library, name)
    except (OSError, AttributeError):
        return None


@functools.cache
def tf_logs_at_fixed_level() -> bool:
    """Whether TensorFlow logs through its own logger (``tsl::internal::LogMessage``, before
    TensorFlow 2.21), which reads ``TF_CPP_MIN_LOG_LEVEL`` once, at its first line, and has no
    setter: found by ``tsl::internal::MinLogLevelFromEnv`` among the library's symbols."""
    return _framework_function("_ZN3tsl8internal18MinLogLevelFromEnvEv") is not None


def tf_op_attrs(op: str) -> set[str]:
    """The attribute names of a TensorFlow op (``op_def_registry.get(op).attr``)."""
    from tensorflow.python.framework import op_def_registry

    return {attr.name for attr in op_def_registry.get(op).attr}


def tf_global_seed() -> int | None:
    """The seed ``tf.random.set_seed`` set (eagerly), or None: ``context.global_seed()``."""
    from tensorflow.python.eager import context

    seed = context.global_seed()
    return None if seed is None else int(seed)


@functools.cache
def tf_log_level() -> tuple[Any, Any] | None:
    """``absl::MinLogLevel`` and ``absl::SetMinLogLevel`` of the absl inside TensorFlow's
    ``libtensorflow_framework`` (as ctypes functions), or None where they are not found or do
    not govern TensorFlow's log lines (:func:`tf_logs_at_fixed_level`). Their C++ names carry
    absl's release (``absl::lts_20250814::``), read from the library's symbols."""
    import ctypes

    if tf_logs_at_fixed_level():
        return None
    found = _framework_symbol(rb"_ZN4absl(\d+lts_\d+)?11MinLogLevelEv", b"11MinLogLevelEv")
    if found is None:
        return None
    inner = (found.group(1) or b"").decode()
    get = _framework_function(f"_ZN4absl{inner}11MinLogLevelEv")
    set_level = _framework_function(f"_ZN4absl{inner}14SetMinLogLevelE"
                                    f"N{'S0_' if inner else 'S_'}18LogSeverityAtLeastE")
    if get is None or set_level is None:
        return None
    get.restype, get.argtypes = ctypes.c_int, []
    set_level.restype, set_level.argtypes = None, [ctypes.c_int]
    return get, set_level
