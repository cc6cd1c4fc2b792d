"""A ``from_tensor_slices`` pipeline, shuffled or not, read by index (in_memory.py): each
loading group's batches are those the user's own pipeline means, pass after pass, from any
position, gathered from the arrays without tf.data reading a row."""

from __future__ import annotations

import numpy as np
import pytest

import jaxload
from jaxload._src.pipelines.tf.dataset import TfDataset
from jaxload._src.pipelines.tf.in_memory import InMemory

tf = pytest.importorskip("tensorflow")

ROWS, GLOBAL = 203, 32  # a partial last global batch


def _arrays():
    rng = np.random.default_rng(0)
    return {"x": rng.random((ROWS, 3), dtype=np.float32), "id": np.arange(ROWS)}


SHAPES = {
    "plain": lambda d: tf.data.Dataset.from_tensor_slices(d),
    "shuffled": lambda d: tf.data.Dataset.from_tensor_slices(d).shuffle(64, seed=3),
    "shuffled whole, prefetched": lambda d: tf.data.Dataset.from_tensor_slices(d).shuffle(
        ROWS, seed=1).prefetch(2),
    "not reshuffled": lambda d: tf.data.Dataset.from_tensor_slices(d).shuffle(
        50, seed=7, reshuffle_each_iteration=False),
    "a tuple, options": lambda d: tf.data.Dataset.from_tensor_slices((d["x"], d["id"])).shuffle(
        32, seed=5).with_options(tf.data.Options()),
}


def _ids(batch):
    return (batch["id"] if isinstance(batch, dict) else batch[1]).tolist()


