"""A tf.data pipeline split by elements proves, while it runs, that every process read the same
elements: in real processes (2 processes x 2 devices: 2 loading groups, global batch 4).

Each process reads the whole pipeline and keeps its share; a digest of every step's global
batch rides the step agreement. A pipeline that reads other elements on one process stops every
process with the same error before the step that differs; a random augmentation at the end of
the pipeline (which runs on each share only) is no difference.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from placement import global_rows, record

N = 48  # elements of every pipeline: 12 steps of 4


def pipeline(shape: str):
    """The pipeline ``shape``, built alike in every process except where it says."""
    import jax
    import tensorflow as tf

    p = jax.process_index()
    ids = tf.data.Dataset.from_generator(lambda: iter(range(N)),
                                         output_signature=tf.TensorSpec((), tf.int64))
    if shape == "same":
        return ids.map(lambda i: {"id": i})
    if shape == "saved":  # tf.data saves its iterator: a resume restores a checkpoint
        return tf.data.Dataset.range(N).filter(lambda i: i >= 0).map(lambda i: {"id": i})
    if shape == "differs-from-42":  # process 1 reads other elements from element 42 on
        return tf.data.Dataset.from_generator(
            lambda: iter([i + 1000 * (p == 1 and i >= 42) for i in range(N)]),
            output_signature=tf.TensorSpec((), tf.int64)).map(lambda i: {"id": i})
    if shape == "changed":  # the same pipeline over other data (a generator's source changed)
        return tf.data.Dataset.from_generator(lambda: iter(range(1000, 1000 + N)),
                                              output_signature=tf.TensorSpec((), tf.int64)).map(
            lambda i: {"id": i})
    if shape == "shuffled-in-batches":  # each process draws its own order within each batch
        return ids.batch(8).map(tf.random.shuffle).unbatch().map(lambda i: {"id": i})
    if shape == "random-filter":  # each process keeps other elements
        return ids.filter(lambda i: tf.random.uniform(()) < 0.5).map(lambda i: {"id": i})
    if shape == "augmented":  # random values in the last maps: on each share only
        return ids.map(lambda i: {"id": i, "noise": tf.random.uniform(())}).map(
            lambda e: {**e, "more": tf.ensure_shape(tf.numpy_function(
                lambda: np.float32(np.random.random()), [], tf.float32, stateful=True), ())})
    raise ValueError(shape)


def run(shape: str, remainder: str = "pad", steps: int | None = None, state=None,
        batched: bool = False, checks: str = "first") -> dict:
    import jaxload

    rows = []
    ds = pipeline(shape).batch(2, drop_remainder=True) if batched else pipeline(shape)
    loader = jaxload.from_tf_data(ds, jaxload.data_parallel(), global_batch_size=4, batched=batched,
                                  remainder=remainder, timeout_s=60, on_failure="raise",
                                  checks=checks)
    try:
        if state is not None:
            loader.set_state(state)
        for batch in loader:
            rows.append(record(batch))
            if steps is not None and len(rows) == steps:
                return dict(steps=rows, state=loader.get_state())
    except Exception as e:  # noqa: BLE001 - the test compares what each process saw
        return dict(steps=rows, error=f"{type(e).__name__}: {e}")
    return dict(steps=rows, backend=loader.get_state()["backend"])


def run_all() -> dict:
    out = {shape: run(shape) for shape in ("same", "differs-from-42", "shuffled-in-batches",
                                           "random-filter", "augmented")}
    out["drop"] = run("same", remainder="drop")
    out["batched"] = run("differs-from-42", batched=True)  # batches of 2: one a group a step
    first = run("same", steps=5)
    out["resumed"] = [first, run("same", state=first["state"])]
    out["resumed over changed data"] = run("changed", state=first["state"])
    first = run("saved", steps=5)
    out["resumed from a checkpoint"] = [first, run("saved", state=first["state"])]
    unproved = run("saved", steps=2, checks="never")
    out["resumed from a checkpoint without the proof"] = run("saved", state=unproved["state"])
    return out


@pytest.fixture(scope="module")
def seen(clusters) -> dict:
    return clusters.run(run_all, num_processes=2, local_devices=2, timeout_s=240)


def ids(results: list[dict], key: str = "['id']") -> Counter:
    """Every real row's id over all steps (padding left out)."""
    rows: Counter = Counter()
    for step in range(len(results[0]["steps"])):
        values = global_rows(step, key, results)
        masked = "['mask']" in results[0]["steps"][step]  # padded passes mark their real rows
        mask = global_rows(step, "['mask']", results) if masked else dict.fromkeys(values, 1)
        rows.update(int(values[r]) for r in sorted(mask) if mask[r])
    return rows


