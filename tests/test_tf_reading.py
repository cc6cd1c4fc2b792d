"""A tf.data pipeline's graph is serialized once per loader build and never per pass: real
2-process runs (the splits by files happen only with several loading groups) over rows in
memory, files split by files (names shuffled, or a shuffle replayed over each group's files),
a generator, a shard hint and a cache file."""

from __future__ import annotations

import pytest


def _pipelines(root: str) -> dict[str, tuple[bytes, object]]:
    """name -> (an op only the user's graph holds, the pipeline)."""
    import numpy as np
    import tensorflow as tf

    def parse(record):
        return tf.ensure_shape(tf.io.parse_tensor(record, tf.int64), ())

    pattern = f"{root}/*.tfrecord"
    hint = tf.data.experimental.SHARD_HINT
    return {
        "memory": (b"TensorSliceDataset", tf.data.Dataset.from_tensor_slices(
            np.arange(64)).shuffle(64, seed=1).map(lambda x: 2 * x)),
        "files": (b"TFRecordDataset", tf.data.Dataset.list_files(
            pattern, shuffle=True, seed=1).interleave(tf.data.TFRecordDataset).map(parse)),
        "files replayed": (b"TFRecordDataset", tf.data.Dataset.list_files(
            pattern, shuffle=False).interleave(tf.data.TFRecordDataset).map(parse).shuffle(
                16, seed=2)),
        "generator": (b"GeneratorDataset", tf.data.Dataset.from_generator(
            lambda: iter(range(64)), output_signature=tf.TensorSpec((), tf.int64))),
        "hint": (b"ShardDataset", tf.data.Dataset.range(64).shard(hint, hint).map(
            lambda x: x + 1)),
        "cache file": (b"CacheDatasetV2", tf.data.Dataset.range(64).cache(
            f"{root}/cache").shuffle(64, seed=3)),
    }


def serializations(root: str) -> dict[str, list[int]]:
    """name -> serializations of the user's graph [at the build, pass 1, pass 2, a state]."""
    import tensorflow as tf

    import jaxload

    counted: list[bytes] = []
    original = tf.data.Dataset._as_serialized_graph

    def counting(self, *args, **kwargs):
        graph = original(self, *args, **kwargs)
        counted.append(bytes(graph.numpy()))
        return graph

    out = {}
    tf.data.Dataset._as_serialized_graph = counting
    try:
        for name, (op, ds) in _pipelines(root).items():
            counts = []
            del counted[:]
            loader = jaxload.from_tf_data(ds, jaxload.data_parallel(), global_batch_size=8,
                                          shard="auto" if name != "memory" else "elements")
            counts.append(sum(op in graph for graph in counted))
            for _ in range(2):
                del counted[:]
                assert sum(1 for _ in loader) > 0
                counts.append(sum(op in graph for graph in counted))
            del counted[:]
            loader.get_state()
            counts.append(sum(op in graph for graph in counted))
            out[name] = counts
    finally:
        tf.data.Dataset._as_serialized_graph = original
    return out


def _files(root) -> None:
    import tensorflow as tf

    for f in range(4):
        with tf.io.TFRecordWriter(str(root / f"{f}.tfrecord")) as writer:
            for i in range(16):
                writer.write(tf.io.serialize_tensor(tf.constant(f * 16 + i, tf.int64)).numpy())


@pytest.mark.cluster
def test_a_build_serializes_the_pipeline_once_and_a_pass_never(clusters, tmp_path):
    _files(tmp_path)
    results = clusters.run(serializations, num_processes=2, local_devices=2,
                           args=(str(tmp_path),), timeout_s=240)
    for process, counts in enumerate(results):
        assert counts == {name: [1, 0, 0, 0] for name in counts}, (process, counts)
    assert sorted(results[0]) == ["cache file", "files", "files replayed", "generator", "hint",
                                  "memory"]
