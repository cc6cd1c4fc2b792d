"""Helpers for end-to-end tests: build pipelines in a worker, record placement, verify in the parent.

Element ``i`` of every test pipeline is ``{"id": i, "x": i * 10 + [0, 1, 2], "pair": (2 * i, i % 2 == 0),
"img": [[i, -i], [i, -i]]}``, so a row's features can be checked against its id.
"""

from __future__ import annotations

import numpy as np


def outcome(fn):
    """``fn()``'s result, or the error it raised as ``"Type: message"``, and how long it took."""
    import time

    start = time.monotonic()
    try:
        result = fn()
    except Exception as e:  # the test inspects which error each process saw
        result = f"{type(e).__name__}: {e}"
    return result, round(time.monotonic() - start, 2)


def element(i: int) -> dict:
    return {
        "id": np.int32(i),
        "x": (i * 10 + np.arange(3)).astype(np.float32),
        "pair": (np.int32(2 * i), np.bool_(i % 2 == 0)),
        "img": np.array([[i, -i], [i, -i]], np.int16),
    }


def make_layout(name: str, model_size: int = 2):
    import jaxload

    if name == "data_parallel":
        return jaxload.data_parallel()
    if name == "in_process":
        return jaxload.model_replicas_in_process(model_size)
    if name == "across_processes":
        return jaxload.model_replicas_across_processes(model_size)
    raise ValueError(name)


def make_dataset(backend: str, ids):
    ids = list(ids)
    if backend == "tf":
        import tensorflow as tf

        return tf.data.Dataset.from_generator(
            lambda: (element(i) for i in ids),
            output_signature={
                "id": tf.TensorSpec((), tf.int32),
                "x": tf.TensorSpec((3,), tf.float32),
                "pair": (tf.TensorSpec((), tf.int32), tf.TensorSpec((), tf.bool)),
                "img": tf.TensorSpec((2, 2), tf.int16),
            },
        )
    if backend == "grain":
        import grain

        return grain.MapDataset.source(ids).map(element)
    raise ValueError(backend)


def make_loader(backend: str, layout, ids, **kwargs):
    import jaxload

    ds = make_dataset(backend, ids)
    make = jaxload.from_tf_data if backend == "tf" else jaxload.from_grain
    return make(ds, layout, **kwargs)


def record(batch) -> dict:
    """Per leaf: what every addressable shard holds, read from the arrays themselves."""
    import jax

    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(batch)[0]:
        shards = []
        for s in leaf.addressable_shards:
            rows = s.index[0]
            shards.append((s.device.id, s.device.process_index, rows.start or 0,
                           rows.stop if rows.stop is not None else leaf.shape[0],
                           np.asarray(s.data)))
        out[jax.tree_util.keystr(path)] = dict(shape=leaf.shape, dtype=str(leaf.dtype), shards=shards)
    return out


def record_epoch(backend: str, layout_name: str, num_elements: int, global_batch_size: int,
                 shard_by: str = "plan") -> dict:
    """Worker side: one epoch of a loader, recorded step by step.

    ``shard_by="process_index"`` reproduces the common bug of sharding the pipeline by process
    instead of by loading group (``shard=False`` on ``ids[process_index::process_count]``);
    ``shard_by="load_once"`` loads each row on one process and reshards on device.
    """
    import jax

    layout = make_layout(layout_name)
    if shard_by in ("plan", "load_once"):
        loader = make_loader(backend, layout, range(num_elements),
                             global_batch_size=global_batch_size, load_once=shard_by == "load_once")
    else:
        ids = range(num_elements)[jax.process_index()::jax.process_count()]
        loader = make_loader(backend, layout, ids, global_batch_size=global_batch_size,
                             shard=False, checks="never")  # seen from outside, not by jaxload
    return record_loader(loader, [record(batch) for batch in loader])


def record_loader(loader, steps: list[dict]) -> dict:
    """What a process loads (``loader.plan``) and where the layout puts rows (its own plan)."""
    import jax

    p, placed = loader.plan, loader.layout.plan(loader.plan.global_batch_size)
    return dict(process_index=jax.process_index(), shard_index=p.shard_index,
                shard_count=p.shard_count, local_batch_size=p.local_batch_size,
                global_rows=placed.global_rows, device_rows=placed.device_rows, steps=steps)


