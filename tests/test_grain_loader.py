"""grain.DataLoader input: checked against the plan, placed right, resumable, with workers."""

from __future__ import annotations

import json

import numpy as np
import pytest

import jaxload
import jaxload.testing


def _error(fn):
    try:
        return fn()
    except Exception as e:  # the test inspects which error each process saw
        return f"{type(e).__name__}: {e}"


def ids_of(batch) -> dict:
    return {s.device.id: np.asarray(s.data).tolist() for s in batch["id"].addressable_shards}


def scenarios(worker_count: int):
    import grain
    from absl import flags

    flags.FLAGS.mark_as_parsed()  # Grain's worker processes read absl flags (no app.run here)

    from placement import make_data_loader, make_layout

    layout = make_layout("across_processes")
    out = {}
    # the whole epoch: the loader's first-step check verifies replicas across processes
    dl = make_data_loader(layout, 160, 16, worker_count)
    epoch = [ids_of(b) for b in jaxload.from_grain(dl, layout, global_batch_size=16)]
    out["epoch"] = epoch
    # resume: 3 steps, state, a fresh DataLoader + loader, the same next 2 batches
    loader = jaxload.from_grain(make_data_loader(layout, 160, 16, worker_count), layout,
                                global_batch_size=16)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = json.loads(json.dumps(loader.get_state()))
    expected = [ids_of(next(it)) for _ in range(2)]
    fresh = jaxload.from_grain(make_data_loader(layout, 160, 16, worker_count), layout,
                               global_batch_size=16)
    fresh.set_state(state)
    it = iter(fresh)
    out["resumed"] = ([ids_of(next(it)) for _ in range(2)], expected)
    # the common mistake: sharding by JAX process while replicas span processes
    wrong = make_data_loader(layout, 160, 16, 0, grain.sharding.ShardByJaxProcess(True))
    out["by_process"] = _error(lambda: jaxload.from_grain(wrong, layout, global_batch_size=16))
    other_batch = make_data_loader(layout, 160, 32, 0)
    out["batch"] = _error(lambda: jaxload.from_grain(other_batch, layout, global_batch_size=16))
    return out


