"""Per-feature shardings: a feature's non-batch dims sharded over mesh axes (e.g. a sequence
over ``seq`` for context parallelism). Plans on simulated topologies, then real 2x4 and 4x2
runs whose every device's slice is read back and checked in the parent against a device grid
the test builds itself."""

from __future__ import annotations

import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import jaxload
import jaxload.testing
from jaxload._src import explain

SEQ = 8  # tokens per row


def element(i: int) -> dict:
    return {"id": np.int32(i),
            "tokens": (i * 100 + np.arange(SEQ)).astype(np.int32),
            "img": (i * 1000 + 10 * np.arange(2)[:, None] + np.arange(4)).astype(np.int32)}


def grid(name: str, processes: int, local: int) -> tuple[list[list[int]], tuple[str, str]]:
    """Device ids in mesh order (rows: batch axis, columns: the sequence axis)."""
    ids = np.arange(processes * local).reshape(processes, local)
    if name == "seq_across":  # each process holds every batch block, one block of columns
        return ids.T.tolist(), ("data", "seq")
    if name == "seq_in_process":
        return ids.reshape(-1, 2).tolist(), ("data", "seq")
    if name == "seq_interleaved":  # a process holds column blocks 0 and 2: not contiguous
        return [[0, 4, 1, 5], [2, 6, 3, 7]], ("data", "seq")
    if name == "across":  # model_replicas_across_processes(2): columns over the model axis
        return jaxload.model_replicas_across_processes(
            2, devices=jaxload.simulated_devices(processes, local)).mesh.device_ids.tolist(), (
            "replica", "model")
    raise ValueError(name)


