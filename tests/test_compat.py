"""Every private attribute of JAX and Grain that jaxload reads (jaxload/_src/compat/) exists
in the installed versions: an upgrade that removes one fails here, naming it."""

from __future__ import annotations

import json

import jax
import pytest

from jaxload._src import compat


def test_every_private_read_is_listed_and_has_a_test():
    tested = {name for name, _ in compat.PRIVATE}
    assert tested == {"distributed_client", "thread_mesh", "data_loader_source",
                      "data_loader_shard_options", "data_loader_operations", "drops_elements",
                      "data_loader_sampler", "data_loader_unread", "grain_split_and_seeds",
                      "data_loader_check_state",
                      "grain_below_maps",
                      "tf_graph", "tf_shard_graph", "tf_from_graph", "tf_iterator_state",
                      "tf_replay", "tf_is_tensor_slices", "tf_op", "tf_source_tensors",
                      "tf_repeat", "tf_stateless", "tf_batch", "tf_interleave",
                      "tf_input_index", "tf_log_level", "tf_op_attrs", "tf_global_seed",
                      "tf_seed_generator"}


def test_jax_private_attributes_exist():
    from jax._src import distributed
    from jax._src import mesh as mesh_lib

    assert hasattr(distributed, "global_state"), "jax._src.distributed.global_state is gone"
    assert hasattr(distributed.global_state, "client"), (
        "jax._src.distributed.global_state.client is gone: transport.py cannot reach the "
        "coordination service")
    assert compat.distributed_client() is None  # no jax.distributed.initialize in this process
    if hasattr(mesh_lib, "thread_resources"):  # the older `with mesh:` context
        assert hasattr(mesh_lib.thread_resources.env, "physical_mesh"), (
            "jax._src.mesh.thread_resources.env.physical_mesh is gone")
        mesh = jax.make_mesh((8,), ("data",))
        with mesh:
            assert compat.thread_mesh() == mesh


def test_grain_data_loader_private_attributes_exist():
    grain = pytest.importorskip("grain")
    source = list(range(16))
    options = grain.sharding.ShardOptions(shard_index=1, shard_count=2, drop_remainder=True)
    sampler = grain.samplers.IndexSampler(len(source), options, shuffle=False, num_epochs=1)
    loader = grain.DataLoader(data_source=source, sampler=sampler,
                              operations=[grain.transforms.Batch(4)], shard_options=options)
    for name, read in [("_data_source", compat.data_loader_source),
                       ("_shard_options", compat.data_loader_shard_options),
                       ("_operations", compat.data_loader_operations)]:
        try:
            read(loader)
        except AttributeError as e:
            pytest.fail(f"grain.DataLoader.{name} is gone ({e}): adapters/grain.py cannot "
                        "check or resume a DataLoader")
    assert compat.data_loader_source(loader) is source
    assert compat.data_loader_shard_options(loader).shard_index == 1
    assert [op.batch_size for op in compat.data_loader_operations(loader)] == [4]
    # with worker_count > 0, Grain 0.2.12 puts its private BatchOperation in the Batch's place
    workers = grain.DataLoader(data_source=source, sampler=sampler, worker_count=1,
                               operations=[grain.transforms.Batch(4, drop_remainder=True)])
    batches = [op for op in compat.data_loader_operations(workers)
               if isinstance(op, grain.transforms.Batch)]
    assert [(op.batch_size, op.drop_remainder) for op in batches] == [(4, True)]
    # Grain's own check of a state: the same loader's passes, another worker count refused
    state = json.loads(iter(loader).get_state())
    compat.data_loader_check_state(loader, state)
    with pytest.raises(ValueError, match="Worker count in checkpoint does not match"):
        compat.data_loader_check_state(workers, state)


def test_the_records_a_sharded_data_loader_never_reads_are_counted_as_grain_reads_them():
    grain = pytest.importorskip("grain")
    for records in (15, 16):
        read, loaders = [], []
        for k in range(2):
            sampler = grain.samplers.IndexSampler(
                num_records=records, shuffle=True, num_epochs=1, seed=0,
                shard_options=grain.sharding.ShardOptions(k, 2, drop_remainder=False))
            loaders.append(grain.DataLoader(data_source=list(range(records)), sampler=sampler,
                                            operations=[grain.transforms.Batch(4)]))
            read += [int(i) for batch in loaders[-1] for i in batch]
        assert len(read) == len(set(read))
        assert compat.data_loader_unread(loaders[0])[0] == records - len(read)


