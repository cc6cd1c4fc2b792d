"""Global batches smaller than the batch shards, or not a multiple of them (eval on a large
mesh), with remainder="pad": real 2x4 and 4x2 runs over 8 devices, every device's rows read
back and checked in the parent, and how many elements each process's pipeline read."""

from __future__ import annotations

import math

import numpy as np
import pytest

import jaxload
import jaxload.testing
from placement import global_rows, make_layout, record

NUM_ELEMENTS = 30
_reads = [0]  # elements this process's pipeline produced


def counted(i) -> dict:
    _reads[0] += 1
    return {"id": np.int32(i), "x": np.float32(2 * i)}


def make_loader(backend: str, layout, gbs: int):
    if backend == "grain":
        import grain

        return jaxload.from_grain(grain.MapDataset.range(NUM_ELEMENTS).map(counted), layout,
                                  global_batch_size=gbs, remainder="pad")
    import tensorflow as tf

    ds = tf.data.Dataset.range(NUM_ELEMENTS).map(lambda i: tf.numpy_function(
        lambda j: tuple(counted(int(j)).values()), [i], (tf.int32, tf.float32)))
    ds = ds.map(lambda i, x: {"id": tf.ensure_shape(i, ()), "x": tf.ensure_shape(x, ())})
    return jaxload.from_tf_data(ds, layout, global_batch_size=gbs, remainder="pad")


def record_padded(scenarios) -> list[dict]:
    """Worker: each scenario's epoch, recorded from the arrays, and the elements read."""
    out = []
    for backend, layout_name, gbs in scenarios:
        _reads[0] = 0
        loader = make_loader(backend, make_layout(layout_name), gbs)
        steps = [record(batch) for batch in loader]
        out.append({"steps": steps, "reads": _reads[0]})
    return out


SCENARIOS = {
    (2, 4): [("grain", "data_parallel", 12), ("grain", "data_parallel", 3),
             ("tf", "data_parallel", 12), ("tf", "in_process", 3)],
    (4, 2): [("grain", "data_parallel", 12), ("grain", "data_parallel", 3),
             ("grain", "across_processes", 3)],  # tf.data: 2x4 (4 TF imports cost ~1 min here)
}


def expected_reads(start: int, stop: int, gbs: int) -> int:
    """Elements a process with rows [start, stop) of each physical batch reads in the epoch."""
    chunks = [min(gbs, NUM_ELEMENTS - s) for s in range(0, NUM_ELEMENTS, gbs)]
    return sum(max(0, min(stop, c) - start) for c in chunks)


@pytest.mark.cluster
@pytest.mark.parametrize("topology", list(SCENARIOS))
def test_small_and_uneven_global_batches_are_padded(clusters, topology):
    processes, local = topology
    per_process = clusters.run(record_padded, num_processes=processes,
                               local_devices=local, args=(SCENARIOS[topology],),
                               timeout_s=300)
    idle = 0
    for k, (backend, layout_name, gbs) in enumerate(SCENARIOS[topology]):
        results = [r[k] for r in per_process]
        shards = processes * local // (1 if layout_name == "data_parallel" else 2)
        physical = math.ceil(gbs / shards) * shards
        steps = math.ceil(NUM_ELEMENTS / gbs)
        assert {len(r["steps"]) for r in results} == {steps}, (backend, layout_name, gbs)
        delivered = []
        for step in range(steps):
            ids = global_rows(step, "['id']", results)  # also: replicas agree
            mask = global_rows(step, "['mask']", results)
            x = global_rows(step, "['x']", results)
            assert sorted(ids) == list(range(physical))
            for row in range(physical):
                real = row < gbs and step * gbs + row < NUM_ELEMENTS
                assert bool(mask[row]) == real, (backend, layout_name, gbs, step, row)
                expected = step * gbs + row if real else 0
                assert (ids[row], x[row]) == (expected, 2 * expected), (step, row)
                delivered += [int(ids[row])] if real else []
        assert delivered == list(range(NUM_ELEMENTS))
        for r in results:  # a process reads exactly the real rows of its block
            shards_0 = r["steps"][0]["['id']"]["shards"]
            start, stop = min(s[2] for s in shards_0), max(s[3] for s in shards_0)
            reads = expected_reads(start, stop, gbs)
            if backend == "grain":  # and the first and last element, read twice by the first
                # round's comparison of the processes' datasets (none on a group of padding)
                described = 4 if reads else 0
                assert r["reads"] == reads + described, (layout_name, gbs, start, stop, r["reads"])
            else:  # tf.data reads the others' elements to skip them, but a padding group none
                assert (r["reads"] == 0) == (reads == 0), (layout_name, gbs, start, r["reads"])
        idle += sum(expected_reads(*_block(r), gbs) == 0 for r in results)
    assert idle >= 1  # some processes held only padding (and read nothing)


def _block(result: dict) -> tuple[int, int]:
    shards = result["steps"][0]["['id']"]["shards"]
    return min(s[2] for s in shards), max(s[3] for s in shards)


def test_drop_refuses_a_batch_that_is_not_a_multiple_of_the_shards():
    import grain

    layout = jaxload.data_parallel(devices=jaxload.simulated_devices(2, 4))
    ds = grain.MapDataset.range(30).map(counted)
    with pytest.raises(ValueError, match=r"global_batch_size=12 is not a multiple of the 8 batch "
                       r"shards.*e\.g\. 8 or 16\), or remainder='pad': the batch then has 16 "
                       "rows, the last 4 of them padding"):
        jaxload.from_grain(ds, layout, global_batch_size=12)
    with pytest.raises(ValueError, match=r"Use a multiple of 8 \(e\.g\. 8\), or"):
        jaxload.from_grain(ds, layout, global_batch_size=3)  # not "e.g. 8 or 8"
    with pytest.raises(ValueError, match="cannot be used with shard=False"):
        jaxload.from_grain(ds, layout, global_batch_size=3, remainder="pad", shard=False)
