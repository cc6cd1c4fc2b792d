"""tf.data pipelines that read files, in real multi-process runs: each loading group reads and
parses only its own files (counted inside the pipeline), a resume on the same topology parses
only what is left, and no order difference between processes duplicates or loses a record.

Every record of the test files is a tf.train.Example with one int64 ``id``; file ``f`` holds the
ids ``[1000 * f, 1000 * f + size_f)``. A ``py_function`` in the pipeline counts the records each
process parses (the pipeline says its state may be ignored, so its iterator is still saved).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from placement import global_rows, make_layout, outcome, record

PARSED = [0]


def write_files(directory: Path, sizes: list[int]) -> str:
    """TFRecord files of the given sizes; returns their glob pattern."""
    import tensorflow as tf

    directory.mkdir(parents=True, exist_ok=True)
    for f, size in enumerate(sizes):
        with tf.io.TFRecordWriter(str(directory / f"part-{f:03d}.tfrecord")) as writer:
            for i in range(1000 * f, 1000 * f + size):
                feature = tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))
                example = tf.train.Example(features=tf.train.Features(feature={"id": feature}))
                writer.write(example.SerializeToString())
    return str(directory / "*.tfrecord")


def all_ids(sizes: list[int]) -> list[int]:
    return [i for f, size in enumerate(sizes) for i in range(1000 * f, 1000 * f + size)]


def parsing(pattern: str, list_shuffle: bool | int = False, ctx=None, parallel: bool = True):
    """list_files -> interleave(TFRecordDataset) -> count -> parse: the usual file pipeline.
    ``list_shuffle``: False, True (list_files' default: unseeded) or a seed; ``ctx``: a
    dataset_fn's context, whose share of the files it reads. Without ``parallel`` every op
    restores from a symbolic checkpoint (positions only, no buffers), which the pipeline asks
    for: its counter is a stateful op, whose pipelines jaxload checkpoints with their buffers
    by default."""
    import tensorflow as tf

    def count(serialized):
        PARSED[0] += int(np.size(serialized.numpy()))
        return serialized

    def parse(serialized):
        serialized = tf.py_function(count, [serialized], tf.string)
        serialized.set_shape([])
        return tf.io.parse_single_example(serialized, {"id": tf.io.FixedLenFeature([], tf.int64)})

    files = tf.data.Dataset.list_files(
        pattern, shuffle=list_shuffle is not False,
        seed=None if isinstance(list_shuffle, bool) else list_shuffle)
    if ctx is not None:
        files = files.shard(ctx.shard_count, ctx.shard_index)
    ds = files.interleave(tf.data.TFRecordDataset, cycle_length=4,
                          num_parallel_calls=tf.data.AUTOTUNE if parallel else None).map(parse)
    options = tf.data.Options()
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    options.experimental_symbolic_checkpoint = True
    return ds.with_options(options)


def run_loader(pattern: str, layout_name: str, gbs: int, *, remainder: str = "drop",
               shard="auto", list_shuffle: bool | int = False, state=None,
               steps: int | None = None, dataset_fn: bool = False, parallel: bool = True
               ) -> dict:
    """Worker side: a loader over the file pipeline, its steps recorded; what it parsed."""
    import warnings

    import jaxload

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = (lambda ctx: parsing(pattern, list_shuffle, ctx)) if dataset_fn else (
            parsing(pattern, list_shuffle, parallel=parallel))
        loader = jaxload.from_tf_data(ds, make_layout(layout_name), global_batch_size=gbs,
                                      remainder=remainder, **({} if dataset_fn else
                                                              {"shard": shard}))
    if state is not None:
        loader.set_state(state, head_start=False)
    PARSED[0] = 0
    batches, recorded = iter(loader), []
    for batch in batches:
        recorded.append(record(batch))
        if steps is not None and len(recorded) == steps:
            break
    state = loader.get_state()
    batches.close()
    import time
    time.sleep(0.5)  # the read-ahead is bounded: what it parsed beyond the last step is counted
    return dict(parsed=PARSED[0], steps=recorded, state=state,
                warnings=[str(w.message) for w in caught
                          if issubclass(w.category, jaxload.ShardingWarning)])


def delivered(results: list[dict]) -> Counter:
    """Every real row's id over all steps (replicas agreeing, masked-out rows left out)."""
    ids: Counter = Counter()
    for step in range(len(results[0]["steps"])):
        rows = global_rows(step, "['id']", results)
        masks = (global_rows(step, "['mask']", results) if "['mask']" in results[0]["steps"][step]
                 else dict.fromkeys(rows, True))
        ids.update(int(rows[r]) for r in sorted(rows) if masks[r])
    return ids


SIXTEEN = [128] * 16
UNEVEN = [100, 37, 64, 3, 90, 11]


def scenarios_4x2(pattern: str, two_files: str, state_2x4: dict) -> list:
    return [
        outcome(lambda: run_loader(pattern, "data_parallel", 32, list_shuffle=True)),
        outcome(lambda: run_loader(pattern, "across_processes", 32)),
        outcome(lambda: run_loader(two_files, "data_parallel", 32)),
        outcome(lambda: run_loader(two_files, "data_parallel", 32, shard="files")),
        outcome(lambda: run_loader(pattern, "across_processes", 32, list_shuffle=True)),
        outcome(lambda: run_loader(pattern, "data_parallel", 32, shard="elements",
                                   list_shuffle=True)),
        outcome(lambda: run_loader(pattern, "data_parallel", 64, state=state_2x4)),
        outcome(lambda: run_loader(pattern, "data_parallel", 32, state=process_0s(
            run_loader(pattern, "data_parallel", 32, steps=3)["state"]))),
    ]


def process_0s(state: dict) -> dict:
    """Process 0's ``state`` on every process (through the coordinator's key-value store)."""
    import json

    from jaxload._src import compat

    client = compat.distributed_client()
    if client is None or __import__("jax").process_index() == 0:
        if client is not None:
            client.key_value_set("test/process_0s_state", json.dumps(state))
        return state
    return json.loads(client.blocking_key_value_get("test/process_0s_state", 60_000))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("files")
    return dict(sixteen=write_files(root / "sixteen", SIXTEEN),
                two=write_files(root / "two", [64, 64]),
                uneven=write_files(root / "uneven", UNEVEN))


@pytest.fixture(scope="module")
def runs_4x2(clusters, files, runs_2x4):
    state = runs_2x4[1][0]["state"]  # process 0's, after 24 steps at 2x4
    per_process = clusters.run(scenarios_4x2, num_processes=4, local_devices=2,
                               args=(files["sixteen"], files["two"], state), timeout_s=280)
    return [[p[i][0] for p in per_process] for i in range(len(per_process[0]))]


@pytest.mark.cluster
def test_each_loading_group_parses_only_its_own_files(runs_4x2):
    # 4 processes, data_parallel: 4 groups of 4 files; list_files' default (unseeded) shuffle
    # shuffles each group's own files
    results = runs_4x2[0]
    assert [r["parsed"] for r in results] == [512] * 4
    assert delivered(results) == Counter(all_ids(SIXTEEN))
    assert results[0]["state"]["backend"] == "tf.data/files"
    # model replicas across processes: 2 groups of 2 processes, each group's 8 files
    results = runs_4x2[1]
    assert [r["parsed"] for r in results] == [1024] * 4
    assert delivered(results) == Counter(all_ids(SIXTEEN))


@pytest.mark.cluster
def test_fewer_files_than_groups_fall_back_to_elements_with_a_warning(runs_4x2):
    results = runs_4x2[2]
    # every process reads both files; the run-time check of the order reads the first 16
    # elements again only where the graph cannot show the order: here, where cycle_length=4 is
    # this machine's CPU count (what TensorFlow writes for an unset one)
    again = 16 if len(os.sched_getaffinity(0)) == 4 else 0
    assert all(r["parsed"] == 128 + again for r in results)
    assert delivered(results) == Counter(all_ids([64, 64]))
    for r in results:
        assert len(r["warnings"]) == 1
        assert "reads 2 files for 4 loading groups" in r["warnings"][0]
        assert "reads and parses all of its records and keeps 1/4" in r["warnings"][0]
    refused = runs_4x2[3]
    assert all(isinstance(r, str) and r.startswith("ValueError: shard='files' cannot shard")
               and "2 files for 4 loading groups" in r for r in refused), refused


@pytest.mark.cluster
def test_a_state_by_files_on_another_topology_is_refused_on_every_process(runs_4x2):
    refused = runs_4x2[6]
    for r in refused:
        assert isinstance(r, str) and r.startswith("ValueError: the state was taken under another "
                                                   "plan"), refused
        assert "shard_count=2 in the state, shard_count=4 in this loader's plan" in r
        assert "Resume on the same topology, restart the pass" in r
        assert "shard='elements'" in r


@pytest.mark.cluster
def test_a_state_by_files_of_another_loading_group_is_refused_on_every_process(runs_4x2):
    # process 0's state continues its own group only: the three other groups' processes
    # refuse it, and process 0 (which alone could continue) raises too instead of waiting
    refused = runs_4x2[7]
    assert refused[0].startswith("ValueError: set_state was refused on processes [1-3], so no "
                                 "process resumes from this state (process 1: the state was "
                                 "taken under another plan"), refused
    for p, r in enumerate(refused[1:], 1):
        assert r.startswith("ValueError: the state was taken under another plan: shard_index=0 "
                            f"in the state, shard_index={p} in this loader's plan"), refused
        assert "sharded by files, each loading group reads its own files" in r


@pytest.mark.cluster
def test_a_varying_order_is_refused_on_every_process_before_any_data(runs_4x2):
    # one loading group spans two processes, whose unseeded file shuffles would differ
    across = runs_4x2[4]
    assert all(isinstance(r, str) and r.startswith("ValueError: processes [") and
               "ShuffleDatasetV3 without a seed" in r for r in across), across
    # sharded by elements, each process would keep 1 element in 4 of its own order
    elements = runs_4x2[5]
    assert all(isinstance(r, str) and "would deliver some records twice and others never" in r
               and "list_files with its default shuffle=True" in r for r in elements), elements


def scenarios_2x4(pattern: str, uneven: str) -> list:
    whole = run_loader(pattern, "data_parallel", 64)
    first = run_loader(pattern, "data_parallel", 64, steps=24, parallel=False)
    resumed = run_loader(pattern, "data_parallel", 64, state=first["state"], parallel=False)
    function = run_loader(pattern, "data_parallel", 64, dataset_fn=True, steps=5)
    function_resumed = run_loader(pattern, "data_parallel", 64, dataset_fn=True,
                                  state=function["state"])
    return [whole, first, resumed, function, function_resumed,
            run_loader(uneven, "data_parallel", 16, remainder="pad"),
            run_loader(uneven, "data_parallel", 16, remainder="drop"),
            run_loader(uneven, "in_process", 16, remainder="pad", list_shuffle=7)]


@pytest.fixture(scope="module")
def runs_2x4(clusters, files):
    per_process = clusters.run(scenarios_2x4, num_processes=2, local_devices=4,
                               args=(files["sixteen"], files["uneven"]), timeout_s=280)
    return [[p[i] for p in per_process] for i in range(len(per_process[0]))]


@pytest.mark.cluster
def test_a_resume_parses_only_what_is_left(runs_2x4):
    whole, first, resumed = runs_2x4[:3]
    assert [r["parsed"] for r in whole] == [1024] * 2
    # 24 of 32 steps, then the other 8: each process parses its 32-row batches from its last
    # save on (the batches after it again), nothing before it (a symbolic checkpoint:
    # positions only, so what the first run read ahead is read again)
    assert [len(r["steps"]) for r in first] == [24] * 2
    assert [len(r["steps"]) for r in resumed] == [8] * 2
    saved = [r["state"]["position"]["saved"]["batches"] for r in first]
    assert [r["state"]["position"]["batches"] for r in first] == [24] * 2
    assert all(1 <= s <= 24 for s in saved)
    assert [r["parsed"] for r in resumed] == [32 * (32 - s) for s in saved]
    both = delivered(first) + delivered(resumed)
    assert both == Counter(all_ids(SIXTEEN)) == delivered(whole)
    for step in range(8):  # the same batches as without the interruption
        assert global_rows(24 + step, "['id']", whole).keys() == global_rows(
            step, "['id']", resumed).keys()
        assert all(np.array_equal(a, b) for a, b in zip(
            global_rows(24 + step, "['id']", whole).values(),
            global_rows(step, "['id']", resumed).values(), strict=True))


@pytest.mark.cluster
def test_dataset_fn_builds_each_groups_share_and_resumes(runs_2x4):
    function, function_resumed = runs_2x4[3:5]
    assert [len(r["steps"]) for r in function] == [5] * 2
    assert delivered(function) + delivered(function_resumed) == Counter(all_ids(SIXTEEN))
    # each process reads its 8 files, 1024 records, 5 x 32 of them before the state: the
    # resume parses at most those from the state's last save on (less where the checkpoint of
    # the parallel interleave holds elements its buffers had parsed), never one before the save
    saved = [r["state"]["position"]["saved"]["batches"] for r in function]
    assert all(1 <= s <= 5 for s in saved)
    assert all(r["parsed"] <= 1024 - s * 32 for r, s in zip(function_resumed, saved, strict=True))


@pytest.mark.cluster
@pytest.mark.parametrize("case", [5, 6, 7])
def test_files_of_different_sizes(runs_2x4, case):
    results = runs_2x4[case]
    got, expected = delivered(results), Counter(all_ids(UNEVEN))
    if "['mask']" in results[0]["steps"][0]:
        assert got == expected  # pad: every record exactly once
        # files 0, 2, 4 to group 0 and 1, 3, 5 to group 1: each parses its own
        assert [r["parsed"] for r in results] == [100 + 64 + 90, 37 + 3 + 11]
    else:  # drop: every record at most once; the epoch ends when group 1 (51 rows) runs out
        assert not got - expected and max(got.values()) == 1
        assert sum(got.values()) == len(results[0]["steps"]) * 16 == 6 * 16


def test_the_share_carries_no_options_node_of_the_rewrite(tmp_path):
    """TensorFlow's FILE rewrite leaves an options node (the auto-shard policy) on top of the
    user's pipeline, below jaxload's batch, where it cost tf.data about 10 us per element: the
    share is rebuilt without it, keeps the user's own options and reads the same records."""
    import tensorflow as tf

    import jaxload
    from jaxload._src import compat
    from jaxload._src.pipelines.tf.split import split

    pattern = write_files(tmp_path, [3, 3, 3, 3])
    options = tf.data.Options()
    options.threading.private_threadpool_size = 3
    ds = tf.data.Dataset.list_files(pattern, shuffle=False).interleave(
        tf.data.TFRecordDataset, cycle_length=2).with_options(options).map(
        lambda s: tf.io.parse_single_example(s, {"id": tf.io.FixedLenFeature([], tf.int64)}))
    plan = jaxload.data_parallel(devices=jaxload.simulated_devices(2, 4)).plan(
        global_batch_size=8, process_index=1)
    share, sharding = split(ds, plan, "auto")
    assert sharding.mode == "files"
    graph = compat.tf_graph(share)
    (retval,) = [n for n in graph.node if n.op == "_Retval"]
    top = {n.name: n for n in graph.node}[retval.input[0].split(":")[0]]
    assert top.op in ("MapDataset", "ParallelMapDatasetV2"), top.op  # the user's last op
    assert [n.op for n in graph.node].count("OptionsDataset") == 1  # the user's
    assert share.options().threading.private_threadpool_size == 3
    assert sorted(int(e["id"]) for e in share) == [1000, 1001, 1002, 3000, 3001, 3002]


def shuffled_names(pattern: str):
    """A names shuffle that reshuffles each pass (list_files' own, seeded), a record shuffle, a
    filter: sharded by files; its checkpoint holds the record shuffle's buffer."""
    import tensorflow as tf

    return tf.data.Dataset.list_files(pattern, shuffle=True, seed=5).interleave(
        tf.data.TFRecordDataset, cycle_length=2).map(
        lambda s: tf.io.parse_single_example(s, {"id": tf.io.FixedLenFeature([], tf.int64)})).shuffle(
        30, seed=1).filter(lambda e: e["id"] % 7 != 3)


def test_splitting_by_files_draws_none_of_the_pipelines_passes(tmp_path):
    # counting and hashing the names read them over the pipeline's own seed generator: two
    # passes drawn, so the loader's first pass had the order of the pipeline's third
    import jaxload
    from jaxload._src.pipelines.tf.split import split

    pattern = write_files(tmp_path, [5] * 8)
    ds = shuffled_names(pattern)
    plan = jaxload.data_parallel(devices=jaxload.simulated_devices(2, 2)).plan(
        global_batch_size=8, process_index=0)
    share, sharding = split(ds, plan, "auto")
    assert sharding.mode == "files"
    first = [int(e["id"]) for e in shuffled_names(pattern)]
    assert [int(e["id"]) for e in ds] == first


def resumed_passes(pattern: str) -> dict:
    """Worker: passes 0 to 2 of a kept loader over :func:`shuffled_names`; a fresh loader
    resumed from a state at step 3 of pass 0, its passes."""
    import json
    import warnings

    import jaxload

    def loader():
        return jaxload.from_tf_data(shuffled_names(pattern), make_layout("data_parallel"),
                                    global_batch_size=8)

    warnings.simplefilter("ignore")  # the state's size
    kept, state = loader(), None
    passes: list[list] = [[], [], []]
    for number in range(3):
        for batch in kept:
            passes[number].append(record(batch))
            if number == 0 and len(passes[0]) == 3:
                state = kept.get_state()
    resumed = loader()
    resumed.set_state(json.loads(json.dumps(state)))
    later = [[record(batch) for batch in resumed] for _ in range(3)]
    return dict(passes=passes, later=later)


@pytest.mark.cluster
def test_the_passes_after_a_resume_of_shuffled_file_names_are_those_without_it(clusters, tmp_path):
    pattern = write_files(tmp_path, [25] * 8)
    results = clusters.run(resumed_passes, num_processes=2, local_devices=2, args=(pattern,),
                           timeout_s=240)

    def steps(key: str, number: int) -> list[list[int]]:
        passes = [{"steps": r[key][number]} for r in results]
        return [[int(v) for _, v in sorted(global_rows(s, "['id']", passes).items())]
                for s in range(len(passes[0]["steps"]))]

    assert steps("later", 0) == steps("passes", 0)[3:]
    assert [steps("later", 1), steps("later", 2)] == [steps("passes", 1), steps("passes", 2)]
    assert steps("passes", 1) != steps("passes", 2)  # they reshuffle: the test can fail


def resumed_reader(pattern: str, at: tuple[int, ...]) -> dict:
    """Worker: this process's rows of each step of one pass of ``TFRecordDataset(files)`` (a
    reader over the sorted names, no list_files), and of the same pass resumed by a fresh
    loader from a state taken at each step of ``at``."""
    import glob
    import json

    import tensorflow as tf

    import jaxload

    def loader():
        ds = tf.data.TFRecordDataset(sorted(glob.glob(pattern))).map(
            lambda r: tf.io.parse_single_example(r, {"id": tf.io.FixedLenFeature([], tf.int64)}))
        return jaxload.from_tf_data(ds, make_layout("data_parallel"), global_batch_size=8,
                                    remainder="pad")

    def rows(batch) -> list[int]:
        return [int(i) for s, m in zip(batch["id"].addressable_shards,
                                       batch["mask"].addressable_shards, strict=True)
                for i, real in zip(np.asarray(s.data), np.asarray(m.data), strict=True) if real]

    whole = [rows(batch) for batch in loader()]
    resumed = {}
    for step in at:
        first, steps = loader(), []
        for batch in first:
            steps.append(rows(batch))
            if len(steps) == step:
                state = json.loads(json.dumps(first.get_state()))
                break
        again = loader()
        again.set_state(state)
        resumed[step] = steps + [rows(batch) for batch in again]
    return dict(whole=whole, resumed=resumed)


@pytest.mark.cluster
def test_a_reader_over_files_of_unequal_sizes_resumes_in_its_own_files(clusters, tmp_path):
    # TFRecordDataset(files) is split by TensorFlow's rewrite into files.shard(K, k).flat_map(
    # TFRecordDataset), whose shard op, as inserted, restored from a symbolic checkpoint at
    # another position: resumed at step 3, group 0 read group 1's file (59 rows twice, 28 never)
    sizes = [10, 20, 30, 41]
    pattern = write_files(tmp_path, sizes)
    results = clusters.run(resumed_reader, num_processes=2, local_devices=2,
                           args=(pattern, (3, 9)), timeout_s=240)
    assert sorted(i for r in results for step in r["whole"] for i in step) == all_ids(sizes)
    for r in results:
        for step in (3, 9):
            assert r["resumed"][step] == r["whole"], (step, r["resumed"][step], r["whole"])


def padded_over_files(pattern: str, gbs: int) -> dict:
    """Worker: this process's real rows of a pass of ``TFRecordDataset(files)`` with a global
    batch padded from ``gbs``, and the sharding warnings' texts."""
    import glob
    import warnings

    import tensorflow as tf

    import jaxload

    ds = tf.data.TFRecordDataset(sorted(glob.glob(pattern))).map(
        lambda r: tf.io.parse_single_example(r, {"id": tf.io.FixedLenFeature([], tf.int64)}))
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        loader = jaxload.from_tf_data(ds, make_layout("data_parallel"), global_batch_size=gbs,
                                      remainder="pad")
    rows = [int(i) for batch in loader for s, m in zip(
        batch["id"].addressable_shards, batch["mask"].addressable_shards, strict=True)
        for i, real in zip(np.asarray(s.data), np.asarray(m.data), strict=True) if real]
    return dict(rows=rows, told=[str(w.message) for w in told
                                 if issubclass(w.category, jaxload.ShardingWarning)])


@pytest.mark.cluster
def test_a_padded_batch_whose_groups_hold_only_padding_is_not_split_by_files(clusters, tmp_path):
    # global_batch_size=3 on 2x4 devices: the batch is padded to 8, group 1 holds only padding,
    # and split by files it never read its files (100 of 200 rows delivered, no word)
    sizes = [25] * 8
    pattern = write_files(tmp_path, sizes)
    results = clusters.run(padded_over_files, num_processes=2, local_devices=4,
                           args=(pattern, 3), timeout_s=240)
    assert sorted(i for r in results for i in r["rows"]) == all_ids(sizes)
    for r in results:
        assert len(r["told"]) == 1 and "global_batch_size=3 is padded to 8, so 1 of the 2 " \
            "loading groups holds only padding" in r["told"][0], r["told"]


def filtered_rows(remainder: str) -> list[int]:
    """Worker: this process's real rows of a pass of ``range(80).filter(i < 50)`` (its length
    unknown to tf.data, so split by elements and proved by its stream), global batch 8."""
    import tensorflow as tf

    import jaxload

    ds = tf.data.Dataset.range(80).filter(lambda i: i < 50).map(lambda i: {"id": i})
    loader = jaxload.from_tf_data(ds, make_layout("data_parallel"), global_batch_size=8,
                                  remainder=remainder)
    return [int(i) for batch in loader for s, m in zip(
        batch["id"].addressable_shards, batch.get("mask", batch["id"]).addressable_shards,
        strict=True) for i, real in zip(np.asarray(s.data), np.asarray(m.data), strict=True)
        if remainder == "drop" or real]


@pytest.mark.cluster
def test_a_last_global_batch_shorter_than_the_loading_groups_ends_the_pass(clusters):
    # 4 loading groups, a last global batch of 2 rows: group 3 kept rows range(3, 2, 4) of it,
    # which TensorFlow's tf.range refuses (InvalidArgumentError at the pass's last step)
    for remainder, rows in (("pad", 50), ("drop", 48)):
        results = clusters.run(filtered_rows, num_processes=4, local_devices=2,
                               args=(remainder,), timeout_s=240)
        assert sorted(i for r in results for i in r) == list(range(rows)), remainder