def test_grain_splits_and_random_seeds_are_found_along_the_chain():
    grain = pytest.importorskip("grain")
    source = grain.MapDataset.range(64)
    noisy = source.random_map(lambda x, rng: x, seed=3)[1::2].map(lambda x: x)
    assert compat.grain_split_and_seeds(noisy) == ([1, 2], [])  # the seed below the split
    after = noisy.to_iter_dataset().random_map(lambda x, rng: x, seed=7)
    assert compat.grain_split_and_seeds(after.random_map(lambda x, rng: x, seed=8)) == (
        [1, 2], [8, 7])
    assert compat.grain_split_and_seeds(source.random_map(lambda x, rng: x, seed=4)) == (None, [4])
    # below the top maps: the slice, whose order the maps keep
    assert str(compat.grain_below_maps(noisy)) == str(source.random_map(
        lambda x, rng: x, seed=3)[1::2])
    assert compat.grain_below_maps(source.map(lambda x: x).map_with_index(
        lambda i, x: x)) is source
    sampler = grain.samplers.IndexSampler(16, shuffle=True, num_epochs=1, seed=2)
    loader = grain.DataLoader(data_source=list(range(16)), sampler=sampler)
    assert compat.data_loader_sampler(loader) is sampler


def test_grain_datasets_that_drop_elements_are_found_in_the_parents_graph():
    grain = pytest.importorskip("grain")
    ds = grain.MapDataset.range(10)
    assert not compat.drops_elements(ds.map(lambda x: x).shuffle(seed=1))
    assert compat.drops_elements(ds.filter(lambda x: x % 2).map(lambda x: x))
    assert not compat.drops_elements(ds.map(lambda x: x).batch(2))


def test_tensorflow_private_entry_points_exist_and_work(tmp_path):
    tf = pytest.importorskip("tensorflow")
    from tensorflow.python.data.ops import dataset_ops
    from tensorflow.python.grappler import tf_optimizer
    from tensorflow.python.ops import gen_dataset_ops, gen_experimental_dataset_ops

    for owner, name in [(tf.data.Dataset, "_as_serialized_graph"),
                        (tf_optimizer, "OptimizeGraph"), (dataset_ops, "_VariantDataset"),
                        (gen_experimental_dataset_ops, "dataset_from_graph"),
                        (gen_dataset_ops, "serialize_iterator"),
                        (gen_dataset_ops, "deserialize_iterator")]:
        assert hasattr(owner, name), (
            f"TensorFlow no longer has {owner.__name__}.{name}: jaxload cannot shard tf.data by "
            "files or save its iterators (jaxload/_src/compat/)")
    # the FILE rewrite deals out file names, which can be counted without reading a file
    files = [str(tmp_path / f"{i}.txt") for i in range(5)]
    for i, path in enumerate(files):
        with open(path, "w") as f:
            f.write(f"{i}\n")
    lines = tf.data.TextLineDataset(files)
    graph = compat.tf_shard_graph(compat.tf_graph(lines), 2, 1,
                                  tf.data.experimental.AutoShardPolicy.FILE)
    share = compat.tf_from_graph(graph, lines.element_spec)
    assert [line.decode() for line in share.as_numpy_iterator()] == ["1", "3"]
    from jaxload._src.pipelines.tf.names import file_names

    assert file_names(graph).count == 5
    # as TensorFlow's own rewrite of the dataset (_AutoShardDataset) deals them out
    from tensorflow.python.data.experimental.ops import distribute

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.FILE
    theirs = distribute._AutoShardDataset(lines.with_options(options), 2, 1)
    assert [line.decode() for line in theirs.as_numpy_iterator()] == ["1", "3"]
    assert "cycle_length" not in compat.tf_op_attrs("InterleaveDataset")  # an input, not an attr
    assert "f" in compat.tf_op_attrs("InterleaveDataset")
    tf.random.set_seed(7)
    try:
        assert compat.tf_global_seed() == 7
    finally:
        tf.random.set_seed(None)
    assert compat.tf_global_seed() is None
    assert "TextLineDataset" in {node.op for node in graph.node} | {
        node.op for function in graph.library.function for node in function.node_def}
    # an iterator's checkpoint as bytes, restored into a fresh iterator
    iterator = iter(tf.data.Dataset.range(10))
    next(iterator)
    state = compat.tf_save_iterator(iterator, ignore_external_state=False)
    fresh = iter(tf.data.Dataset.range(10))
    compat.tf_restore_iterator(fresh, state)
    assert int(next(fresh)) == 1
    # an op's input argument found among a node's inputs, list arguments counted
    from tensorflow.python.framework import op_def_registry

    assert op_def_registry.get("ParallelInterleaveDatasetV4") is not None
    node = next(n for n in compat.tf_graph(tf.data.Dataset.range(2).interleave(
        lambda x: tf.data.Dataset.range(x + 1), cycle_length=2, num_parallel_calls=2)).node
        if n.op == "ParallelInterleaveDatasetV4")
    assert compat.tf_input_index(node, "cycle_length") == 1  # no captured arguments
    assert compat.tf_input_index(node, "prefetch_input_elements") == 4
    with pytest.raises(ValueError, match="no input 'nothing'"):
        compat.tf_input_index(node, "nothing")
    captured = tf.constant(3, tf.int64)  # one captured argument before cycle_length
    node = next(n for n in compat.tf_graph(tf.data.Dataset.range(2).interleave(
        lambda x: tf.data.Dataset.range(x + captured), cycle_length=2,
        num_parallel_calls=2)).node if n.op == "ParallelInterleaveDatasetV4")
    assert compat.tf_input_index(node, "prefetch_input_elements") == 5


