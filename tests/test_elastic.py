"""Resuming on another topology, in real processes, verified by the parent from the shards.

One chain of four runs over the same 203 elements, each restoring what the run before saved:

  A: 2 processes x 4 devices, data parallel, global batch 16, 3 steps, save
  B: 4 x 2, model replicas across processes, global batch 24, 2 steps, save
  C: 1 x 8, data parallel, global batch 32, 2 steps, save
  D: 2 x 4, model replicas in process, global batch 8, to the end

for tf.data and Grain (a plain and a shuffled MapDataset), with the state saved as JSON or with
Orbax (``jaxload.checkpoint`` next to model params, async), in ``"pad"`` and ``"drop"`` modes.
The parent checks every step's placement, that step s of each run holds exactly rows
[origin + s * G, origin + (s + 1) * G) of the global order, and over the whole chain that in pad
mode every element arrives exactly once and in drop mode none twice, only D's last incomplete
batch missing.
"""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

import grain
import numpy as np
import pytest

import jaxload
import jaxload.testing
from placement import global_rows, verify_steps

N = 203
# name, topology (processes, devices each), layout, global batch size, steps (None: to the end)
CHAIN = [
    ("A", (2, 4), "data_parallel", 16, 3),
    ("B", (4, 2), "across_processes", 24, 2),
    ("C", (1, 8), "data_parallel", 32, 2),
    ("D", (2, 4), "in_process", 8, None),
]
CASES = [
    dict(name="tf-pad-json", backend="tf", remainder="pad", orbax=False, shuffled=False),
    dict(name="tf-drop-orbax", backend="tf", remainder="drop", orbax=True, shuffled=False),
    dict(name="grain-pad-orbax", backend="grain", remainder="pad", orbax=True, shuffled=False),
    dict(name="grain-drop-json", backend="grain", remainder="drop", orbax=False, shuffled=False),
    dict(name="shuffled-pad-orbax", backend="grain", remainder="pad", orbax=True, shuffled=True),
    # Orbax's v1 API: the loader itself is a StatefulCheckpointable
    dict(name="grain-drop-orbax-v1", backend="grain", remainder="drop", orbax="v1",
         shuffled=False),
]
SEED = 5


def global_order(case: dict) -> list[int]:
    """The pipeline's global (unsharded) order of element ids."""
    if case["shuffled"]:
        return list(grain.MapDataset.source(list(range(N))).shuffle(seed=SEED))
    return list(range(N))


def build(case: dict, layout, global_batch_size: int):
    from placement import element, make_loader

    kwargs = dict(global_batch_size=global_batch_size, remainder=case["remainder"])
    if case["shuffled"]:
        ds = grain.MapDataset.source(list(range(N))).shuffle(seed=SEED).map(element)
        return jaxload.from_grain(ds, layout, **kwargs)
    return make_loader(case["backend"], layout, range(N), **kwargs)


def replicated(layout, value: int):
    import jax

    sharding = jax.sharding.NamedSharding(layout.mesh, jax.sharding.PartitionSpec())
    return jax.make_array_from_callback((), sharding, lambda _: np.int32(value))


def ids_on_devices(batch) -> dict:
    return {s.device.id: np.asarray(s.data) for s in batch["id"].addressable_shards}


def restore(case: dict, loader, layout, directory: Path) -> int | None:
    """Restores ``loader`` from the run before; returns the params restored next to it."""
    import jax
    import orbax.checkpoint as ocp

    abstract = jax.ShapeDtypeStruct((), np.int32, sharding=jax.sharding.NamedSharding(
        layout.mesh, jax.sharding.PartitionSpec()))
    if case["orbax"] == "v1":
        restored = ocp.v1.load_checkpointables(directory.absolute(),
                                               {"params": {"rows": abstract}, "loader": loader})
        assert restored["loader"] is loader
        return int(restored["params"]["rows"])
    if case["orbax"]:
        with closing(ocp.CheckpointManager(directory.absolute())) as manager:
            restored = manager.restore(manager.latest_step(), args=ocp.args.Composite(
                params=ocp.args.StandardRestore({"rows": abstract}),
                data=jaxload.checkpoint.CheckpointRestore(loader)))
        return int(restored["params"]["rows"])
    files = sorted(directory.glob("loader_*.json"))  # another process's state where there is one
    loader.set_state(json.loads(files[(jax.process_index() + 1) % len(files)].read_text()))
    return None