@pytest.mark.cluster
@pytest.mark.parametrize("shape", ["same", "augmented"])
def test_the_same_elements_are_delivered_exactly_once(seen, shape):
    results = [seen[p][shape] for p in range(2)]
    assert all("error" not in r for r in results), results
    assert ids(results) == Counter(range(N))


@pytest.mark.cluster
def test_a_difference_from_element_42_stops_both_before_step_10_naming_the_element(seen):
    results = [seen[p]["differs-from-42"] for p in range(2)]
    for r in results:
        assert len(r["steps"]) == 10, len(r["steps"])  # steps 0-9 hold elements 0-39
        assert r["error"].startswith("ValueError: at step 10 the processes read different "
                                     "elements of the pipeline before splitting it"), r["error"]
        assert "process [0]" in r["error"] and "process [1]" in r["error"], r["error"]
        assert "first at its element 2 (0-based)" in r["error"], r["error"]  # element 42
    assert results[0]["error"] == results[1]["error"]
    assert ids(results) == Counter(range(40))


@pytest.mark.cluster
def test_a_pipeline_batched_by_the_user_is_proved_batch_by_batch(seen):
    results = [seen[p]["batched"] for p in range(2)]
    for r in results:
        assert len(r["steps"]) == 10, len(r["steps"])
        assert r["error"].startswith("ValueError: at step 10 the processes read different"), r
        assert "first at its element 1 (0-based)" in r["error"], r["error"]  # its 2nd batch
    assert ids(results) == Counter(range(40))


@pytest.mark.cluster
@pytest.mark.parametrize("shape", ["shuffled-in-batches", "random-filter"])
def test_an_unseeded_random_op_before_the_split_stops_both_before_any_step(seen, shape):
    results = [seen[p][shape] for p in range(2)]
    for r in results:
        assert r["steps"] == [], r
        assert r["error"].startswith("ValueError: at step 0 the processes read different"), r
    assert results[0]["error"] == results[1]["error"]


@pytest.mark.cluster
def test_drop_delivers_every_full_step(seen):
    results = [seen[p]["drop"] for p in range(2)]
    assert all("error" not in r for r in results), results
    assert ids(results) == Counter(range(N))


@pytest.mark.cluster
def test_a_checkpoint_taken_without_the_proof_is_refused_naming_checks(seen):
    # its pipeline is a plain shard, whose iterator checkpoint does not fit the proving split
    for p in range(2):
        r = seen[p]["resumed from a checkpoint without the proof"]
        assert r["steps"] == [] and r["error"].startswith("ValueError: the state's tf.data "
                                                          "iterator checkpoint was taken where"), r
        assert "Pass the checks= the state was taken with" in r["error"]


@pytest.mark.cluster
@pytest.mark.parametrize("how", ["resumed", "resumed from a checkpoint"])
def test_a_resumed_pass_continues_exactly(seen, how):
    # "resumed": a generator, positioned by a count; "from a checkpoint": tf.data's iterator
    first, rest = ([seen[p][how][i] for p in range(2)] for i in (0, 1))
    assert all("error" not in r for r in first + rest), (first, rest)
    assert ids(first) + ids(rest) == Counter(range(N))


@pytest.mark.cluster
def test_a_state_resumed_over_other_elements_is_refused_before_any_batch(seen):
    # the state records the stream digest of the last batch handed out; a resume from a count
    # reads that batch again and compares (tf.data's graph of a generator cannot show its data)
    first = seen[0]["resumed"][0]
    assert first["state"]["position"]["batches"] == 5
    assert len(first["state"]["position"]["stream"]) == 16
    errors = [seen[p]["resumed over changed data"] for p in range(2)]
    for r in errors:
        assert r["steps"] == [], r
        assert "ValueError: the state was taken over other elements than this pipeline reads: " \
               "the last batch handed out before it (batch 5 of its pass) had the stream " \
               "digest" in r["error"], r["error"]
        assert "resume the pipeline the state was taken with" in r["error"]