def global_rows(step: dict, leaf: str, results: list[dict]) -> dict[int, np.ndarray]:
    """Row -> value of one leaf over all processes' shards; asserts replicas agree."""
    rows: dict[int, np.ndarray] = {}
    for result in results:
        for device, process, start, stop, data in result["steps"][step][leaf]["shards"]:
            assert data.shape[0] == stop - start
            for r in range(start, stop):
                value = data[r - start]
                if r in rows:
                    assert np.array_equal(rows[r], value), (
                        f"step {step} {leaf} row {r}: device {device} (process {process}) holds "
                        f"{value}, another device holds {rows[r]}")
                else:
                    rows[r] = value
    return rows


def verify_steps(results: list[dict], global_batch_size: int) -> tuple[list[int], list[set[int]]]:
    """Parent side, every step: each device holds the rows the layout gives it, replicas agree,
    every row's features match its id, no id twice in a step. Rows whose ``mask`` is False
    (padding) are left out.

    Returns the ids of all steps in order, and the ids each process holds.
    """
    num_steps = {len(r["steps"]) for r in results}
    assert len(num_steps) == 1, f"processes ran different numbers of steps: {num_steps}"
    seen: list[int] = []
    loaded = [set() for _ in results]
    for step in range(min(num_steps)):
        for r in results:  # each device holds exactly the rows the plan gives it
            start = r["global_rows"][0]
            placed = {(d, a - start, b - start) for d, _, a, b, _ in r["steps"][step]["['id']"]["shards"]}
            assert placed == set(r["device_rows"]), (placed, r["device_rows"])
        ids = global_rows(step, "['id']", results)
        assert sorted(ids) == list(range(global_batch_size))
        if "['mask']" in results[0]["steps"][step]:
            mask = global_rows(step, "['mask']", results)
            ids = {row: i for row, i in ids.items() if mask[row]}
        for leaf in ("['x']", "['pair'][0]", "['pair'][1]", "['img']"):
            rows = global_rows(step, leaf, results)
            for row, i in ids.items():
                expected = {"['x']": i * 10 + np.arange(3), "['pair'][0]": 2 * i,
                            "['pair'][1]": i % 2 == 0, "['img']": [[i, -i], [i, -i]]}[leaf]
                assert np.array_equal(rows[row], expected), (step, leaf, row, i, rows[row])
        step_ids = [int(i) for i in ids.values()]
        assert len(set(step_ids)) == len(step_ids), f"step {step} repeats ids"
        seen += step_ids
        for r, mine in zip(results, loaded, strict=True):
            shards = r["steps"][step]["['id']"]["shards"]
            masks = r["steps"][step].get("['mask']", {"shards": [None] * len(shards)})["shards"]
            for shard, mask in zip(shards, masks, strict=True):
                mine.update(int(i) for k, i in enumerate(shard[-1]) if mask is None or mask[-1][k])
    return seen, loaded


def verify_epoch(results: list[dict], num_elements: int, global_batch_size: int) -> list[set[int]]:
    """Parent side: placement, replication, no duplicates, every full-batch element delivered.

    Returns the ids each process loaded.
    """
    shard_count = results[0]["shard_count"]
    local = results[0]["local_batch_size"]
    groups = [list(range(num_elements))[g::shard_count] for g in range(shard_count)]
    expected_steps = min(len(g) // local for g in groups)
    expected_ids = {i for g in groups for i in g[: expected_steps * local]}
    seen, loaded = verify_steps(results, global_batch_size)
    assert len(results[0]["steps"]) == expected_steps
    assert len(seen) == len(set(seen)), "an element appears in two steps"
    assert set(seen) == expected_ids
    return loaded


def make_data_loader(layout, num_elements: int, global_batch_size: int, worker_count: int = 0,
                     shard_options=None):
    """A grain.DataLoader over ``element(i)``, sharded by loading group unless told otherwise."""
    import grain

    import jaxload

    class ToElement(grain.transforms.Map):
        def map(self, i):
            return element(int(i))

    plan = layout.plan(global_batch_size)
    options = shard_options or jaxload.grain_shard_options(layout, global_batch_size)
    sampler = grain.samplers.IndexSampler(num_records=num_elements, shard_options=options,
                                          shuffle=True, num_epochs=1, seed=7)
    return grain.DataLoader(data_source=list(range(num_elements)), sampler=sampler,
                            operations=[ToElement(),
                                        grain.transforms.Batch(plan.local_batch_size, True)],
                            worker_count=worker_count)