def save(case: dict, loader, layout, batches, directory: Path, build_again) -> dict:
    """Saves the state; with Orbax (async) the loader moves on before the save is waited for,
    and a fresh loader restored from it on this topology must give that same next batch."""
    import jax
    import orbax.checkpoint as ocp

    state = loader.get_state()
    if not case["orbax"]:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"loader_{jax.process_index()}.json").write_text(json.dumps(state))
        return {}
    if case["orbax"] == "v1":
        response = ocp.v1.save_checkpointables_async(directory.absolute(), {
            "params": {"rows": replicated(layout, state["rows"])}, "loader": loader})
        expected = ids_on_devices(next(batches))  # handed out while the save may still write
        response.result()
        fresh = build_again()
        ocp.v1.load_checkpointables(directory.absolute(), {"loader": fresh})
        return {"same_topology": (expected, ids_on_devices(next(iter(fresh))))}
    with closing(ocp.CheckpointManager(directory.absolute(), options=ocp.CheckpointManagerOptions(
            enable_async_checkpointing=True))) as manager:
        manager.save(1, args=ocp.args.Composite(
            params=ocp.args.StandardSave({"rows": replicated(layout, state["rows"])}),
            data=jaxload.checkpoint.CheckpointSave(loader)))
        expected = ids_on_devices(next(batches))  # handed out while the save may still be writing
        manager.wait_until_finished()
    fresh = build_again()
    with closing(ocp.CheckpointManager(directory.absolute())) as manager:
        manager.restore(1, args=ocp.args.Composite(data=jaxload.checkpoint.CheckpointRestore(fresh)))
    return {"same_topology": (expected, ids_on_devices(next(iter(fresh))))}


def chain_run(layout_name: str, global_batch_size: int, steps: int | None, cases: list[dict],
              restore_from: str | None, save_to: str | None) -> dict:
    from placement import make_layout, record, record_loader

    layout = make_layout(layout_name)
    out = {}
    for case in cases:
        loader = build(case, layout, global_batch_size)
        params = None
        if restore_from:
            params = restore(case, loader, layout, Path(restore_from, case["name"]))
        batches = iter(loader)
        recorded = [record(next(batches)) for _ in range(steps)] if steps else [
            record(b) for b in batches]
        result = dict(record_loader(loader, recorded), state=loader.get_state(), params=params)
        if save_to:
            result.update(save(case, loader, layout, batches, Path(save_to, case["name"]),
                               lambda: build(case, layout, global_batch_size)))  # noqa: B023
        out[case["name"]] = result
    return out


def delivered(results: list[dict], step: int) -> list[int]:
    """The real (masked-in) element ids of one step, over all processes' shards."""
    ids = global_rows(step, "['id']", results)
    if "['mask']" in results[0]["steps"][step]:
        mask = global_rows(step, "['mask']", results)
        ids = {row: i for row, i in ids.items() if mask[row]}
    return [int(i) for i in ids.values()]


