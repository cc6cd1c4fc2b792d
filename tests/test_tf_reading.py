"""A tf.data pipeline's graph is serialized once per loader build and never per pass: real
2-process runs (the splits by files happen only with several loading groups) over rows in
memory, files split by files (names shuffled, or a shuffle replayed over each group's files),
a generator, a shard hint and a cache file. The same builds, followed through the calls that
are given the user's dataset, stay in few modules and rarely climb back up."""

from __future__ import annotations

import functools
import sys

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
            calls = CallsGiven(ds)
            sys.setprofile(calls.see)
            try:
                loader = jaxload.from_tf_data(ds, jaxload.data_parallel(), global_batch_size=8,
                                              shard="auto" if name != "memory" else "elements")
            finally:
                sys.setprofile(None)
            counts.append(sum(op in graph for graph in counted))
            for _ in range(2):
                del counted[:]
                assert sum(1 for _ in loader) > 0
                counts.append(sum(op in graph for graph in counted))
            del counted[:]
            loader.get_state()
            counts.append(sum(op in graph for graph in counted))
            out[name] = counts, (calls.modules, calls.calls)
    finally:
        tf.data.Dataset._as_serialized_graph = original
    return out


class CallsGiven:
    """A profile function that follows the user's dataset through jaxload: the calls into
    jaxload given ``ds`` itself as an argument, and their returns. ``modules``: the module
    the dataset is in after each call and each return, in order; ``calls``: ``(caller's
    module, callee's module)`` of each such call (the caller: the innermost such call under
    way, or None)."""

    def __init__(self, ds: object):
        self.ds, self.modules, self.calls = ds, [], []
        self._open: list[object] = []  # the frames of the calls under way, innermost last

    def see(self, frame, event, arg) -> None:
        if event == "return" and self._open and frame is self._open[-1]:
            self._open.pop()
            if self._open:
                self.modules.append(self._open[-1].f_globals["__name__"])
            return
        module = frame.f_globals.get("__name__") or ""
        if event != "call" or not module.startswith("jaxload"):
            return
        code = frame.f_code
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if any(frame.f_locals.get(name) is self.ds for name in names):
            caller = self._open[-1].f_globals["__name__"] if self._open else None
            self.calls.append((caller, module))
            self.modules.append(module)
            self._open.append(frame)


@functools.cache
def _imported() -> dict[str, set[str]]:
    """Each jaxload module's imports of jaxload modules (test_architecture's graph)."""
    from test_architecture import import_graph, package_modules

    return import_graph(package_modules())


def _imported_by(module: str, importer: str) -> bool:
    return any(module == m or module.startswith(f"{m}.")
               for m in _imported().get(importer, set()) - {"jaxload", "jaxload._src"})


def walk(modules: list[str], calls: list[tuple[str | None, str]]
         ) -> tuple[list[str], list[tuple[str, str]]]:
    """The stays (each entry into a module, a return to one already left counting again) and
    the climbs (calls back up: into a module that imports the caller's) of a walk.

    Example:
      >>> tf = "jaxload._src.pipelines.tf."
      >>> walk([tf + "dataset", tf + "read", tf + "read", tf + "dataset"],
      ...      [(None, tf + "dataset"), (tf + "dataset", tf + "read")])
      (['jaxload._src.pipelines.tf.dataset', 'jaxload._src.pipelines.tf.read', \
'jaxload._src.pipelines.tf.dataset'], [])
    """
    stays = [m for i, m in enumerate(modules) if not i or modules[i - 1] != m]
    climbs = [(caller, callee) for caller, callee in calls
              if caller is not None and caller != callee and _imported_by(caller, callee)]
    return stays, climbs


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
    for process, result in enumerate(results):
        counts = {name: counted for name, (counted, _) in result.items()}
        assert counts == {name: [1, 0, 0, 0] for name in counts}, (process, counts)
        for name, (_, (modules, calls)) in result.items():  # from_tf_data, following ds
            stays, climbs = walk(modules, calls)
            assert 2 <= len(stays) <= 30 and not climbs, (process, name, stays, climbs)
    assert sorted(results[0]) == ["cache file", "files", "files replayed", "generator", "hint",
                                  "memory"]