def make_layout(name: str, devices) -> jaxload.Layout:
    processes = len({d.process_index for d in devices})
    ids, (batch, seq) = grid(name, processes, len(devices) // processes)
    ordered = sorted(devices, key=lambda d: (d.process_index, d.id))  # grid numbers
    mesh = Mesh(np.array([[ordered[i] for i in row] for row in ids]), (batch, seq))
    return jaxload.Layout(mesh, batch, {"tokens": P(batch, seq), "img": P(batch, None, seq)})


def test_plan_lists_each_devices_columns():
    layout = make_layout("seq_across", jaxload.simulated_devices(2, 4))
    plans = layout.plans(8)
    assert [p.loading_groups for p in plans] == [((0, 1),)] * 2  # rows decide loading groups
    assert plans[1].device_columns[:2] == ((4, "img", 2, 1, 2), (4, "tokens", 1, 1, 2))
    text = explain.text(plans[1])
    assert "tokens dim1 0/2" in text and "img dim2 1/2" in text
    svg = explain.svg(plans[0])
    assert svg.count('class="cell"') == 2 * 4 * 2 and 'data-feature="img"' in svg


@pytest.mark.parametrize("batch,expected", [
    ({"id": np.zeros(4), "tokens": np.zeros((4, 6)), "img": np.zeros((4, 2, 4))},
     r"feature batch\['tokens'\] has shape \(6,\) per row.*dim 1 \(size 6\) into 4 blocks"),
    ({"id": np.zeros(4), "tokens": np.zeros((4, 8)), "img": np.zeros((4, 8))},
     r"feature batch\['img'\] has shape \(8,\) per row \(rank 1\).*shards 2 dimensions"),
    ({"id": np.zeros(4), "tokens": np.zeros((4, 8))},
     r"feature_specs name feature 'img', but the batch has no such top-level feature"),
])
def test_a_spec_that_does_not_fit_names_the_feature(batch, expected):
    layout = make_layout("seq_interleaved", jaxload.simulated_devices(2, 4))
    with pytest.raises(ValueError, match=expected):
        jaxload.assemble(batch, layout.plan(4))


def test_spec_must_start_with_the_batch_axes():
    mesh = make_layout("seq_across", jaxload.simulated_devices(2, 4)).mesh
    with pytest.raises(ValueError, match=r"feature_specs\['tokens'\]=P\('seq', 'data'\) must "
                       "start with the batch axes"):
        jaxload.Layout(mesh, "data", {"tokens": P("seq", "data")})
    with pytest.raises(TypeError, match=r"feature_specs\['x'\] must be a .*PartitionSpec"):
        jaxload.Layout(mesh, "data", {"x": ("data",)})


def record_scenarios(scenarios) -> list[dict]:
    """Worker: per scenario and step, every addressable shard's device, full index and data."""
    import grain
    import jax

    import jaxload

    out = []
    number = {d.id: k for k, d in enumerate(sorted(jax.devices(),
                                                    key=lambda d: (d.process_index, d.id)))}
    for backend, name, num_elements, gbs, *load_once in scenarios:
        layout = make_layout(name, jax.devices())
        if backend == "grain":
            loader = jaxload.from_grain(grain.MapDataset.range(num_elements).map(element),
                                        layout, global_batch_size=gbs, load_once=bool(load_once))
        else:
            import tensorflow as tf

            ds = tf.data.Dataset.range(num_elements).map(
                lambda i: tf.numpy_function(lambda j: tuple(element(int(j)).values()), [i],
                                            (tf.int32, tf.int32, tf.int32)))
            ds = ds.map(lambda a, b, c: {"id": tf.ensure_shape(a, ()),
                                         "tokens": tf.ensure_shape(b, (SEQ,)),
                                         "img": tf.ensure_shape(c, (2, 4))})
            loader = jaxload.from_tf_data(ds, layout, global_batch_size=gbs)
        steps = []
        for batch in loader:
            steps.append({key: [(number[s.device.id], tuple(sl.indices(n)[:2] for sl, n in
                                                    zip(s.index, leaf.shape, strict=True)),
                                 np.asarray(s.data)) for s in leaf.addressable_shards]
                          for key, leaf in batch.items()})
        out.append(steps)
    return out


SCENARIOS = {  # (backend, grid, elements, global_batch_size or a schedule[, "load_once"])
    (2, 4): [("grain", "seq_across", 40, 8), ("tf", "seq_in_process", 40, 8),
             ("grain", "seq_interleaved", 36, 4), ("grain", "seq_across", 40, [(0, 4), (2, 8)]),
             ("tf", "seq_in_process", 40, [(0, 8), (1, 4), (3, 16)])],
    (4, 2): [("grain", "across", 40, 8), ("grain", "seq_across", 36, 4),
             ("grain", "across", 40, 8, "load_once"),  # loaded once, resharded per feature
             ("tf", "across", 40, [(0, 4), (1, 8)]),
             ("grain", "across", 40, [(0, 8), (2, 16)], "load_once")],
}


def step_sizes(num_elements: int, gbs) -> list[int]:
    """Each step's global batch size under ``remainder="drop"`` (a size or a schedule)."""
    schedule = [(0, gbs)] if isinstance(gbs, int) else gbs
    sizes: list[int] = []
    while True:
        size = [size for first, size in schedule if first <= len(sizes)][-1]
        if sum(sizes) + size > num_elements:
            return sizes
        sizes.append(size)


def expected_value(key: str, ids: np.ndarray, index) -> np.ndarray:
    (r0, r1), *rest = index
    i = ids[r0:r1]
    if key == "id":
        return i
    if key == "tokens":
        return i[:, None] * 100 + np.arange(*rest[0])
    return (i[:, None, None] * 1000 + 10 * np.arange(*rest[0])[:, None]
            + np.arange(*rest[1])[None, :])


@pytest.mark.cluster
@pytest.mark.parametrize("topology", list(SCENARIOS))
def test_every_device_holds_its_rows_and_columns(clusters, topology):
    processes, local = topology
    results = clusters.run(record_scenarios, num_processes=processes, local_devices=local,
                           args=(SCENARIOS[topology],), timeout_s=300)
    for k, (_, name, num_elements, schedule, *_) in enumerate(SCENARIOS[topology]):
        ids_grid, _ = grid(name, processes, local)
        rows_blocks, col_blocks = len(ids_grid), len(ids_grid[0])
        position = {d: (i, j) for i, row in enumerate(ids_grid) for j, d in enumerate(row)}
        steps = [r[k] for r in results]
        sizes = step_sizes(num_elements, schedule)
        assert {len(s) for s in steps} == {len(sizes)}, name
        seen = []
        for step, gbs in enumerate(sizes):
            ids = np.full(gbs, -1)  # each row's id, from the devices holding it
            for per_process in steps:
                for _, ((r0, r1),), data in per_process[step]["id"]:
                    assert ids[r0:r1].tolist() in ([-1] * (r1 - r0), data.tolist())
                    ids[r0:r1] = data
            devices = set()
            for per_process in steps:
                for key, shards in per_process[step].items():
                    for device, index, data in shards:
                        i, j = position[device]
                        rows = (i * gbs // rows_blocks, (i + 1) * gbs // rows_blocks)
                        assert index[0] == rows, (name, key, device, index)
                        width = {"id": 0, "tokens": SEQ, "img": 4}[key]
                        if width:  # the sequence dim: column block j of the grid
                            cols = (j * width // col_blocks, (j + 1) * width // col_blocks)
                            assert index[-1] == cols, (name, key, device, index)
                        np.testing.assert_array_equal(data, expected_value(key, ids, index))
                        devices.add(device)
            assert devices == set(position), name
            seen += ids.tolist()
        assert len(seen) == len(set(seen)) and set(seen) <= set(range(num_elements))