@pytest.mark.cluster
@pytest.mark.parametrize("worker_count", [0, 2])
def test_data_loader_across_processes(clusters, worker_count):
    results = clusters.run(scenarios, num_processes=4, local_devices=2,
                           args=(worker_count,), timeout_s=300)
    steps = {len(r["epoch"]) for r in results}
    assert steps == {160 // 2 // 8}  # 2 loading groups of 80 elements, 8 rows each per step
    for step in range(10):
        # processes 0 and 2 (and 1 and 3) hold the same rows on their devices of each replica
        a, b = results[0]["epoch"][step], results[2]["epoch"][step]
        assert list(a.values()) == list(b.values())
    ids = [i for r in results[:2] for step in r["epoch"] for rows in step.values() for i in rows]
    assert sorted(ids) == list(range(160))  # each element once over the epoch
    for r in results:
        got, expected = r["resumed"]
        assert got == expected
        assert r["by_process"].startswith("ValueError: the grain.DataLoader shards by "
                                          f"shard_index={results.index(r)}, shard_count=4 "
                                          "(ShardByJaxProcess)")
        assert "this process's loading group is shard_index=" in r["by_process"]
        assert r["batch"].startswith("ValueError: the grain.DataLoader batches with "
                                     "batch_size=16, but each process must load "
                                     "local_batch_size=8 rows")


def test_grain_shard_options_follow_the_plan():
    layout = jaxload.model_replicas_across_processes(2, devices=jaxload.simulated_devices(4, 2))
    options = jaxload.grain_shard_options(layout, 16)
    assert (options.shard_index, options.shard_count, options.drop_remainder) == (0, 2, True)


def test_a_data_loader_that_drops_records_is_refused_under_pad():
    import grain

    from jaxload._src.pipelines.grain.data_loader import check_data_loader

    layout = jaxload.data_parallel(devices=jaxload.simulated_devices(2, 4))
    plan = layout.plan(16, process_index=0)

    def loader(batch_drops: bool, shard_drops: bool):
        sampler = grain.samplers.IndexSampler(
            num_records=30, shuffle=False, num_epochs=1, seed=0,
            shard_options=grain.sharding.ShardOptions(0, 2, drop_remainder=shard_drops))
        return grain.DataLoader(data_source=list(range(30)), sampler=sampler, operations=[
            grain.transforms.Batch(8, drop_remainder=batch_drops)])

    check_data_loader(loader(False, False), plan, "pad")
    check_data_loader(loader(True, True), plan, "drop")
    with pytest.raises(ValueError, match=r"remainder='pad' delivers every record, but the "
                                         r"grain.DataLoader drops some: its Batch\(8, "
                                         r"drop_remainder=True\) drops each loading group's last"):
        check_data_loader(loader(True, False), plan, "pad")
    with pytest.raises(ValueError, match=r"ShardOptions\(drop_remainder=True\) drops the records"):
        check_data_loader(loader(False, True), plan, "pad")


def test_a_data_loader_whose_shards_leave_records_unread_is_refused_under_pad():
    """Grain 0.2.18 (unlike 0.2.12) reads len(sampler) // shard_count records a shard whatever
    drop_remainder says: 31 records over 2 groups leave 1 unread, which the refusal names with
    a fix that keeps it (not drop_remainder=False, which does not)."""
    import grain

    from jaxload._src import compat
    from jaxload._src.pipelines.grain.data_loader import check_data_loader

    plan = jaxload.data_parallel(devices=jaxload.simulated_devices(2, 4)).plan(16, process_index=0)

    def loader(records: int):
        sampler = grain.samplers.IndexSampler(
            num_records=records, shuffle=True, num_epochs=1, seed=0,
            shard_options=grain.sharding.ShardOptions(0, 2, drop_remainder=False))
        return grain.DataLoader(data_source=list(range(records)), sampler=sampler,
                                operations=[grain.transforms.Batch(8, drop_remainder=False)])

    check_data_loader(loader(32), plan, "pad")
    check_data_loader(loader(31), plan, "drop")
    if compat.data_loader_unread(loader(31))[0] == 0:  # an older Grain reads every record
        check_data_loader(loader(31), plan, "pad")
        return
    with pytest.raises(ValueError, match=r"its 2 shards read 15 of its sampler's 31 records each "
                                         r"\(len\(sampler\) // shard_count\), so 1 record is never read"
                                         r".*a multiple of 2 records, or pass a grain.MapDataset"):
        check_data_loader(loader(31), plan, "pad")


def mp_prefetch_resume():
    import grain
    from absl import flags

    from placement import element, make_layout

    flags.FLAGS.mark_as_parsed()
    layout = make_layout("data_parallel")
    plan = layout.plan(16)

    def pipeline():
        source = grain.MapDataset.range(320)[plan.shard_index::plan.shard_count]
        return source.to_iter_dataset().map(element).mp_prefetch(
            grain.MultiprocessingOptions(num_workers=2))

    loader = jaxload.from_grain(pipeline(), layout, global_batch_size=16, shard=False)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = json.loads(json.dumps(loader.get_state()))
    expected = [ids_of(next(it)) for _ in range(2)]
    fresh = jaxload.from_grain(pipeline(), layout, global_batch_size=16, shard=False)
    fresh.set_state(state)
    it = iter(fresh)
    return [ids_of(next(it)) for _ in range(2)], expected


@pytest.mark.cluster
def test_iter_dataset_with_mp_prefetch_workers_resumes(clusters):
    for got, expected in clusters.run(mp_prefetch_resume, num_processes=2,
                                      local_devices=4, timeout_s=300):
        assert got == expected