def test_a_maps_stateful_ops_are_found_in_its_function_and_the_functions_it_calls():
    # shuffle.py moves a map from under a resumed shuffle to over it only where it draws nothing
    tf = pytest.importorskip("tensorflow")
    ds = tf.data.Dataset.range(4)

    def decode(x):
        image = tf.io.decode_jpeg(tf.io.encode_jpeg(tf.zeros([8, 8, 3], tf.uint8)))
        image = tf.image.convert_image_dtype(tf.image.resize(image, [4, 4]), tf.float32)
        return tf.cast(x, tf.float32) + tf.reduce_sum(image)

    def flipped(x):
        return tf.cond(x > 1, lambda: tf.image.random_flip_left_right(tf.zeros([2, 2, 3])),
                       lambda: tf.zeros([2, 2, 3]))

    assert compat.tf_stateless(ds.map(decode, num_parallel_calls=2))
    assert compat.tf_stateless(ds.map(lambda x: x + tf.random.stateless_uniform(
        [], seed=[1, x], maxval=2, dtype=tf.int64)))
    assert compat.tf_stateless(ds.prefetch(2))
    assert not compat.tf_stateless(ds.map(lambda x: x + tf.random.uniform(
        [], maxval=2, dtype=tf.int64)))
    assert not compat.tf_stateless(ds.map(flipped))  # in a branch of a cond
    assert not compat.tf_stateless(ds.map(lambda x: tf.py_function(lambda v: v, [x], tf.int64)))


def test_a_batch_is_read_and_applied_again_as_it_was():
    # replay.py counts the shuffle's elements in the user's batches over it, and rebuilds them
    tf = pytest.importorskip("tensorflow")
    ds = tf.data.Dataset.range(10)
    for batched in (ds.batch(4), ds.batch(4, drop_remainder=True),
                    ds.batch(3, num_parallel_calls=2, deterministic=True)):
        source, again, size = compat.tf_batch(batched)
        assert source is ds and size == int(batched.element_spec.shape[0] or len(
            next(iter(batched))))
        assert [b.tolist() for b in again(ds).as_numpy_iterator()] == [
            b.tolist() for b in batched.as_numpy_iterator()]
    assert compat.tf_batch(ds.map(lambda x: x)) is None


def test_an_interleave_is_read_and_applied_again_as_it_was():
    # shuffle.py rebuilds the interleave over a shuffle of file names for each pass
    tf = pytest.importorskip("tensorflow")
    names = tf.data.Dataset.range(5)
    table = tf.constant([3, 1, 4, 1, 5], tf.int64)  # a captured tensor goes with the function
    for calls in (None, 2):
        ds = names.interleave(lambda i: tf.data.Dataset.range(table[i]).map(lambda x: 10 * i + x),
                              cycle_length=2, block_length=2, num_parallel_calls=calls)
        source, again = compat.tf_interleave(ds)
        assert source is names
        assert list(again(names).as_numpy_iterator()) == list(ds.as_numpy_iterator())
        assert list(again(names.skip(3)).as_numpy_iterator()) == [30, 40, 41, 42, 43, 44]
    assert compat.tf_interleave(names.map(lambda x: x)) is None
    flat = names.flat_map(lambda i: tf.data.Dataset.range(table[i]))
    source, again = compat.tf_interleave(flat)
    assert source is names and list(again(names.skip(3)).as_numpy_iterator()) == [0, 0, 1, 2, 3, 4]
    files = tf.data.Dataset.from_tensor_slices(["a", "b"])
    for reads in (None, tf.data.AUTOTUNE):  # given a dataset of names: a flat map, an interleave
        source, again = compat.tf_interleave(tf.data.TFRecordDataset(files, num_parallel_reads=reads))
        assert source is files and again(files).element_spec == tf.TensorSpec([], tf.string)


