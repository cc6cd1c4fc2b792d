"""The check module in real runs: correct batches pass; a tampered shard, duplicated loading and
mismatched plans are reported on every process, naming the processes at fault."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxload
import jaxload.testing


def _error(fn) -> str | None:
    try:
        fn()
    except Exception as e:  # the test inspects which error each process saw
        return f"{type(e).__name__}: {e}"
    return None


def tamper(batch, device_id: int):
    """The same global arrays, with the shard on ``device_id`` (if local) changed by +1."""
    def rebuild(leaf):
        arrays = []
        for s in leaf.addressable_shards:
            data = np.asarray(s.data)
            if s.device.id == device_id:
                data = data + np.ones_like(data)
            arrays.append(jax.device_put(data, s.device))
        return jax.make_array_from_single_device_arrays(leaf.shape, leaf.sharding, arrays)

    return jax.tree_util.tree_map(rebuild, batch)


def replication_scenarios(layout_name: str):
    from placement import make_layout, make_loader

    layout = make_layout(layout_name)
    loader = make_loader("grain", layout, range(64), global_batch_size=16)
    batch = next(iter(loader))  # the loader's own first-step check passed
    victim = max(d.id for d in jax.devices() if d.process_index == jax.process_count() - 1)
    tampered = tamper(batch, victim)
    return {
        "correct": _error(lambda: jaxload.check.replication(batch)),
        "tampered": _error(lambda: jaxload.check.replication(tampered)),
        "victim": victim,
        # the loader's default first-step check catches sharding by process index
        "by_process": _error(lambda: next(iter(make_loader(
            "grain", layout, range(64)[jax.process_index()::jax.process_count()],
            global_batch_size=16, shard=False)))),
    }


@pytest.mark.cluster
@pytest.mark.parametrize("topology,layout_name", [((4, 2), "across_processes"),
                                                  ((2, 4), "in_process")])
def test_replication(clusters, topology, layout_name):
    outcomes = clusters.run(replication_scenarios, num_processes=topology[0],
                            local_devices=topology[1], args=(layout_name,), timeout_s=180)
    last = topology[0] - 1
    for o in outcomes:  # every process reaches the same verdict
        assert o["correct"] is None
        assert o["tampered"].startswith("ReplicationError: batch['")
        assert f"devices {o['victim']} (process {last}) hold version" in o["tampered"]
    if layout_name == "across_processes":
        for o in outcomes:
            assert o["by_process"].startswith("ReplicationError:"), o["by_process"]
    else:  # replicas inside a process: sharding by process index is harmless there
        assert all(o["by_process"] is None for o in outcomes)


def distinct_scenarios():
    import grain

    from placement import make_layout, make_loader

    layout = make_layout("data_parallel")
    same = make_loader("tf", layout, range(64), global_batch_size=16, shard=False,
                       checks="never")  # every process loads the same elements
    right = make_loader("tf", layout, range(64), global_batch_size=16, checks="never")
    padded = make_loader("grain", layout, range(64, 64 + 17), global_batch_size=16,
                         remainder="pad", checks="never")
    last = list(padded)[-1]  # two all-padding blocks: identical, and legitimately so
    defaults = make_loader("grain", layout, range(64), global_batch_size=16, shard=False)
    # each record twice in a row, split by jaxload (by index): each step gives both loading
    # groups the same blocks, the data's own, so its checks compare replicas only
    pairs = jaxload.from_grain(grain.MapDataset.range(64).map(lambda i: {"x": np.float32(i // 2)}),
                               layout, global_batch_size=16, checks=2)
    rows: list[float] = []
    return {
        "same": _error(lambda: jaxload.check.distinct(next(iter(same)))),
        "right": _error(lambda: jaxload.check.distinct(next(iter(right)))),
        "padding": _error(lambda: jaxload.check.batch(last)),
        "loader_default": _error(lambda: next(iter(defaults))),
        "pairs": _error(lambda: rows.extend(float(v) for b in pairs
                                            for s in b["x"].addressable_shards
                                            for v in np.asarray(s.data))),
        "pairs_rows": rows,
    }


@pytest.mark.cluster
def test_distinct(clusters):
    outcomes = clusters.run(distinct_scenarios, num_processes=2, local_devices=4,
                            timeout_s=180)
    for o in outcomes:
        assert o["same"].startswith("DuplicationError: different rows of the batch hold identical")
        assert "rows [0, 2) on devices 0 (process 0); rows [8, 10) on devices 2048 (process 1)" \
            in o["same"]
        assert o["right"] is None
        assert o["padding"] is None
        assert o["loader_default"].startswith("DuplicationError:")
        assert o["pairs"] is None
    assert sorted(outcomes[0]["pairs_rows"] + outcomes[1]["pairs_rows"]) == [
        float(i // 2) for i in range(64)]


def first_round_scenarios():
    """Which exchanges check a pass's first step: counted by wrapping the check's own."""
    from jaxload._src import check as check_impl
    from placement import make_loader

    calls, checked = [], check_impl._checked
    check_impl._checked = lambda kind, *a, **k: (calls.append(kind), checked(kind, *a, **k))[1]

    def run(make):
        calls.clear()
        return {"error": _error(lambda: [np.asarray(b).tolist() for b in make()]),
                "checks": list(calls)}

    layout = jaxload.data_parallel()
    mine = range(64) if jax.process_index() == 0 else range(0)
    try:
        return {
            "default": run(lambda: make_loader("grain", layout, range(64), global_batch_size=16)),
            "same_rows": run(lambda: make_loader("grain", layout, range(64), global_batch_size=16,
                                                 shard=False)),
            # process 1 has no first batch: it pads, so the loop's side checks
            "one_empty": run(lambda: make_loader("grain", layout, mine, global_batch_size=16,
                                                 shard=False, remainder="pad")),
            "load_once": run(lambda: make_loader(
                "grain", jaxload.model_replicas_across_processes(2), range(64),
                global_batch_size=16, load_once=True)),
        }
    finally:
        check_impl._checked = checked


@pytest.mark.cluster
def test_the_first_step_s_check_rides_the_first_round(clusters):
    """Each process assembles its first step before the pass's first round and sends the check's
    records in its report: no exchange of its own, the same verdict on every process. Where a
    process has no first batch, or the batch is resharded on the loop's side, the check runs
    there as before."""
    outcomes = clusters.run(first_round_scenarios, num_processes=2, local_devices=4,
                            timeout_s=180)
    for o in outcomes:
        assert o["default"] == {"error": None, "checks": []}
        assert o["same_rows"]["error"].startswith("DuplicationError: different rows of the batch")
        assert o["same_rows"]["checks"] == []
        assert o["one_empty"] == {"error": None, "checks": ["plan-batch"]}
        assert o["load_once"] == {"error": None, "checks": ["plan-batch"]}
    assert outcomes[0]["same_rows"] == outcomes[1]["same_rows"]


def plan_scenarios():
    from jaxload._src.check import plan_and_batch

    layout = jaxload.data_parallel()
    gbs = 16 if jax.process_index() != 1 else 32
    same = jax.make_array_from_process_local_data(  # every process the same rows
        layout.sharding, np.arange(8.0).reshape(4, 2), (16, 2))
    return {
        "same": _error(lambda: jaxload.check.plan(layout, 16)),
        "differ": _error(lambda: jaxload.check.plan(layout, gbs)),
        # a pass's first step: one exchange, the plan compared before the batch
        "first_differ": _error(lambda: plan_and_batch(layout, gbs, same)),
        "first_same": _error(lambda: plan_and_batch(layout, 16, same)),
    }


@pytest.mark.cluster
def test_plan(clusters):
    outcomes = clusters.run(plan_scenarios, num_processes=4, local_devices=2, timeout_s=120)
    for o in outcomes:
        assert o["same"] is None
        assert o["differ"].startswith("PlanMismatchError: processes [1] use a different layout")
        assert "process 1: mesh {'data': 8}, batch_axes ('data',), global_batch_size 32" in o["differ"]
        assert o["first_differ"] == o["differ"]
        assert o["first_same"].startswith("DuplicationError: different rows of the batch hold")


def test_single_process_checks():
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))
    layout = jaxload.Layout(mesh, "data")  # two row blocks, each on 4 devices
    plan = layout.plan(8)
    batch = jaxload.assemble({"x": np.arange(8.0), "y": np.arange(8) % 2}, plan)
    jaxload.check.batch(batch)
    with pytest.raises(jaxload.ReplicationError,
                       match=r"batch\['x'\] rows \[0, 4\).*: devices 1 \(process 0\) hold version 1; "
                             r"devices 0 \(process 0\), 2 \(process 0\), 3 \(process 0\) hold version 2; "
                             r"the devices of version 1 are the minority"):
        jaxload.check.replication(tamper(batch, 1))
    dup = jaxload.assemble({"x": np.tile(np.arange(4.0), 2), "y": np.zeros(8)}, plan)
    with pytest.raises(jaxload.DuplicationError,
                       match=r"rows \[0, 4\) on devices 0 \(process 0\), 1 \(process 0\)"):
        jaxload.check.distinct(dup)
    with pytest.raises(ValueError, match=r"checks='sometimes' must be 'first', 'never' or a positive int"):
        jaxload.from_grain(__import__("grain").MapDataset.range(8), layout, global_batch_size=8,
                           checks="sometimes")


def test_a_few_alike_records_are_no_duplicate_loading():
    # 8 row blocks of one row: a record that starts every file (a header), met twice in a step,
    # is legitimate; half the blocks or more with a twin is duplicate loading
    layout = jaxload.data_parallel()
    plan = layout.plan(8)
    def rows(ids):  # a record of 3 distinct values per id (no block is one repeated value)
        return {"x": np.array([[3 * i, 3 * i + 1, 3 * i + 2] for i in ids], np.float32)}

    jaxload.check.distinct(jaxload.assemble(rows([0, 1, 2, 3, 0, 5, 6, 7]), plan))
    half = jaxload.assemble(rows([0, 1, 0, 1, 4, 5, 6, 7]), plan)
    with pytest.raises(jaxload.DuplicationError, match=r"rows \[0, 1\) on devices 0 \(process 0\); "
                                                       r"rows \[2, 3\) on devices 2"):
        jaxload.check.distinct(half)