def _meant(ds, passes: int, groups: int, group: int, local: int, drop: bool, start: int = 0):
    """Per pass, this group's batches of ids as the user's pipeline gives them: its n-th
    iteration from row ``start``, rows ``group::groups`` of each global batch."""
    out = []
    for _ in range(passes):
        ids = [int(e["id"] if isinstance(e, dict) else e[1]) for e in ds.as_numpy_iterator()]
        ids = ids[start:]
        mine = []
        for first in range(0, len(ids), groups * local):
            rows = ids[first:first + groups * local][group::groups]
            if rows and not (drop and len(rows) < local):
                mine.append(rows)
        out.append(mine)
    return out


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("processes,index", [(1, 0), (2, 1), (4, 0), (4, 3)])
@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_each_group_reads_by_index_the_rows_the_pipeline_means(shape, processes, index, remainder):
    data = _arrays()
    ds = SHAPES[shape](data)
    assert InMemory.of(ds) is not None
    plan = jaxload.data_parallel(devices=jaxload.simulated_devices(processes, 8 // processes)).plan(
        global_batch_size=GLOBAL, process_index=index)
    if remainder == "pad" and not isinstance(ds.element_spec, dict):  # no "mask" to add
        with pytest.raises(TypeError, match="needs dict elements; got tuple elements"):
            TfDataset(ds, plan, global_batch_size=GLOBAL, shard="auto", batched=False,
                      remainder=remainder)
        return
    pipeline = TfDataset(ds, plan, global_batch_size=GLOBAL, shard="auto", batched=False,
                         remainder=remainder)
    got = []
    for _ in range(3):
        batches = [b for b, _ in pipeline.batches(None)]
        for batch in batches:  # 64-byte aligned: assembled without another copy
            assert all(leaf.ctypes.data % 64 == 0 for leaf in tf.nest.flatten(batch))
            x, ids = (batch["x"], batch["id"]) if isinstance(batch, dict) else batch
            np.testing.assert_array_equal(x, data["x"][ids])  # each row's own features
        got.append([_ids(b) for b in batches])
    user = SHAPES[shape](data)  # another pipeline of the same shape: its passes from the first
    assert got == _meant(user, 3, processes, index, plan.local_batch_size, remainder == "drop")


def test_a_position_resumes_the_same_pass_and_the_next_pass_follows():
    data = _arrays()
    plan = jaxload.data_parallel(devices=jaxload.simulated_devices(4, 2)).plan(
        global_batch_size=GLOBAL, process_index=2)
    first = TfDataset(SHAPES["shuffled"](data), plan, global_batch_size=GLOBAL, shard="auto",
                      batched=False, remainder="pad")
    whole = [(_ids(b), position) for b, position in first.batches(None)]
    again = TfDataset(SHAPES["shuffled"](data), plan, global_batch_size=GLOBAL, shard="auto",
                      batched=False, remainder="pad")
    resumed = [(_ids(b), position) for b, position in again.batches(whole[4][1])]
    assert resumed == whole[5:]
    assert whole[4][1] == {"pass": 0, "batches": 5, "seeds": whole[0][1]["seeds"]}
    following = [_ids(b) for b, _ in again.batches(None)]  # the second pass, reshuffled
    meant = _meant(SHAPES["shuffled"](data), 2, 4, 2, plan.local_batch_size, False)
    assert following == meant[1] and following != meant[0]


@pytest.mark.parametrize("processes,index", [(1, 0), (4, 1)])
def test_a_pass_from_a_global_row_has_the_rows_after_it(processes, index):
    """What an elastic resume on another topology starts from: global row 77 of pass 0."""
    data = _arrays()
    plan = jaxload.data_parallel(devices=jaxload.simulated_devices(processes, 8 // processes)).plan(
        global_batch_size=GLOBAL, process_index=index)
    pipeline = TfDataset(SHAPES["shuffled"](data), plan, global_batch_size=GLOBAL, shard="auto",
                         batched=False, remainder="pad")
    got = [_ids(b) for b, _ in pipeline.from_row(77)(None)]
    meant = _meant(SHAPES["shuffled"](data), 1, processes, index, plan.local_batch_size, False, 77)
    assert got == meant[0]


@pytest.mark.parametrize("shape", [
    lambda d: tf.data.Dataset.from_tensor_slices(d).map(lambda e: e),
    lambda d: tf.data.Dataset.from_tensor_slices(d).shuffle(8, seed=1).map(lambda e: e),
    lambda d: tf.data.Dataset.from_tensor_slices(d).repeat(2),
    lambda d: tf.data.Dataset.from_tensor_slices(d).batch(4),
    lambda d: tf.data.Dataset.from_tensor_slices(d).skip(3),
    lambda d: tf.data.Dataset.range(5),
    lambda d: tf.data.Dataset.from_tensor_slices(["a", "b"]),
])
def test_other_pipelines_are_read_through_tf_data(shape):
    assert InMemory.of(shape(_arrays())) is None


def test_many_rows_through_a_small_shuffle_buffer_stream_through_tf_data():
    """A whole pass's order first would delay the first batch past tf.data's (which needs only
    a full buffer): 100,000 rows through a buffer of 1,000 stay on tf.data, through 100,000 not."""
    rows = np.arange(100_000)
    assert InMemory.of(tf.data.Dataset.from_tensor_slices(rows).shuffle(1_000, seed=1)) is None
    assert InMemory.of(tf.data.Dataset.from_tensor_slices(rows).shuffle(100_000, seed=1))
    assert InMemory.of(tf.data.Dataset.from_tensor_slices(rows))  # no order to compute


def test_explain_says_the_arrays_are_read_by_index():
    loader = jaxload.from_tf_data(SHAPES["shuffled"](_arrays()), jaxload.data_parallel(),
                                  global_batch_size=8)
    assert ("input: tf.data by elements, arrays in memory read by index: each process gathers "
            "its own rows (1/1), in the pipeline's order") in loader.explain()
    mapped = jaxload.from_tf_data(SHAPES["shuffled"](_arrays()).map(lambda e: e),
                                  jaxload.data_parallel(), global_batch_size=8)
    assert "each process reads every element and keeps 1/1 of them" in mapped.explain()