def test_a_seed_generator_is_drawn_from_by_a_graph_that_names_it():
    # reseed.py: a pipeline rebuilt from its graph with a shuffle's generator handle replaced
    # by one of tf_seed_generator's shares it with the drawer, whose iterators draw passes
    tf = pytest.importorskip("tensorflow")
    ref = tf.data.Dataset.range(8).shuffle(8, seed=1)
    orders = [list(ref.as_numpy_iterator()) for _ in range(3)]
    ds = tf.data.Dataset.range(8).shuffle(8, seed=1)
    seeds = compat.tf_shuffle(ds)[2:4]
    drawer = compat.tf_seed_generator(seeds)

    def handle(graph):
        return next(n for n in graph.node if n.op == "Const" and n.attr["dtype"].type == 20)

    graph = compat.tf_graph(ds)
    handle(graph).attr["value"].CopyFrom(handle(compat.tf_graph(drawer)).attr["value"])
    copy = compat.tf_from_graph(graph, ds.element_spec)
    for _ in range(2):
        iter(drawer)  # draws a pass's seeds, reads nothing
    assert list(copy.as_numpy_iterator()) == orders[2]
    assert list(ds.as_numpy_iterator()) == orders[0] != orders[2]  # the user's: its own count


def test_a_shuffle_and_the_ops_over_it_are_rebuilt_as_they_were():
    # tf_replay.py rebuilds Dataset.shuffle with both of its op seeds and each map, prefetch and
    # with_options over it with its own traced function and arguments
    tf = pytest.importorskip("tensorflow")
    tf.random.set_seed(3)  # the seeds TensorFlow derives: (3, a drawn op seed)
    try:
        shuffled = tf.data.Dataset.range(64).shuffle(16)
    finally:
        tf.random.set_seed(None)
    found = compat.tf_shuffle(shuffled)
    assert found is not None, "Dataset.shuffle's _ShuffleDataset attributes are gone"
    source, size, seed, seed2, reshuffles = found
    assert (size, seed, reshuffles) == (16, 3, True) and seed2 > 0
    ds = shuffled.map(lambda x: x * 10, num_parallel_calls=2, deterministic=True).prefetch(
        3).map(lambda x: x + 1).with_options(tf.data.Options())
    rebuilt, ops = compat.tf_shuffled(source, size, (seed, seed2), reshuffles), []
    node = ds
    while compat.tf_shuffle(node) is None:
        node, again = compat.tf_one_to_one(node)
        ops.append(again)
    assert node is shuffled and len(ops) == 4
    for again in reversed(ops):
        rebuilt = again(rebuilt)
    for _ in range(2):  # each iterator reshuffles, as the user's own pipeline does
        assert list(rebuilt.as_numpy_iterator()) == list(ds.as_numpy_iterator())
    assert compat.tf_one_to_one(tf.data.Dataset.range(4).batch(2)) is None
    table = tf.constant([5, 6, 7], tf.int64)  # a map's captured tensor goes with it
    mapped = tf.data.Dataset.range(6).map(lambda x: {"v": x * 10 + table[x % 3]},
                                          num_parallel_calls=2, deterministic=True)
    below, apply = compat.tf_map_carrying(mapped)
    pairs = apply(below.map(lambda x: (x, -x)))
    assert [(e["v"], extra) for e, extra in pairs.as_numpy_iterator()] == [
        (e["v"], -i) for i, e in enumerate(mapped.as_numpy_iterator())]
    assert compat.tf_map_carrying(tf.data.Dataset.range(4).batch(2)) is None
    assert compat.tf_is_tensor_slices(tf.data.Dataset.from_tensor_slices([1, 2]))
    assert not compat.tf_is_tensor_slices(tf.data.Dataset.range(2))
    ids, labels = tf.constant([3, 1, 2]), tf.constant([7])
    zipped = tf.data.Dataset.zip((tf.data.Dataset.from_tensor_slices(ids),
                                  tf.data.Dataset.from_tensors(labels).repeat())).map(
        lambda a, b: a + b[0]).shuffle(4, seed=1)
    assert [t.numpy().tolist() for t in compat.tf_source_tensors(zipped)] == [[3, 1, 2], [7]]
    assert compat.tf_source_tensors(tf.data.Dataset.range(3).map(lambda x: x)) == []
    assert compat.tf_op(tf.data.Dataset.range(2)) == ("range", None)
    assert compat.tf_op(tf.data.Dataset.from_tensor_slices([1, 2])) == ("slices", None)
    assert compat.tf_op(tf.data.Dataset.range(2).take(1)) == ("other", None)
    assert [compat.tf_op(ds)[0] for ds in (
        tf.data.Dataset.range(4).shuffle(4), tf.data.Dataset.range(2).map(lambda x: x),
        tf.data.Dataset.range(2).repeat(2), tf.data.Dataset.range(4).batch(2))] == [
        "shuffle", "one_to_one", "repeat", "batch"]
    assert compat.tf_repeat(tf.data.Dataset.range(2).repeat(3))[1] == 3
    assert compat.tf_repeat(tf.data.Dataset.range(2).repeat())[1] == -1
    assert compat.tf_repeat(tf.data.Dataset.range(2)) is None
    assert compat.tf_shuffle(tf.data.Dataset.range(4)) is None


