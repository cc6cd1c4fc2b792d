"""Every private attribute of JAX, Grain and TensorFlow that jaxload reads, in one place.

Their public APIs lack what these give (the coordination service's client, the mesh of the
older ``with mesh:`` context, a ``grain.DataLoader``'s data source, sharding and operations, the
datasets that drop elements, a tf.data pipeline's graph, TensorFlow's file-sharding rewrite and
its iterator checkpoints as bytes, the log level of the absl inside TensorFlow). Each accessor
names the attribute it reads, and ``tests/test_compat.py`` fails loudly, naming it, when an
upgrade removes one: the next JAX or Grain release cannot break jaxload silently.
"""

from __future__ import annotations

from jaxload._src.compat.grain import (
    data_loader_check_state,
    data_loader_operations,
    data_loader_sampler,
    data_loader_shard_options,
    data_loader_source,
    data_loader_unread,
    drops_elements,
    grain_below_maps,
    grain_split_and_seeds,
)
from jaxload._src.compat.jax import distributed_client, thread_mesh
from jaxload._src.compat.tf import (
    tf_from_graph,
    tf_global_seed,
    tf_graph,
    tf_graph_checked,
    tf_input_index,
    tf_is_tensor_slices,
    tf_map_carrying,
    tf_op_attrs,
    tf_restore_iterator,
    tf_save_iterator,
    tf_shard_graph,
    tf_source_tensors,
    tf_stateless,
)
from jaxload._src.compat.tf_logs import tf_log_level, tf_logs_at_fixed_level
from jaxload._src.compat.tf_ops import (
    tf_batch,
    tf_interleave,
    tf_one_to_one,
    tf_op,
    tf_repeat,
    tf_seed_generator,
    tf_shuffle,
    tf_shuffled,
)

# (what reads it, the private path) for tests/test_compat.py
PRIVATE = (
    ("distributed_client", "jax._src.distributed.global_state.client"),
    ("thread_mesh", "jax._src.mesh.thread_resources.env.physical_mesh"),
    ("data_loader_source", "grain.DataLoader._data_source"),
    ("data_loader_shard_options", "grain.DataLoader._shard_options | ._sampler._shard_options"),
    ("data_loader_operations", "grain.DataLoader._operations, "
                               "grain._src.python.operations.BatchOperation (Grain 0.2.12)"),
    ("data_loader_sampler", "grain.DataLoader._sampler"),
    ("data_loader_check_state", "grain.DataLoader._validate_state (where it exists)"),
    ("data_loader_unread", "grain._src.python.data_loader._SamplerMapDataset (whether it exists)"),
    ("grain_split_and_seeds", "grain._src.python.dataset.transformations.slice.SliceMapDataset "
                              "(its str), .map.RandomMapMapDataset._rng_pool._seed, "
                              "RandomMapIterDataset._seed"),
    ("grain_below_maps", "grain._src.python.dataset.transformations.map.MapMapDataset, "
                         "MapWithIndexMapDataset, RandomMapMapDataset"),
    ("drops_elements", "grain._src.python.dataset.transformations.filter.FilterMapDataset, "
                       "grain._src.python.dataset.transformations.flatmap.FlatMapMapDataset"),
    ("tf_graph", "tf.data.Dataset._as_serialized_graph"),
    ("tf_shard_graph", "tensorflow.python.grappler.tf_optimizer.OptimizeGraph with the "
                       "tf_auto_shard optimizer and its parameters num_workers, index, "
                       "auto_shard_policy, num_replicas; grappler.cluster.Cluster(devices=)"),
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
    ("tf_op", "_TensorSliceDataset, range_op._RangeDataset (their class names)"),
    ("tf_repeat", "repeat_op._RepeatDataset._input_dataset, _count"),
    ("tf_seed_generator", "gen_dataset_ops.anonymous_seed_generator, shuffle_dataset_v3; "
                          "dataset_ops._VariantDataset"),
    ("tf_iterator_state", "tf.data.Iterator._iterator_resource, "
                          "tensorflow.python.ops.gen_dataset_ops.serialize_iterator, "
                          "deserialize_iterator"),
    ("tf_input_index", "tensorflow.python.framework.op_def_registry.get"),
    ("tf_stateless", "_MapDataset._map_func.function.graph, op_def_registry.get"),
    ("tf_batch", "batch_op._BatchDataset, _ParallelBatchDataset: _input_dataset, _batch_size, "
                 "_drop_remainder, _num_parallel_calls, _deterministic"),
    ("tf_op_attrs", "tensorflow.python.framework.op_def_registry.get"),
    ("tf_interleave", "interleave_op._InterleaveDataset, _ParallelInterleaveDataset, "
                      "flat_map_op._FlatMapDataset: _input_dataset, _map_func.function, "
                      "_cycle_length, _block_length, _buffer_output_elements, "
                      "_prefetch_input_elements, _num_parallel_calls, _common_args; "
                      "readers.TFRecordDatasetV2._impl; gen_dataset_ops.interleave_dataset, "
                      "parallel_interleave_dataset_v4, flat_map_dataset"),
    ("tf_global_seed", "tensorflow.python.eager.context.global_seed"),
    ("tf_log_level", "absl::MinLogLevel, absl::SetMinLogLevel in libtensorflow_framework; "
                     "tsl::internal::MinLogLevelFromEnv (TensorFlow < 2.21)"),
)


__all__ = [
    "data_loader_check_state", "data_loader_operations", "data_loader_sampler", "data_loader_shard_options",
    "data_loader_source", "data_loader_unread", "distributed_client", "drops_elements", "grain_below_maps",
    "grain_split_and_seeds", "tf_batch", "tf_from_graph", "tf_global_seed", "tf_graph", "tf_graph_checked",
    "tf_input_index", "tf_interleave", "tf_is_tensor_slices", "tf_log_level", "tf_logs_at_fixed_level",
    "tf_map_carrying", "tf_one_to_one", "tf_op", "tf_op_attrs", "tf_repeat", "tf_restore_iterator",
    "tf_save_iterator", "tf_seed_generator", "tf_shard_graph", "tf_shuffle", "tf_shuffled",
    "tf_source_tensors", "tf_stateless", "thread_mesh", "PRIVATE",
]