def test_the_walk_counts_returns_as_stays_and_calls_back_up_as_climbs():
    tf = "jaxload._src.pipelines.tf."
    modules = [tf + "dataset", tf + "replay", "jaxload._src.compat.tf_ops", tf + "replay",
               tf + "dataset"]
    down = [(None, tf + "dataset"), (tf + "dataset", tf + "replay"),
            (tf + "replay", "jaxload._src.compat.tf_ops")]
    assert walk(modules, down) == (modules, [])
    up = [("jaxload._src.compat.tf_ops", tf + "replay")]  # replay imports compat
    assert walk(modules, up)[1] == up


def test_the_names_read_once_are_those_read_one_by_one(tmp_path):
    """A list of files is read once where the shape allows (names_at_once): its count, hash,
    and the multisets meant and read by each group equal those of three separate readings."""
    import dataclasses

    import tensorflow as tf

    from jaxload._src import compat
    from jaxload._src.pipelines.tf import multisets
    from jaxload._src.pipelines.tf import names as tf_names

    for f in range(9):
        with tf.io.TFRecordWriter(str(tmp_path / f"{f}.tfrecord")) as writer:
            for _ in range(3 + f):
                writer.write(b"x")
    pattern = str(tmp_path / "*.tfrecord")
    files = sorted(tf.io.gfile.glob(pattern))
    read = tf.data.TFRecordDataset
    cases = {
        "in order": (True, tf.data.Dataset.list_files(pattern, shuffle=False).interleave(read)),
        "shuffled": (True, tf.data.Dataset.list_files(pattern, seed=4).interleave(
            read, cycle_length=2).prefetch(2)),
        "unseeded": (True, tf.data.Dataset.list_files(pattern).interleave(read)),
        "with labels": (True, tf.data.Dataset.from_tensor_slices((files, list(range(9)))).interleave(
            lambda f, label: read(f).map(lambda r: (r, label)))),
        "in pairs": (True, tf.data.Dataset.from_tensor_slices(files).batch(2).interleave(read)),
        "past one by one": (True, tf.data.Dataset.from_tensor_slices(
            [files[i % 9] for i in range(300)]).interleave(read, cycle_length=4)),
        "a subset": (False, tf.data.Dataset.list_files(pattern, seed=5).take(4).interleave(read)),
    }
    policy = tf.data.experimental.AutoShardPolicy.FILE
    for name, (at_once, ds) in cases.items():
        graph = compat.tf_graph(ds)
        for k in range(3):
            rewritten = compat.tf_shard_graph(graph, 3, k, policy)
            once = multisets.names_at_once(rewritten, graph, 3, k)
            assert (once is not None) == at_once, name
            if once is not None:
                apart = dataclasses.replace(tf_names.file_names(rewritten),
                                            read=multisets.names_read(rewritten),
                                            meant=multisets.names_read(graph))
                assert once == apart, (name, k, once, apart)


def test_names_past_the_limit_are_read_apart(tmp_path, monkeypatch):
    """The limit counts names, as the separate readings do: elements of two names each, more
    names than the limit but fewer elements, are not read at once (whose multisets would be
    known where the separate readings give none)."""
    import tensorflow as tf

    from jaxload._src import compat
    from jaxload._src.pipelines.tf import multisets
    from jaxload._src.pipelines.tf import names as tf_names

    for module in (multisets, tf_names):
        monkeypatch.setattr(module, "LIMIT", 200)
    files = [str(tmp_path / f"{i}.tfrecord") for i in range(300)]
    pairs = tf.data.Dataset.from_tensor_slices(files).batch(2).interleave(tf.data.TFRecordDataset)
    graph = compat.tf_graph(pairs)
    rewritten = compat.tf_shard_graph(graph, 2, 0, tf.data.experimental.AutoShardPolicy.FILE)
    assert multisets.names_read(graph) is None  # 300 names: past the limit
    assert multisets.names_at_once(rewritten, graph, 2, 0) is None
    under = tf.data.Dataset.from_tensor_slices(files[:180]).batch(2).interleave(
        tf.data.TFRecordDataset)  # 180 names: within it
    graph = compat.tf_graph(under)
    rewritten = compat.tf_shard_graph(graph, 2, 0, tf.data.experimental.AutoShardPolicy.FILE)
    once = multisets.names_at_once(rewritten, graph, 2, 0)
    assert once is not None and once.meant == multisets.names_read(graph)
