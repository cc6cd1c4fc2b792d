"""A tf.data pipeline keeps its meaning under jaxload's sharding, or jaxload says why, in real
processes (2 processes x 2 devices: 2 loading groups, ``remainder="pad"``).

For each pipeline a user plausibly writes, one of three outcomes, compared with what the
unsharded pipeline gives in this (the parent) process:

- delivered exactly: every record as often as the unsharded pipeline gives it;
- sharded by elements with a :class:`jaxload.ShardingWarning` naming the op (and delivered
  exactly);
- refused on every process before the first batch, naming the op or what differs.

Every record of the test files is a ``tf.train.Example`` with one int64 ``id``; file ``f`` holds
the ids ``[1000 * f, 1000 * f + size_f)``.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from test_tf_files import write_files

from placement import global_rows, record

SIZES = [3, 3, 3, 3]  # the four files of one source (12 records)
LONG = [6, 6]  # two files of another (12 records)


def parse(serialized):
    import tensorflow as tf

    return tf.io.parse_single_example(serialized, {"id": tf.io.FixedLenFeature([], tf.int64)})


def _files(root: str, name: str) -> list[str]:
    return sorted(str(p) for p in Path(root, name).glob("*.tfrecord"))


def pipeline(shape: str, root: str):
    """The pipeline ``shape`` over the files under ``root`` (built alike in every process and in
    the parent, except where the shape makes the processes differ)."""
    import tensorflow as tf

    files = _files(root, "four")
    records = tf.data.TFRecordDataset(files)
    names = tf.data.Dataset.from_tensor_slices(files)
    if shape == "take":
        return records.take(5).map(parse)
    if shape == "skip":
        return records.skip(5).map(parse)
    if shape == "user-shard":
        return records.shard(2, 1).map(parse)
    if shape == "zip":
        other = tf.data.TFRecordDataset(_files(root, "two")).map(parse)
        return tf.data.Dataset.zip((records.map(parse), other)).map(
            lambda a, b: {"id": a["id"], "other": b["id"]})
    if shape == "cache":
        return records.cache(str(Path(root, "cache", "records"))).map(parse)
    if shape == "plain":
        return names.interleave(tf.data.TFRecordDataset, cycle_length=2).map(parse)
    if shape == "sampled-names":  # no seed: each process draws its own file order
        lists = [tf.data.Dataset.from_tensor_slices(files[:2]),
                 tf.data.Dataset.from_tensor_slices(files[2:])]
        return tf.data.Dataset.sample_from_datasets(lists).interleave(
            tf.data.TFRecordDataset, cycle_length=1).map(parse)
    if shape == "sampled-sources":  # seeded, over sources that read files
        sources = [tf.data.TFRecordDataset(files[:2]), tf.data.TFRecordDataset(files[2:])]
        return tf.data.Dataset.sample_from_datasets(sources, seed=3).map(parse)
    if shape == "unordered-names":
        lists = tf.data.Dataset.from_tensor_slices([files[:2], files[2:]])
        return lists.interleave(tf.data.Dataset.from_tensor_slices, cycle_length=2,
                                num_parallel_calls=2, deterministic=False).interleave(
            tf.data.TFRecordDataset, cycle_length=1).map(parse)
    if shape == "hint-after-shuffle":
        hint = tf.data.experimental.SHARD_HINT
        return tf.data.Dataset.range(64).shuffle(64).shard(hint, hint).map(lambda i: {"id": i})
    if shape == "set-seed":  # the global seed stays set (run_shape clears it)
        tf.random.set_seed(1)
        return tf.data.Dataset.range(48).shuffle(48).map(lambda i: {"id": i})
    if shape == "generator":  # an order the graph cannot show: each process draws its own
        return tf.data.Dataset.from_generator(
            lambda: iter(random.sample(range(48), 48)),
            output_signature=tf.TensorSpec((), tf.int64)).map(lambda i: {"id": i})
    if shape == "generated-names":  # file names listed in another order on each process
        import jax

        turn = jax.process_index() % len(files)  # never the same order on processes 0 and 1
        return tf.data.Dataset.from_generator(
            lambda: iter(files[turn:] + files[:turn]),
            output_signature=tf.TensorSpec((), tf.string)).interleave(
            tf.data.TFRecordDataset, cycle_length=1).map(parse)
    if shape == "cycle-by-process":  # as an unset cycle_length on machines of other CPU counts
        import jax

        return tf.data.Dataset.range(4).interleave(
            lambda i: tf.data.Dataset.range(10 * i, 10 * i + 6),
            cycle_length=1 + jax.process_index()).map(lambda i: {"id": i})
    if shape == "cached-random-first":  # the random map before the shuffle, after a cache
        return tf.data.Dataset.range(40).cache().map(
            lambda i: {"id": i, "flip": tf.random.uniform([])}).shuffle(40, seed=1)
    if shape == "each-twice":  # every element twice in a row: each step's blocks come in pairs
        return tf.data.Dataset.range(20).flat_map(
            lambda i: tf.data.Dataset.from_tensors(i).repeat(2)).map(lambda i: {"id": i})
    if shape == "cached-random-map":  # a random augmentation after a cache and a shuffle
        return tf.data.Dataset.range(40).cache().shuffle(40, seed=1).map(
            lambda i: {"id": i, "flip": tf.random.uniform([])})
    if shape == "hint-cycle-by-process":  # the same, split at the user's SHARD_HINT
        import jax

        hint = tf.data.experimental.SHARD_HINT
        return tf.data.Dataset.range(4).interleave(
            lambda i: tf.data.Dataset.range(10 * i, 10 * i + 6),
            cycle_length=1 + jax.process_index()).shard(hint, hint).map(lambda i: {"id": i})
    if shape == "load-default":
        return tf.data.Dataset.load(str(Path(root, "saved"))).map(lambda i: {"id": i})
    if shape == "load-ordered":
        return tf.data.Dataset.load(str(Path(root, "saved")), reader_func=lambda datasets:
                                    datasets.interleave(lambda d: d, cycle_length=1)).map(
            lambda i: {"id": i})
    if shape in ("ids-shuffled", "ids-per-host", "ids-seeded"):  # ids prepared in Python
        import jax

        p = jax.process_index()
        if shape == "ids-shuffled":  # unseeded: each process draws its own order
            ids = np.random.default_rng().permutation(48)
        elif shape == "ids-per-host":  # a list that differs by host (one more id on process 1)
            ids = np.arange(48 + p)
        else:
            ids = np.random.default_rng(5).permutation(48)
        return tf.data.Dataset.from_tensor_slices(ids).map(lambda i: {"id": i})
    if shape in ("keras-default", "keras-seeded"):  # Keras's image tutorial's first line
        import keras

        images = keras.utils.image_dataset_from_directory(
            str(Path(root, "images")), image_size=(4, 4), batch_size=None,
            seed=None if shape == "keras-default" else 7)
        return images.map(lambda x, y: {"id": tf.cast(x[0, 0, 0], tf.int64) * 10 + tf.cast(
            y, tf.int64)})
    if shape == "names-with-labels":  # a label per file, read with it
        labels = tf.data.Dataset.from_tensor_slices((files, tf.range(len(files), dtype=tf.int64)))
        return labels.interleave(lambda name, label: tf.data.TFRecordDataset(name).map(
            lambda r: {"id": parse(r)["id"] * 10 + label}), cycle_length=2)
    if shape == "names-taken":  # a random subset of the files (seeded: the same on every process)
        return tf.data.Dataset.list_files(str(Path(root, "four", "*.tfrecord")), shuffle=True,
                                          seed=5).take(2).interleave(
            tf.data.TFRecordDataset, cycle_length=1).map(parse)
    if shape == "names-scanned":  # the first 2 files of the shuffled list, numbered by a scan
        numbered = names.shuffle(4, seed=3).scan(
            tf.constant(0, tf.int64), lambda count, name: (count + 1, (count, name)))
        return numbered.filter(lambda i, name: i < 2).map(lambda i, name: name).interleave(
            tf.data.TFRecordDataset, cycle_length=1).map(parse)
    if shape in ("names-numbered", "names-paired"):  # ops that number the shuffled names
        shuffled = names.shuffle(4, seed=3)
        if shape == "names-numbered":  # the first 2 files of the shuffled list
            shuffled = shuffled.enumerate().filter(lambda i, name: i < 2).map(
                lambda i, name: name)
            return shuffled.interleave(tf.data.TFRecordDataset, cycle_length=1).map(parse)
        paired = tf.data.Dataset.zip(shuffled, tf.data.Dataset.range(4))  # a label by position
        return paired.interleave(lambda name, label: tf.data.TFRecordDataset(name).map(
            lambda r: {"id": parse(r)["id"] * 10 + label}), cycle_length=1)
    if shape.startswith(("keras-text", "keras-timeseries", "keras-split")):  # seed=None default
        import keras

        seed = 7 if shape.endswith("seeded") else None
        if shape.startswith("keras-text"):
            texts = keras.utils.text_dataset_from_directory(str(Path(root, "text")),
                                                            batch_size=None, seed=seed)
            return texts.map(lambda x, y: {"id": tf.strings.to_number(x, tf.int64)})
        if shape.startswith("keras-timeseries"):
            windows = keras.utils.timeseries_dataset_from_array(
                np.arange(40), None, sequence_length=3, batch_size=None, shuffle=True, seed=seed)
            return windows.map(lambda x: {"id": x[0]})
        return keras.utils.split_dataset(tf.data.Dataset.range(40).map(lambda i: {"id": i}),
                                         left_size=0.5, shuffle=True, seed=seed)[0]
    if shape in ("csv-default", "csv-seeded"):  # tf.data's CSV helper: split by elements
        rows = tf.data.experimental.make_csv_dataset(
            str(Path(root, "csv", "*.csv")), batch_size=1, num_epochs=1,
            shuffle_seed=7 if shape == "csv-seeded" else None)
        return rows.unbatch().map(lambda row: {"id": row["id"]})
    if shape == "batched-features":  # tf.data's own helper, with its defaults (shuffled)
        return tf.data.experimental.make_batched_features_dataset(
            str(Path(root, "four", "*.tfrecord")), batch_size=2, num_epochs=1,
            features={"id": tf.io.FixedLenFeature([], tf.int64)})
    if shape == "host-disks":  # the same file names on each host's disk, other records in them
        import os

        import jax

        os.chdir(Path(root, f"host{jax.process_index()}"))  # (run_all goes back)
        return tf.data.TFRecordDataset(sorted(str(f) for f in Path().glob("*.tfrecord"))).map(
            parse)
    if shape == "files-per-host-uneven":  # each host lists its own files: 2 here, 1 there
        import jax

        mine = files[0::2][:2] if jax.process_index() == 0 else files[1:2]
        return tf.data.TFRecordDataset(mine).map(parse)
    if shape == "names-repeated":
        return tf.data.Dataset.list_files(str(Path(root, "four", "*.tfrecord")),
                                          shuffle=False).repeat().interleave(
            tf.data.TFRecordDataset, cycle_length=2).map(parse)
    raise ValueError(shape)


def run_shape(shape: str, root: str, steps: int | None = None) -> dict:
    """Worker side: a loader over ``shape`` (global batch 4 or 8, padded), its steps recorded, the
    ShardingWarnings it gave, how long it took to build; or the error and how many batches came
    before it."""
    import warnings

    import jaxload
    from jaxload._src import told

    told.forget()  # each shape's warnings its own, as in a process of its own
    recorded: list = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            start = time.monotonic()
            loader = jaxload.from_tf_data(pipeline(shape, root), jaxload.data_parallel(),
                                          global_batch_size=4 * ROWS_PER_DEVICE.get(shape, 1),
                                          remainder="pad", timeout_s=60,
                                          on_failure="raise", batched=shape in BATCHED)
            built_s = time.monotonic() - start
            for batch in loader:
                recorded.append(record(batch))
                if steps is not None and len(recorded) == steps:
                    break
        except Exception as e:  # the test compares the error every process saw
            return dict(error=f"{type(e).__name__}: {e}", batches=len(recorded))
        finally:
            import tensorflow as tf

            tf.random.set_seed(None)
    return dict(steps=recorded, built_s=built_s, backend=loader.get_state()["backend"],
                warnings=[str(w.message) for w in caught
                          if issubclass(w.category, jaxload.ShardingWarning)])


def run_all(root: str) -> dict:
    import os

    here, out = os.getcwd(), {}
    for shape in SHAPES:
        out[shape] = run_shape(shape, root, steps=3 if shape == "names-repeated" else None)
        os.chdir(here)
    return out


SHAPES = ["take", "skip", "user-shard", "zip", "cache", "plain", "sampled-names",
          "sampled-sources", "unordered-names", "hint-after-shuffle", "set-seed", "generator",
          "generated-names", "cycle-by-process", "load-ordered", "load-default", "names-repeated",
          "ids-shuffled", "ids-per-host", "ids-seeded", "keras-default", "keras-seeded",
          "names-with-labels", "names-taken", "names-numbered", "names-paired",
          "batched-features", "keras-text-default", "keras-text-seeded",
          "keras-timeseries-default", "keras-timeseries-seeded", "keras-split-default",
          "keras-split-seeded", "csv-default", "csv-seeded", "files-per-host-uneven",
          "host-disks", "names-scanned", "hint-cycle-by-process", "cached-random-map",
          "each-twice", "cached-random-first"]
BATCHED = {"batched-features"}  # batched by the pipeline to the local batch size
ROWS_PER_DEVICE = {"each-twice": 2}  # else 1 (a block of one row is never taken for a twin)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> str:
    import tensorflow as tf

    root = tmp_path_factory.mktemp("meaning")
    write_files(root / "four", SIZES)
    write_files(root / "two", LONG)
    write_files(root / "host0", [3, 3])  # the same names as host1's, other records
    write_files(root / "host1", [5, 2])
    (root / "cache").mkdir()
    tf.data.Dataset.range(24).save(str(root / "saved"))
    for name in "ab":
        (root / "images" / name).mkdir(parents=True)
    for i in range(20):  # 20 texts in two classes, each its own id
        (root / "text" / "ab"[i % 2]).mkdir(parents=True, exist_ok=True)
        (root / "text" / "ab"[i % 2] / f"{i}.txt").write_text(str(i))
    (root / "csv").mkdir()
    for f in range(4):  # 4 CSV files of 5 rows
        (root / "csv" / f"{f}.csv").write_text(
            "id,v\n" + "".join(f"{10 * f + r},{r}\n" for r in range(5)))
    for i in range(12):  # 12 images of 4x4 pixels in two classes, each with its own first pixel
        pixels = np.full((4, 4, 3), 10 * i + 5, np.uint8)
        tf.io.write_file(str(root / "images" / "ab"[i % 2] / f"{i}.png"), tf.io.encode_png(pixels))
    return str(root)


@pytest.fixture(scope="module")
def runs(clusters, root) -> dict:
    per_process = clusters.run(run_all, num_processes=2, local_devices=2, args=(root,),
                               timeout_s=280)
    return {shape: [p[shape] for p in per_process] for shape in SHAPES}


def unsharded(shape: str, root: str, keys=("id",)) -> Counter:
    """What the pipeline gives in one process, unsharded."""
    elements = pipeline(shape, root)
    if shape in BATCHED:
        elements = elements.unbatch()
    return Counter(tuple(int(e[k]) for k in keys) for e in elements.as_numpy_iterator())


def delivered(results: list[dict], keys=("id",)) -> Counter:
    """Every real row over all steps (masked-out padding left out), as tuples of ``keys``."""
    rows: Counter = Counter()
    for step in range(len(results[0]["steps"])):
        values = [global_rows(step, f"['{k}']", results) for k in keys]
        mask = global_rows(step, "['mask']", results)
        rows.update(tuple(int(v[r]) for v in values) for r in sorted(mask) if mask[r])
    return rows


def exactly(results: list[dict], expected: Counter, keys=("id",)) -> None:
    assert all("error" not in r for r in results), results
    assert delivered(results, keys) == expected


def warned(results: list[dict], *words: str) -> None:
    for r in results:
        assert len(r["warnings"]) == 1, r["warnings"]
        assert all(w in r["warnings"][0] for w in words), r["warnings"][0]


def refused(results: list[dict], *words: str) -> None:
    for r in results:
        assert "error" in r, r.get("backend")
        assert r["error"].startswith("ValueError"), r["error"]
        assert r["batches"] == 0, r  # before the first batch
        assert all(w in r["error"] for w in words), r["error"]


@pytest.mark.cluster
@pytest.mark.parametrize("shape, op", [("take", "take (TakeDataset"),
                                       ("names-taken", "take (TakeDataset, on the file names"),
                                       ("names-numbered", "zip (or enumerate) (ZipDataset, on "
                                                          "the file names"),
                                       ("names-paired", "zip (or enumerate) (ZipDataset, on the "
                                                        "file names"),
                                       ("skip", "skip (SkipDataset"),
                                       ("user-shard", "pass shard=False"),
                                       ("sampled-sources", "sample_from_datasets")])
def test_an_op_that_would_change_under_file_sharding_falls_back_to_elements(runs, root, shape,
                                                                             op):
    results = runs[shape]
    exactly(results, unsharded(shape, root))
    warned(results, op, {"sampled-sources": "TensorFlow's file sharding cannot split it",
                         "names-taken": "choose the files in Python",
                         "names-numbered": "choose the files in Python",
                         "names-paired": "choose the files in Python"}.get(
        shape, "apply it before the files are read"))
    assert results[0]["backend"] == "tf.data"


@pytest.mark.cluster
def test_files_read_other_than_the_unsharded_names_are_refused_at_the_first_round(runs):
    # no rule on the graph knows this one: TensorFlow's file sharding moves the shuffle of the
    # names below its split, so the scan numbers each group's own names and the filter keeps
    # other files; the names reaching the reads add up to other files than the pipeline's
    refused(runs["names-scanned"], "would read other files than the pipeline reads",
            "shard='elements'")


@pytest.mark.cluster
def test_files_listed_per_host_in_other_numbers_are_refused_not_split_two_ways(runs):
    # 2 files on one host split by files, 1 on the other split by elements: each would keep
    # half of its own, 6 of 9 records lost with no word, were the splits not compared
    refused(runs["files-per-host-uneven"], "how jaxload splits it", '"files" on process [0]',
            '"elements" on process [1]', "pass shard=False")


@pytest.mark.cluster
def test_the_same_file_names_on_each_hosts_disk_with_other_records_are_refused(runs):
    # split by files, each group would read its files from its own disk: part-000 of one
    # host and part-001 of the other, the rest never
    refused(runs["host-disks"], "the sizes of the first files the pipeline names",
            "pass shard=False")


@pytest.mark.cluster
def test_a_zip_of_file_sources_keeps_its_pairs(runs, root):
    results = runs["zip"]
    exactly(results, unsharded("zip", root, ("id", "other")), ("id", "other"))
    warned(results, "zip (or enumerate) (ZipDataset")


@pytest.mark.cluster
def test_a_cache_to_a_file_gets_a_file_per_process_under_file_sharding(runs, root):
    results = runs["cache"]
    exactly(results, unsharded("cache", root))
    assert results[0]["backend"] == "tf.data/files"
    assert all(r["warnings"] == [] for r in results)
    written = sorted(p.name for p in Path(root, "cache").iterdir())
    assert any(".0-of-2.process-0" in name for name in written), written
    assert any(".1-of-2.process-1" in name for name in written), written


@pytest.mark.cluster
def test_file_names_with_a_label_each_are_sharded_by_files_with_their_labels(runs, root):
    results = runs["names-with-labels"]
    exactly(results, unsharded("names-with-labels", root))
    assert results[0]["backend"] == "tf.data/files" and results[0]["warnings"] == []


@pytest.mark.cluster
def test_make_csv_dataset_with_its_unseeded_shuffle_is_refused_naming_the_seed(runs):
    # a CSV reader cannot be split by files: by elements, its shuffle must draw alike
    refused(runs["csv-default"], "without a seed")


@pytest.mark.cluster
def test_make_batched_features_dataset_with_its_defaults_is_sharded_by_files(runs, root):
    # its parse of each batch (ParseExampleDatasetV2) keeps its meaning on each group's records;
    # its unseeded shuffles come after the split, each group shuffling its own
    results = runs["batched-features"]
    exactly(results, unsharded("batched-features", root))
    assert results[0]["backend"] == "tf.data/files" and results[0]["warnings"] == []


@pytest.mark.cluster
def test_a_plain_file_pipeline_is_sharded_by_files_and_delivered_exactly(runs, root):
    results = runs["plain"]
    exactly(results, unsharded("plain", root))
    assert results[0]["backend"] == "tf.data/files" and results[0]["warnings"] == []


@pytest.mark.cluster
@pytest.mark.parametrize("shape, words", [
    ("sampled-names", ["by files", "RandomDataset without a seed"]),
    ("unordered-names", ["by files", "deterministic=False"]),
    ("hint-after-shuffle", ["SHARD_HINT", "ShuffleDatasetV3 without a seed"]),
    ("set-seed", ["by elements", "seeded only by tf.random.set_seed", "seed=..."]),
    ("load-default", ["by elements", "LoadDataset (Dataset.load)", "reader_func"]),
])
def test_an_order_that_can_differ_between_processes_is_refused_from_the_graph(runs, shape,
                                                                              words):
    refused(runs[shape], *words)


@pytest.mark.cluster
@pytest.mark.parametrize("shape, what", [("generated-names", "file names"),
                                         ("cycle-by-process", "interleave cycle lengths"),
                                         ("hint-cycle-by-process", "interleave cycle lengths")])
def test_an_order_the_graph_cannot_show_is_refused_at_the_first_round(runs, shape, what):
    refused(runs[shape], "the processes shard different datasets", what, "process [0]",
            "process [1]", *(["the same file names, in another order", "sort them"]
                             if shape == "generated-names" else []))


@pytest.mark.cluster
def test_a_generator_that_yields_another_order_is_stopped_before_its_first_step(runs):
    refused(runs["generator"], "at step 0 the processes read different elements",
            "process [0]", "process [1]")


@pytest.mark.cluster
@pytest.mark.parametrize("shape", ["ids-shuffled", "ids-per-host", "keras-default",
                                   "keras-text-default", "keras-timeseries-default",
                                   "keras-split-default"])
def test_arrays_that_differ_by_process_are_refused_at_the_first_round(runs, shape):
    refused(runs[shape], "the processes shard different datasets", "the arrays under the "
            "pipeline", "pass seed=", "process [0]", "process [1]")


@pytest.mark.cluster
@pytest.mark.parametrize("shape", ["ids-seeded", "keras-seeded", "keras-text-seeded",
                                   "keras-timeseries-seeded", "keras-split-seeded", "csv-seeded"])
def test_arrays_shuffled_alike_on_every_process_are_delivered_exactly(runs, root, shape):
    results = runs[shape]
    exactly(results, unsharded(shape, root))
    assert results[0]["backend"] == "tf.data"
    if shape == "csv-seeded":  # CSV files: by elements, and said why
        warned(results, "it reads files through CSVDatasetV2")
    else:
        assert results[0]["warnings"] == []


@pytest.mark.cluster
def test_a_random_map_after_a_cache_and_a_shuffle_is_delivered_exactly(runs, root):
    # the cache hides the order from the graph, so the first elements are compared: under the
    # last map, whose random draws differ by process on the same rows (it was refused)
    exactly(runs["cached-random-map"], unsharded("cached-random-map", root))


@pytest.mark.cluster
def test_a_random_map_before_the_split_is_named_where_the_first_elements_differ(runs):
    refused(runs["cached-random-first"], "the hash of the first elements",
            "read after RandomUniform without a seed", "give it a seed")


@pytest.mark.cluster
def test_a_stream_with_each_element_twice_is_not_taken_for_duplicate_loading(runs, root):
    # split by elements, every group's block of a step equals another's: the stream proof shows
    # that every process read the same elements, so the first step's check compares replicas
    # only (it raised DuplicationError, "the processes probably loaded the same data")
    exactly(runs["each-twice"], unsharded("each-twice", root))


@pytest.mark.cluster
def test_dataset_load_in_order_is_sharded_by_elements_with_a_warning(runs, root):
    results = runs["load-ordered"]
    exactly(results, unsharded("load-ordered", root))
    warned(results, "LoadDataset", "cannot split")


@pytest.mark.cluster
def test_repeated_file_names_are_counted_once_and_built_quickly(runs):
    results = runs["names-repeated"]
    assert all("error" not in r for r in results), results
    assert all(r["built_s"] < 5 for r in results), [r["built_s"] for r in results]
    assert results[0]["backend"] == "tf.data/files"
    assert all(len(r["steps"]) == 3 for r in results)


def test_file_names_that_differ_by_process_name_the_per_host_fix():
    # each host lists its own files (a local disk): jaxload would split them again; the
    # refusal names shard=False and dataset_fn, not only "pass the same dataset"
    from jaxload._src.same_dataset import differences

    def described(group: int, names: str) -> dict:
        return {"same": {"file names": names}, "group": group, "groups": 2, "files": [names, names]}

    text = differences({0: described(0, "6 from part-00"), 1: described(1, "6 from part-01")})
    assert "file names" in text and "pass shard=False, or a dataset_fn" in text
    rows = {p: {"same": {"source rows": f"{p}"}, "group": p, "groups": 2} for p in range(2)}
    assert "pass shard=False, or a dataset_fn" in differences(rows)
    lengths = {p: {"same": {"length": 60 + p}, "group": p, "groups": 2} for p in range(2)}
    assert "shard=False, or a dataset_fn" not in differences(lengths)