def test_a_count_with_a_malformed_stream_digest_is_refused():
    from jaxload._src.pipelines.tf.iterator import checked_batches

    assert checked_batches({"batches": 5, "stream": "0123456789abcdef"}) == 5
    for bad in ({"batches": 5, "stream": "xyz"}, {"batches": -1, "stream": "0123456789abcdef"},
                {"batches": 5, "stream": 7}):
        with pytest.raises(ValueError, match=r"must be \{'batches': n, 'stream': 16 hex digits\}"):
            checked_batches(bad)


def test_a_check_failing_where_the_streams_differ_gives_way_to_the_difference():
    # an unseeded tf.random.shuffle before the split: by chance one process kept the rows
    # another did, and the first step's check raised DuplicationError ("loaded the same data")
    # in place of the cause
    from jaxload._src import stream_proof
    from jaxload._src.protocol import Decision, Report

    reports = {0: Report(ready=2, stream=["aa", "bb"]), 1: Report(ready=2, stream=["cc", "bb"])}
    checked = Decision(count=2, more=True, check_error=["DuplicationError", "identical rows"])
    first = stream_proof.verdict(checked, reports, 0)
    assert first.check_error is None and first.count == 0
    assert "at step 0 the processes read different elements" in first.stream_diverged
    later = {0: Report(ready=2, stream=["aa", "bb"]), 1: Report(ready=2, stream=["aa", "dd"])}
    second = stream_proof.verdict(checked, later, 0)  # the checked step read the same: its own
    assert second.check_error == checked.check_error and second.count == 1


def test_the_difference_names_a_split_of_the_users_own_among_its_causes():
    # a pipeline the user sharded by process before jaxload: the stream differs at step 0,
    # and the message says how to keep that split
    from jaxload._src.protocol import Decision, Report
    from jaxload._src.stream_proof import verdict

    reports = {0: Report(ready=1, stream=["aa"]), 1: Report(ready=1, stream=["bb"])}
    message = verdict(Decision(count=1), reports, 0).stream_diverged
    assert "shard(jax.process_count(), jax.process_index())" in message
    assert "pass shard=False" in message


def test_a_grain_elements_fingerprint_hashes_its_leaves_as_fingerprints_add_does():
    # the fast path (a contiguous leaf) hashes the very bytes fingerprints.add hashes
    import jax
    import xxhash

    from jaxload._src.pipelines.grain.iter_dataset import _structure, element_print

    def reference(element):
        leaves, treedef = jax.tree_util.tree_flatten(element)
        h = xxhash.xxh3_64(_structure(treedef))
        for leaf in map(np.asarray, leaves):
            if leaf.dtype.hasobject:
                h.update(f"{leaf.dtype}{leaf.shape}".encode())
            else:  # as fingerprints.add: the header, then the bytes in logical order
                h.update(f"{leaf.dtype.str}{leaf.shape}".encode())
                h.update(np.ascontiguousarray(leaf).reshape(-1).view(np.uint8))
        return h.digest()

    pair = np.dtype([("a", "<i4"), ("b", "<f8")])
    leaves = [np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(6).reshape(2, 3).T,
              np.float16(2.5), np.bool_(True), np.array(3 + 4j), np.arange(4, dtype=">i4"),
              np.array(["2026-11-28"], "datetime64[D]"), np.array([5], "timedelta64[s]"),
              np.zeros(3, pair), np.zeros((0, 2), np.int8), np.array(["a"], object)]
    # and strided views (copied in blocks of their contiguous trailing axes): a flip, a crop,
    # a channel slice, a step, a transpose, a broadcast, big-endian and structured values
    image = np.arange(4 * 5 * 3, dtype=np.float32).reshape(4, 5, 3)
    leaves += [image[:, ::-1], image[1:3, 1:4], image[..., :2], image[::2], image[:, :, ::-1],
               image.transpose(1, 0, 2), np.broadcast_to(np.arange(3), (4, 3)),
               np.arange(12, dtype=">i4").reshape(3, 4)[:, 1:], np.zeros((4, 3), pair)[::2],
               np.arange(10, dtype=np.int8)[::3], image[:, 2:3], image[:0, ::-1]]
    for leaf in leaves:
        element = {"x": leaf, "id": np.int64(7)}
        assert element_print(element) == reference(element), (leaf.dtype, leaf.strides)
