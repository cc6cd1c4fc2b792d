"""A pipeline's ops applied again over another input: the shuffles, repeats, maps, batches and
interleaves that jaxload rebuilds to position or split a pass (the same traced functions, the
same arguments), read from TensorFlow's private dataset classes (``tf.data`` has no public way
to take a dataset's op apart)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def tf_op(ds: Any) -> tuple[str, Any]:
    """A dataset's top op as jaxload takes pipelines apart, read in one call:
    ``("shuffle", tf_shuffle(ds))``, ``("one_to_one", tf_one_to_one(ds))``,
    ``("repeat", tf_repeat(ds))`` or ``("batch", tf_batch(ds))`` where that reads it, else
    ``("slices", None)`` for ``from_tensor_slices``, ``("range", None)`` for ``range`` (the
    sources tf.data skips in place) or ``("other", None)``.

    Example:
      >>> import tensorflow as tf
      >>> tf_op(tf.data.Dataset.range(4).shuffle(4, seed=1))[0]
      'shuffle'
      >>> tf_op(tf.data.Dataset.range(4))
      ('range', None)
    """
    for kind, read in (("shuffle", tf_shuffle), ("one_to_one", tf_one_to_one),
                       ("repeat", tf_repeat), ("batch", tf_batch)):
        if (found := read(ds)) is not None:
            return kind, found
    return {"_TensorSliceDataset": "slices", "_RangeDataset": "range"}.get(
        type(ds).__name__, "other"), None


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


def tf_seed_generator(seeds: tuple[int, int], reshuffle: bool = True) -> Any:
    """A seed generator of a shuffle that reshuffles, made as ``Dataset.shuffle`` makes one
    (``gen_dataset_ops.anonymous_seed_generator``), and ``range(2)`` shuffled with it: each
    iterator of that draws one pass's seeds from the generator. The generator lives as long as
    the dataset (its deleter is kept with it); a graph that names the generator's handle (the
    dataset's, serialized) shares it. ``reshuffle=False``: one that gives every iterator the
    same seeds, as a shuffle with ``reshuffle_each_iteration=False`` has."""
    from tensorflow.python.data.ops import dataset_ops
    from tensorflow.python.ops import gen_dataset_ops

    base = dataset_ops.Dataset.range(2)
    handle, deleter = gen_dataset_ops.anonymous_seed_generator(seed=seeds[0], seed2=seeds[1],
                                                               reshuffle=reshuffle)
    variant = gen_dataset_ops.shuffle_dataset_v3(
        base._variant_tensor, buffer_size=2, seed=seeds[0], seed2=seeds[1],
        seed_generator=handle, reshuffle_each_iteration=reshuffle,
        output_types=[base.element_spec.dtype], output_shapes=[base.element_spec.shape])
    drawer = dataset_ops._VariantDataset(variant, base.element_spec)
    drawer._jaxload_deleter = deleter
    return drawer


def tf_repeat(ds: Any) -> tuple[Any, int] | None:
    """``(input, count)`` of a dataset that ``Dataset.repeat`` made (``repeat_op.
    _RepeatDataset._count``; -1: without end), else None."""
    if type(ds).__name__ != "_RepeatDataset":
        return None
    return ds._input_dataset, int(ds._count)


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


def tf_batch(ds: Any) -> tuple[Any, Callable[[Any], Any], int] | None:
    """For a dataset that ``Dataset.batch`` made (``batch_op._BatchDataset``,
    ``_ParallelBatchDataset``): its input, a function that applies the same batch to another
    input, and its batch size; None for any other, or for a size or ``drop_remainder`` that is
    not a constant."""
    from tensorflow.python.framework import tensor_util

    kind = type(ds).__name__
    if kind not in ("_BatchDataset", "_ParallelBatchDataset"):
        return None
    size = tensor_util.constant_value(ds._batch_size)
    drop = tensor_util.constant_value(ds._drop_remainder)
    if size is None or drop is None:
        return None
    options: dict[str, Any] = {}
    if kind == "_ParallelBatchDataset":
        calls = tensor_util.constant_value(ds._num_parallel_calls)
        if calls is None:
            return None
        options = {"num_parallel_calls": int(calls),
                   "deterministic": {"true": True, "false": False}.get(ds._deterministic)}
    return (ds._input_dataset,
            lambda new: new.batch(int(size), drop_remainder=bool(drop), **options), int(size))


def tf_interleave(ds: Any) -> tuple[Any, Callable[[Any], Any]] | None:
    """For a dataset that ``Dataset.interleave`` or ``flat_map`` made (``interleave_op.
    _InterleaveDataset``, ``_ParallelInterleaveDataset``, ``flat_map_op._FlatMapDataset``), or a
    reader given a dataset of file names (``readers.TFRecordDatasetV2``, ``TextLineDatasetV2``,
    ``FixedLengthRecordDatasetV2``: an interleave or a flat map in their ``_impl``): its input,
    and a function that applies the same op (the same traced function, cycle and block lengths,
    parallel calls and buffers) to another input of the same element spec, its order
    deterministic (the caller replays only pipelines whose order is); None for any other."""
    from tensorflow.python.data.ops import dataset_ops
    from tensorflow.python.ops import gen_dataset_ops

    if type(ds).__name__ in _READERS and hasattr(ds, "_impl"):
        ds = ds._impl
    kind = type(ds).__name__
    if kind not in ("_InterleaveDataset", "_ParallelInterleaveDataset", "_FlatMapDataset"):
        return None
    function = ds._map_func.function

    def again(new: Any) -> Any:
        inputs = (new._variant_tensor, function.captured_inputs)
        if kind == "_FlatMapDataset":
            variant = gen_dataset_ops.flat_map_dataset(*inputs, f=function, **ds._common_args)
        elif kind == "_InterleaveDataset":
            variant = gen_dataset_ops.interleave_dataset(
                *inputs, ds._cycle_length, ds._block_length, f=function, **ds._common_args)
        else:
            variant = gen_dataset_ops.parallel_interleave_dataset_v4(
                *inputs, ds._cycle_length, ds._block_length, ds._buffer_output_elements,
                ds._prefetch_input_elements, ds._num_parallel_calls, f=function,
                deterministic="true", **ds._common_args)
        return dataset_ops._VariantDataset(variant, ds.element_spec)

    return ds._input_dataset, again


_READERS = ("TFRecordDatasetV2", "TextLineDatasetV2", "FixedLengthRecordDatasetV2")
