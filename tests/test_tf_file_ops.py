"""Which ops keep file sharding, read from the graph in one process against simulated plans of 4
loading groups (the multi-process runs of the same shapes are in test_tf_meaning.py): the
allow-list keeps file sharding, every other op after the file reads falls back to elements with a
warning naming it, or is refused with shard="files"."""

from __future__ import annotations

import warnings

import pytest
from test_tf_files import write_files

import jaxload
from jaxload._src import told
from jaxload._src.pipelines.tf.dataset import TfDataset

tf = pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("ops")
    write_files(root, [4] * 8)
    return sorted(str(p) for p in root.glob("*.tfrecord"))


@pytest.fixture(autouse=True)
def warned_afresh(monkeypatch):
    """A fallback is told once per process: each test here sees its own warning, whatever ran
    before it in this process."""
    monkeypatch.setattr(told, "_TOLD", set())


def plan():
    return jaxload.data_parallel(devices=jaxload.simulated_devices(4, 2)).plan(
        global_batch_size=16, process_index=1)


def split(ds, shard="auto"):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pipeline = TfDataset(ds.map(lambda r: {"n": tf.strings.length(r)}), plan(),
                             global_batch_size=16, shard=shard, batched=False, remainder="drop")
    return pipeline, [str(w.message) for w in caught
                      if issubclass(w.category, jaxload.ShardingWarning)]


KEPT = {
    "map-filter": lambda r: r.map(tf.strings.upper).filter(lambda x: tf.strings.length(x) > 0),
    "shuffle-repeat": lambda r: r.shuffle(8, seed=1).repeat(2),
    "batch-unbatch": lambda r: r.batch(3).unbatch(),
    "prefetch": lambda r: r.prefetch(2),
    "cache-in-memory": lambda r: r.cache(),
}
BLOCKED = {
    "take": (lambda r: r.take(5), "take (TakeDataset"),
    "skip": (lambda r: r.skip(5), "skip (SkipDataset"),
    "own shard": (lambda r: r.shard(4, 1), "if it splits the data over processes already, pass "
                                           "shard=False"),
    "enumerate": (lambda r: r.enumerate().map(lambda i, x: x), "zip (or enumerate)"),
    "window": (lambda r: r.window(2).flat_map(lambda w: w), "window (WindowDataset"),
    "unique": (lambda r: r.unique(), "unique (UniqueDataset"),
    "ignore_errors": (lambda r: r.ignore_errors(), "ignore_errors (IgnoreErrorsDataset"),
    "an op jaxload does not know": (lambda r: r.apply(tf.data.experimental.assert_cardinality(
        32)), "assert_cardinality"),
}


@pytest.mark.parametrize("name", sorted(KEPT))
def test_ops_that_keep_their_meaning_keep_file_sharding(files, name):
    pipeline, warned = split(KEPT[name](tf.data.TFRecordDataset(files)))
    assert pipeline.sharding.mode == "files" and pipeline.sharding.files == 8
    assert warned == []


@pytest.mark.parametrize("name", sorted(BLOCKED))
def test_other_ops_after_the_file_reads_fall_back_to_elements_or_are_refused(files, name):
    make, words = BLOCKED[name]
    pipeline, warned = split(make(tf.data.TFRecordDataset(files)))
    assert pipeline.sharding.mode == "elements"
    assert len(warned) == 1 and words in warned[0], warned
    assert "Not by files" in warned[0] and "shard='elements' says" in warned[0]
    with pytest.raises(ValueError, match="shard='files' cannot shard this pipeline by files: "
                                         r".*apply it before the files are read"):
        split(make(tf.data.TFRecordDataset(files)), shard="files")


def test_a_batch_that_drops_its_remainder_falls_back_to_elements(files):
    dropping = tf.data.TFRecordDataset(files).batch(3, drop_remainder=True).unbatch()
    pipeline, warned = split(dropping)
    assert pipeline.sharding.mode == "elements" and len(warned) == 1, warned
    assert "batch(..., drop_remainder=True)" in warned[0]
    assert "each loading group would drop the last partial batch of its own" in warned[0]
    with pytest.raises(ValueError, match="To keep file sharding, batch with drop_remainder=False"):
        split(dropping, shard="files")