_SAVES = """
import sys
import warnings
if "jax-first" in sys.argv:
    import jax
import tensorflow as tf
from tensorflow.python.ops import gen_dataset_ops
from jaxload._src import compat
options = tf.data.Options()
options.experimental_symbolic_checkpoint = True
iterator = iter(tf.data.Dataset.range(10).with_options(options))
next(iterator)
level = compat.tf_log_level()
before = level[0]() if level else None
print("fixed", compat.tf_logs_at_fixed_level(), flush=True)
print("raw", flush=True)
gen_dataset_ops.serialize_iterator(iterator._iterator_resource)
print("quiet", flush=True)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(3):
        compat.tf_save_iterator(iterator, ignore_external_state=False)
print("level", before, level[0]() if level else None, flush=True)
print("warned", [str(w.message) for w in caught], flush=True)
"""


def _saves(*args: str, **env: str) -> list[str]:
    """The lines (stdout and stderr in their order) of ``_SAVES`` run in a fresh process."""
    import os
    import subprocess
    import sys

    env = {**{k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}, **env}
    out = subprocess.run([sys.executable, "-c", _SAVES, *args], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    lines = out.stdout.splitlines()
    assert out.returncode == 0, lines[-20:]
    return lines


def _saved(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if "] Saving symbolic checkpoint" in line]


@pytest.mark.cluster
def test_a_symbolic_save_writes_no_log_line_and_leaves_the_log_level_as_it_was():
    # TensorFlow writes "Saving symbolic checkpoint" (C++ INFO) at every symbolic save: jaxload
    # saves after every batch, and would write a line per batch to every process's stderr
    tf = pytest.importorskip("tensorflow")
    lines = _saves()
    raw, quiet = lines.index("raw"), lines.index("quiet")
    warned = next(line for line in lines if line.startswith("warned "))
    if "fixed True" in lines:
        # before TensorFlow 2.21 the level is read once, at import: jaxload warns once how to
        # set it, and the line is gone where it is set (or JAX, imported first, set it)
        assert len(_saved(lines)) == 4, lines
        assert warned.count("Saving symbolic checkpoint") == 1, warned
        assert f"tensorflow {tf.__version__}" in warned and "TF_CPP_MIN_LOG_LEVEL=1" in warned
        for quiet_lines in (_saves(TF_CPP_MIN_LOG_LEVEL="1"), _saves("jax-first")):
            assert not _saved(quiet_lines), quiet_lines
        assert "warned []" in _saves(TF_CPP_MIN_LOG_LEVEL="2")
        return
    assert "fixed False" in lines and "level 0 0" in lines, lines
    assert warned == "warned []", warned
    assert _saved(lines) and all(raw < i < quiet for i in _saved(lines)), (
        "TensorFlow's symbolic save no longer logs, or compat.tf_log_level() no longer "
        f"silences it (absl inside libtensorflow_framework): {lines[raw:]}")