@pytest.fixture(scope="module")
def chain(clusters, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("elastic")
    runs = {}
    for i, (name, (processes, devices), layout, batch, steps) in enumerate(CHAIN):
        args = (layout, batch, steps, CASES, str(root / CHAIN[i - 1][0]) if i else None,
                str(root / name) if steps else None)
        runs[name] = clusters.run(chain_run, num_processes=processes,
                                  local_devices=devices, args=args, timeout_s=300)
    return runs


@pytest.mark.cluster
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_a_chain_of_topologies_continues_at_the_global_row(chain, case):
    order, origin, everything, previous = global_order(case), 0, [], None
    for name, _, _, batch, steps in CHAIN:
        results = [per_process[case["name"]] for per_process in chain[name]]
        verify_steps(results, batch)  # placement, replicas, features match ids
        for step in range(len(results[0]["steps"])):
            ids = delivered(results, step)
            rows = order[origin + step * batch: origin + (step + 1) * batch]
            assert sorted(ids) == sorted(rows), (name, step)
            everything += ids
        states = [r["state"] for r in results]
        # every process records the same global row; after a whole pass, the start again
        assert {s["rows"] for s in states} == {origin + steps * batch if steps else 0}
        if case["orbax"] and previous is not None:  # params restored next to the loader
            assert {r["params"] for r in results} == {previous}
        if case["orbax"] and "same_topology" in results[0]:
            for r in results:
                expected, got = r["same_topology"]
                assert expected.keys() == got.keys()
                for device in expected:
                    np.testing.assert_array_equal(expected[device], got[device])
        origin = previous = states[0]["rows"]
    assert len(everything) == len(set(everything)), "an element was delivered twice"
    if case["remainder"] == "pad":
        assert sorted(everything) == list(range(N))
    else:  # only D's last, incomplete batch is missing
        assert set(order) - set(everything) == set(order[200:])


# Single-process checks of what is accepted and refused, and of Orbax's validation.

def grain_ds(n: int = 64):
    return grain.MapDataset.range(n).map(lambda i: {"id": np.int32(i)})


def state_after(loader, steps: int) -> dict:
    batches = iter(loader)
    for _ in range(steps):
        next(batches)
    return json.loads(json.dumps(loader.get_state()))


def test_a_grain_state_s_fingerprint_does_not_change_between_versions():
    # the value a state of this dataset held in jaxload 0.2.0: a state saved then must resume
    loader = jaxload.from_grain(grain_ds(), jaxload.data_parallel(), global_batch_size=16)
    assert state_after(loader, 1)["fingerprint"] == "348370d4ba7a7625"


def test_a_data_loader_continues_at_its_sampler_index_with_another_batch_size():
    from placement import make_data_loader

    layout = jaxload.data_parallel()
    before = jaxload.from_grain(make_data_loader(layout, 100, 16), layout, global_batch_size=16)
    batches = iter(before)
    next(batches), next(batches)
    state = before.get_state()
    rest = np.concatenate([np.asarray(b["id"]) for b in batches])  # rows 32..95, 16 at a time
    after = jaxload.from_grain(make_data_loader(layout, 100, 32), layout, global_batch_size=32)
    after.set_state(state)
    got = [np.asarray(b["id"]) for b in after]  # rows 32..95 again; 96..99 do not fill a batch
    np.testing.assert_array_equal(np.concatenate(got), rest)
    assert len(got) == 2


def test_a_filtered_tf_data_pipeline_continues_at_its_global_row():
    import tensorflow as tf

    def kept(i):
        return i % 3 != 0

    def element(i):
        return {"id": i}

    ds = tf.data.Dataset.range(100).filter(kept).map(element)
    layout = jaxload.data_parallel()
    state = state_after(jaxload.from_tf_data(ds, layout, global_batch_size=8, remainder="pad"), 2)
    after = jaxload.from_tf_data(ds, layout, global_batch_size=16, remainder="pad")
    after.set_state(state)
    got = np.concatenate([np.asarray(b["id"])[np.asarray(b["mask"])] for b in after])
    np.testing.assert_array_equal(got, [i for i in range(100) if i % 3 != 0][16:])


@pytest.mark.parametrize("backend", ["grain", "tf"])
def test_a_padded_global_batch_continues_at_its_global_row(backend):
    from placement import make_loader

    layout = jaxload.data_parallel()  # 8 devices: 12, 13 and 10 rows are padded to 16

    def steps(loader) -> list[list[int]]:
        return [np.asarray(b["id"])[np.asarray(b["mask"])].tolist() for b in loader]

    state = state_after(make_loader(backend, layout, range(50), global_batch_size=12,
                                    remainder="pad"), 2)
    assert state["rows"] == 24 and state["plan"]["rows_per_step"] == 12
    for rows in (13, 10):  # 13: the same plan as 12 (16 rows placed), not the same steps
        after = make_loader(backend, layout, range(50), global_batch_size=rows, remainder="pad")
        after.set_state(state)
        expected = [list(range(start, min(start + rows, 50))) for start in range(24, 50, rows)]
        assert [sorted(ids) for ids in steps(after)] == expected


def test_states_that_cannot_continue_on_another_topology_are_refused():
    from placement import make_data_loader, make_dataset

    layout = jaxload.data_parallel()
    state = state_after(jaxload.from_grain(grain_ds(), layout, global_batch_size=16), 1)
    refusals = {
        "with shard=False the pipeline holds the elements you split off":
            jaxload.from_grain(grain_ds(), layout, global_batch_size=32, shard=False),
        "a grain.IterDataset cannot start at a given element":
            jaxload.from_grain(grain_ds().to_iter_dataset(), layout, global_batch_size=32,
                               shard=False),
        "with batched=True the elements are whole batches":
            jaxload.from_grain(grain_ds().batch(32), layout, global_batch_size=32, batched=True),
    }
    for match, loader in refusals.items():
        with pytest.raises(ValueError, match=r"global_batch_size=16 in the state, "
                           r"global_batch_size=32 in this loader's plan\. .*" + match):
            loader.set_state(state)
    tf_state = state_after(jaxload.from_tf_data(make_dataset("tf", range(64)), layout,
                                                global_batch_size=16), 1)
    with pytest.raises(ValueError, match="with shard=False the pipeline holds the elements"):
        jaxload.from_tf_data(make_dataset("tf", range(64)), layout, global_batch_size=32,
                             shard=False).set_state(tf_state)
    dl_state = state_after(jaxload.from_grain(make_data_loader(layout, 64, 16), layout,
                                              global_batch_size=16), 1)
    with pytest.raises(ValueError, match=r"the grain.DataLoader has worker_count > 0"):
        jaxload.from_grain(make_data_loader(layout, 64, 32, worker_count=1), layout,
                           global_batch_size=32).set_state(dl_state)
    two_groups = {**dl_state, "plan": {**dl_state["plan"], "shard_count": 2}}
    with pytest.raises(ValueError, match=r"depends on shard_count \(2 in the state, 1 here\)"):
        jaxload.from_grain(make_data_loader(layout, 64, 32), layout,
                           global_batch_size=32).set_state(two_groups)
    kept = grain_ds(100).filter(lambda e: e["id"] % 3 != 0)
    with pytest.raises(ValueError, match="the MapDataset drops elements .filter.: the state's "
                       "loading group read 24 indices for 16 rows"):
        jaxload.from_grain(kept, layout, global_batch_size=16).set_state(
            state_after(jaxload.from_grain(kept, layout, global_batch_size=8), 2))
    old = {k: v for k, v in state.items() if k not in ("rows", "origin", "length")}
    with pytest.raises(ValueError, match="has no global row position"):
        jaxload.from_grain(grain_ds(), layout, global_batch_size=32).set_state(
            {**old, "format": "jaxload.loader/1"})


def test_orbax_restore_names_what_changed(tmp_path):
    import orbax.checkpoint as ocp

    layout = jaxload.data_parallel()
    loader = jaxload.from_grain(grain_ds(), layout, global_batch_size=16)
    state_after(loader, 2)
    manager = ocp.CheckpointManager(tmp_path)
    manager.save(2, args=ocp.args.Composite(data=jaxload.checkpoint.CheckpointSave(loader)))
    manager.wait_until_finished()
    assert manager.item_metadata(2)["data"]["rows"] == 32
    changed = {
        r"remainder='drop', this loader has remainder='pad'":
            jaxload.from_grain(grain_ds(), layout, global_batch_size=16, remainder="pad"),
        r"length=64, this loader has length=80":
            jaxload.from_grain(grain_ds(80), layout, global_batch_size=16),
        r"fingerprint='[0-9a-f]{16}', this loader has fingerprint='[0-9a-f]{16}'":
            jaxload.from_grain(grain_ds().shuffle(seed=1), layout, global_batch_size=16),
        r"backend='grain', this loader has backend='tf.data'":
            jaxload.from_tf_data(__import__("tensorflow").data.Dataset.range(64), layout,
                                 global_batch_size=16),
    }
    for match, other in changed.items():
        with pytest.raises(ValueError, match=match):
            manager.restore(2, args=ocp.args.Composite(
                data=jaxload.checkpoint.CheckpointRestore(other)))
    with pytest.raises(TypeError, match="CheckpointSave expects a jaxload.Loader, got list"):
        jaxload.checkpoint.CheckpointSave([])


@pytest.mark.cluster
def test_import_jaxload_does_not_import_orbax():
    import subprocess
    import sys

    code = ("import sys, jaxload; assert 'orbax.checkpoint' not in sys.modules; "
            "jaxload.checkpoint.CheckpointHandler; assert 'orbax.checkpoint' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def slow_process_saves(directory: str) -> list[str]:
    """Every process saves the loader with Orbax v1; process 1's file is written 3 s late (a slow
    file system). Returns the files of the committed checkpoint, as this process sees them."""
    import time

    import jax
    import orbax.checkpoint as ocp

    from jaxload._src import checkpoint_files

    loader = jaxload.from_grain(grain_ds(), jaxload.data_parallel(), global_batch_size=16)
    state_after(loader, 2)
    state_file = checkpoint_files.state_file

    def late(*args):
        time.sleep(3)
        return state_file(*args)

    if jax.process_index() == 1:
        checkpoint_files.state_file = late
    try:
        ocp.v1.save_checkpointables(directory, {"loader": loader})
    finally:
        checkpoint_files.state_file = state_file
    return sorted(p.name for p in (Path(directory) / "loader").iterdir())


@pytest.mark.cluster
def test_an_orbax_v1_checkpoint_waits_for_every_process_file(clusters, tmp_path):
    # Orbax's primary process commits once its own writes are done: a slower process's file
    # must still be in the checkpoint, not written into a directory already renamed
    seen = clusters.run(slow_process_saves, num_processes=2, local_devices=2,
                        args=(str(tmp_path / "ckpt"),), timeout_s=120)
    assert seen == [["process_0-of-2.json", "process_1-of-2.json"]] * 2



def resumed_from_process_1(layout_name: str, remainder: str, path: str) -> dict:
    """Worker: the rest of a pass of a shuffled MapDataset (global batch 8) resumed by every
    process from the state process 1 took after 5 steps at 2 processes x 2 devices, recorded
    from the arrays."""
    import jax
    from jax.experimental import multihost_utils

    from placement import record

    def ds():
        return grain.MapDataset.range(203).shuffle(seed=7).map(lambda i: {"id": np.int64(i)})

    taken = jaxload.from_grain(ds(), jaxload.data_parallel(), global_batch_size=8,
                               remainder=remainder)
    with closing(iter(taken)) as steps:
        for _ in range(5):
            next(steps)
    if jax.process_index() == 1:
        Path(path).write_text(json.dumps(taken.get_state()))
    multihost_utils.sync_global_devices("state written")
    layout = (jaxload.data_parallel() if layout_name == "data_parallel" else
              jaxload.model_replicas_across_processes(2))
    loader = jaxload.from_grain(ds(), layout, global_batch_size=8, remainder=remainder)
    loader.set_state(json.loads(Path(path).read_text()))
    steps, first = [], None
    for batch in loader:
        steps.append(record(batch))
        first = first or {key: loader.get_state()[key] for key in ("step", "rows")}
    return {"steps": steps, "first": first,
            "order": [int(i) for i in ds().to_iter_dataset().map(lambda e: e["id"])]}


@pytest.mark.cluster
@pytest.mark.parametrize("layout_name", ["data_parallel", "across_processes"])
def test_every_process_resuming_one_process_s_state_continues_at_its_global_row(
        clusters, tmp_path, layout_name):
    # process 1's state handed to every process: the processes of group 1 continued its backend
    # position at step 5, those of group 0 (another shard_index) restarted at its global row at
    # step 0, so that the processes went out of step (rows lost, extra steps, or a failure)
    for remainder, steps in (("drop", 20), ("pad", 21)):
        results = clusters.run(resumed_from_process_1, num_processes=2, local_devices=2,
                               args=(layout_name, remainder, str(tmp_path / "state.json")),
                               timeout_s=240)
        order = results[0]["order"]
        assert [r["first"] for r in results] == [results[0]["first"]] * 2, results  # in step
        assert [len(r["steps"]) for r in results] == [steps] * 2, remainder
        for s in range(steps):
            rows = global_rows(s, "['id']", results)  # (also: the processes agree)
            mask = global_rows(s, "['mask']", results) if remainder == "pad" else None
            expected = order[40 + 8 * s: 48 + 8 * s]  # each step: the next 8 of the order
            real = sorted(int(v) for r, v in rows.items() if mask is None or mask[r])
            assert real == sorted(expected), (remainder, s, real, expected)
