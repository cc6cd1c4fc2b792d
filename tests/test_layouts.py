"""Plan arithmetic over simulated topologies, checked against the JAX guide's formulas."""

from __future__ import annotations

import importlib
import re
import sys

import numpy as np
import pytest
from jax.sharding import Mesh

import jaxload

TOPOLOGIES = [(1, 8), (2, 4), (4, 2), (8, 1), (16, 8), (512, 8)]
LAYOUTS = ["data_parallel", "in_process", "across_processes"]


def build(layout: str, processes: int, local: int, model_size: int = 2) -> jaxload.Layout:
    devices = jaxload.simulated_devices(processes, local)
    if layout == "data_parallel":
        return jaxload.data_parallel(devices=devices)
    if layout == "in_process":
        return jaxload.model_replicas_in_process(model_size, devices=devices)
    return jaxload.model_replicas_across_processes(model_size, devices=devices)


def expected_plan(layout: str, processes: int, local: int, model_size: int, gbs: int, p: int):
    """(shard_index, shard_count, device rows within the per-process batch) from the guide."""
    if layout == "data_parallel":
        rows = gbs // (processes * local)
        return p, processes, [(p * local + d, d * rows, (d + 1) * rows) for d in range(local)]
    if layout == "in_process":
        rows = gbs // (processes * local // model_size)
        return p, processes, [(p * local + d, d // model_size * rows, (d // model_size + 1) * rows)
                              for d in range(local)]
    groups = processes // model_size
    rows = gbs // (groups * local)
    return p % groups, groups, [(p * local + d, d * rows, (d + 1) * rows) for d in range(local)]


def valid(layout: str, processes: int, local: int, model_size: int) -> bool:
    return {"data_parallel": True, "in_process": local % model_size == 0,
            "across_processes": processes % model_size == 0}[layout]


CASES = [(layout, p, d, m) for layout in LAYOUTS for p, d in TOPOLOGIES for m in (1, 2)
         if valid(layout, p, d, m) and not (layout == "data_parallel" and m == 2)]


@pytest.mark.parametrize("layout,processes,local,model_size", CASES)
@pytest.mark.parametrize("per_shard", [1, 3, 16])
def test_plans_match_the_guide(layout, processes, local, model_size, per_shard):
    lay = build(layout, processes, local, model_size)
    shards = lay.num_batch_shards
    assert shards == processes * local // (1 if layout == "data_parallel" else model_size)
    gbs = per_shard * shards
    plans = lay.plans(gbs)
    assert [p.process_index for p in plans] == list(range(processes))
    for p, plan in enumerate(plans):
        shard_index, shard_count, device_rows = expected_plan(
            layout, processes, local, model_size, gbs, p)
        assert (plan.shard_index, plan.shard_count) == (shard_index, shard_count)
        assert plan.local_batch_size == gbs // shard_count
        assert plan.global_rows == (shard_index * plan.local_batch_size,
                                    (shard_index + 1) * plan.local_batch_size)
        assert list(plan.device_rows) == device_rows
        assert plan.per_replica_batch_size == per_shard
        assert p in plan.loading_groups[plan.shard_index]
    # every row is loaded by exactly one loading group
    groups = plans[0].loading_groups
    assert sorted(q for g in groups for q in g) == list(range(processes))
    assert len({plans[g[0]].global_rows for g in groups}) == len(groups)


def test_guide_example_four_processes_replicas_across():
    lay = build("across_processes", 4, 2)
    plans = lay.plans(16)
    assert plans[0].loading_groups == ((0, 2), (1, 3))
    assert plans[0].global_rows == plans[2].global_rows == (0, 8)
    assert plans[1].global_rows == plans[3].global_rows == (8, 16)
    # each replica (a mesh row) has one device on each process of its group
    for replica in lay.mesh.devices:
        assert len({d.process_index for d in replica}) == 2


def test_plan_for_this_process_defaults_to_process_zero_on_simulated_devices():
    lay = build("data_parallel", 4, 2)
    assert lay.plan(8).process_index == 0
    assert lay.plan(8, process_index=3).global_rows == (6, 8)
    with pytest.raises(ValueError, match="process_index=4 has no device"):
        lay.plan(8, process_index=4)


@pytest.mark.parametrize("gbs", [0, -8, 12, 8.0, True, None])
def test_bad_global_batch_size_names_the_numbers(gbs):
    lay = build("data_parallel", 2, 4)
    with pytest.raises(ValueError, match=rf"global_batch_size={gbs!r}.*8 batch shards.*data=8"):
        lay.plan(gbs)


def test_bad_global_batch_size_suggests_neighbours():
    with pytest.raises(ValueError, match="e.g. 8 or 16"):
        build("data_parallel", 2, 4).plan(12)


@pytest.mark.parametrize(
    "layout,processes,local,model_size,message",
    [
        ("in_process", 2, 4, 3, "model_size=3 does not divide the 4 local devices per process"),
        ("across_processes", 4, 2, 3, "model_size=3 does not divide the 4 processes"),
        ("across_processes", 2, 4, 4, "model_size=4 does not divide the 2 processes"),
        ("in_process", 2, 4, 0, "model_size must be a positive int, got 0"),
    ],
)
def test_model_size_must_divide_the_topology(layout, processes, local, model_size, message):
    with pytest.raises(ValueError, match=message):
        build(layout, processes, local, model_size)


def test_non_contiguous_rows_are_refused():
    d = jaxload.simulated_devices(2, 2)
    mesh = Mesh(np.array([d[0], d[2], d[1], d[3]]), ("data",))  # process 0 at positions 0 and 2
    with pytest.raises(ValueError, match=r"process 0's devices need rows \[0, 2\), \[4, 6\)"):
        jaxload.Layout(mesh, "data").plan(8)


def test_unequal_devices_per_process_are_refused():
    devices = jaxload.simulated_devices(2, 4)[:7]
    with pytest.raises(ValueError, match=r"same number of devices, got \{0: 4, 1: 3\}"):
        jaxload.model_replicas_in_process(1, devices=devices)


def test_any_mesh_two_batch_axes_and_full_replication():
    devices = np.array(jaxload.simulated_devices(2, 4)).reshape(2, 2, 2)
    mesh = Mesh(devices, ("data", "fsdp", "model"))
    two_axes = jaxload.Layout(mesh, ("data", "fsdp"))
    assert two_axes.num_batch_shards == 4
    assert [p.shard_index for p in two_axes.plans(8)] == [0, 1]
    replicated = jaxload.Layout(mesh, ())
    plans = replicated.plans(5)
    assert [(p.shard_index, p.shard_count, p.local_batch_size) for p in plans] == [(0, 1, 5)] * 2


def test_layout_rejects_unknown_axes():
    mesh = Mesh(np.array(jaxload.simulated_devices(1, 2)), ("data",))
    with pytest.raises(ValueError, match=r"batch_axes=\('batch',\) must be distinct axes of the mesh"):
        jaxload.Layout(mesh, "batch")
    with pytest.raises(TypeError, match="mesh must be a jax.sharding.Mesh"):
        jaxload.Layout("mesh", "data")


def test_plan_is_frozen():
    plan = build("data_parallel", 2, 4).plan(8)
    with pytest.raises(AttributeError):
        plan.shard_index = 1


@pytest.mark.parametrize("bad,error", [(True, TypeError), (2.0, TypeError), ("2", TypeError),
                                       (0, ValueError), (-1, ValueError)])
def test_counts_are_positive_ints_and_a_bool_is_not_one(bad, error):
    devices = jaxload.simulated_devices(2, 4)
    with pytest.raises(error, match=re.escape(f"model_size must be a positive int, got {bad!r}")):
        jaxload.model_replicas_in_process(bad, devices=devices)
    with pytest.raises(error, match=re.escape(f"model_size must be a positive int, got {bad!r}")):
        jaxload.model_replicas_across_processes(bad, devices=devices)
    with pytest.raises(error, match=re.escape(f"num_processes must be a positive int, got {bad!r}")):
        jaxload.simulated_devices(bad, 2)
    with pytest.raises(error, match=re.escape(f"local_devices must be a positive int, got {bad!r}")):
        jaxload.simulated_devices(2, bad)


def test_the_old_module_path_still_has_the_layout_names():
    sys.modules.pop("jaxload.layouts", None)
    with pytest.warns(DeprecationWarning, match=r"jaxload\.layouts is private now"):
        layouts = importlib.import_module("jaxload.layouts")
    for name in ("Layout", "Plan", "SimulatedDevice", "data_parallel", "model_replicas_in_process",
                 "model_replicas_across_processes", "simulated_devices"):
        assert getattr(layouts, name) is getattr(jaxload, name)


@pytest.mark.cluster
def test_docstring_examples():
    """Every example of the layout modules, the public classes' methods' too: ``pytest
    --doctest-modules`` finds those classes under ``jaxload`` (the module they report), without
    their methods."""
    import doctest

    import jax

    from jaxload._src import feature_specs, layout, plan, topology, validate

    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    extraglobs = {"jax": jax, "jaxload": jaxload, "np": np}
    tests = [t for m in (feature_specs, layout, plan, topology, validate)
             for t in finder.find(m, extraglobs=extraglobs)]
    tests += [t for cls in (jaxload.Layout, jaxload.Plan, jaxload.SimulatedDevice)
              for t in finder.find(cls, module=False, extraglobs=extraglobs)]
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted >= 20 and result.failed == 0