def test_ops_on_the_file_names_stay_as_written(files):
    names = tf.data.Dataset.from_tensor_slices(files).take(4)
    pipeline, warned = split(names.interleave(tf.data.TFRecordDataset, cycle_length=2))
    assert pipeline.sharding.mode == "files" and pipeline.sharding.files == 4 and warned == []


def added_up(make) -> tuple[str, str]:
    """The names the unsharded pipeline's reads are given, and the four groups' summed."""
    from jaxload._src import compat
    from jaxload._src.pipelines.tf.multisets import names_read
    from jaxload._src.pipelines.tf.split import files_of_group

    shares = [names_read(compat.tf_graph(files_of_group(make(), 4, k))) for k in range(4)]
    count = sum(int(share.split(":")[0]) for share in shares)
    total = sum(int(share.split(":")[1], 16) for share in shares) % 2**64
    return names_read(compat.tf_graph(make())), f"{count}:{total:016x}"


def _read(names):
    return names.interleave(tf.data.TFRecordDataset, cycle_length=1)


def _read_labelled(pairs):
    return pairs.interleave(lambda name, label: tf.data.TFRecordDataset(name).map(
        lambda r: (r, label)), cycle_length=1)


NAMES = {  # ops on the file names before they are read, and whether the split keeps them
    "take": (lambda n: _read(n.take(5)), True),
    "enumerate-filter": (lambda n: _read(n.enumerate().filter(lambda i, f: i % 3 > 0).map(
        lambda i, f: f)), True),
    "batched names": (lambda n: _read(n.batch(2)), True),
    # other pairs of names under the split, but every file read once: no difference
    "shuffled, then batched": (lambda n: _read(n.shuffle(8, seed=2).batch(2)), True),
    "a label each": (lambda n: _read_labelled(tf.data.Dataset.zip(n, tf.data.Dataset.range(8))),
                     True),
    "shuffled, numbered, filtered": (lambda n: _read(n.shuffle(8, seed=3).enumerate().filter(
        lambda i, f: i < 4).map(lambda i, f: f)), False),
    "shuffled, a label by position": (lambda n: _read_labelled(tf.data.Dataset.zip(
        n.shuffle(8, seed=3), tf.data.Dataset.range(8))), False),
}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_the_groups_names_add_up_to_the_pipelines_where_the_split_keeps_them(files, name):
    # the proof of the first round (same_dataset adds the groups' up), on the names alone
    make, kept = NAMES[name]
    meant, groups = added_up(lambda: make(tf.data.Dataset.from_tensor_slices(files)))
    assert (meant == groups) is kept, (meant, groups)


def test_a_cache_to_a_file_is_renamed_for_each_group_and_process(files, tmp_path, caplog):
    caplog.set_level("INFO", logger="jaxload")
    path = str(tmp_path / "records")
    pipeline, warned = split(tf.data.TFRecordDataset(files).cache(path))
    assert pipeline.sharding.mode == "files" and warned == []
    assert f"'{path}.1-of-4.process-1'" in caplog.text
    assert sum(1 for _ in pipeline.batches(None)) == 2  # its 8 of 32 records, 4 a batch
    assert (tmp_path / "records.1-of-4.process-1.index").exists()


def test_a_seed_only_from_set_seed_is_refused_where_the_order_matters():
    tf.random.set_seed(5)
    try:
        ds = tf.data.Dataset.range(64).shuffle(64).map(lambda i: {"x": i})
        with pytest.raises(ValueError, match="ShuffleDatasetV3 seeded only by "
                                             r"tf.random.set_seed .*give it seed=\.\.\."):
            TfDataset(ds, plan(), global_batch_size=16, shard="auto", batched=False,
                      remainder="drop")
        seeded = tf.data.Dataset.range(64).shuffle(64, seed=3).map(lambda i: {"x": i})
        TfDataset(seeded, plan(), global_batch_size=16, shard="auto", batched=False,
                  remainder="drop")  # its own seed: the same on every process
    finally:
        tf.random.set_seed(None)
