"""``record=``: per step, the ids each loading group contributed, checked in the parent against
the ids the devices of each group actually hold (read from the arrays), in real 4x2 runs."""

from __future__ import annotations

import numpy as np
import pytest

import jaxload
import jaxload.testing
from placement import make_layout, make_loader, record


def record_passes(scenarios) -> list[dict]:
    """Worker: per scenario, one full pass and one stopped after 2 steps, with the records."""
    import jax

    out = []
    for backend, layout_name, num_elements, gbs, remainder in scenarios:
        loader = make_loader(backend, make_layout(layout_name), range(num_elements),
                             global_batch_size=gbs, remainder=remainder, record="id")
        steps = [record(batch) for batch in loader]
        for k, _ in enumerate(loader):  # a second pass, stopped early: prefetched steps unused
            if k == 1:
                break
        out.append(dict(steps=steps, mine=loader.records(),
                        gathered=loader.records(all_processes=True, clear=True),
                        after_clear=loader.records(), process=jax.process_index(),
                        shard_index=loader.plan.shard_index))
    return out


SCENARIOS = [("grain", "across_processes", 40, 8, "drop"), ("tf", "data_parallel", 37, 16, "pad"),
             ("grain", "data_parallel", 20, 3, "pad")]


def held_ids(step: dict) -> dict[int, int]:
    """Row -> id over this process's shards, real rows only."""
    ids = {}
    masks = step.get("['mask']", {"shards": [None] * len(step["['id']"]["shards"])})["shards"]
    for (_, _, start, _, data), mask in zip(step["['id']"]["shards"], masks, strict=True):
        for k, value in enumerate(data):
            if mask is None or mask[-1][k]:
                ids[start + k] = int(value)
    return ids


@pytest.mark.cluster
def test_records_name_the_ids_each_loading_group_contributed(clusters):
    per_process = clusters.run(record_passes, num_processes=4, local_devices=2,
                               args=(SCENARIOS,), timeout_s=300)
    for k, (_, layout_name, num_elements, _, _) in enumerate(SCENARIOS):
        results = [r[k] for r in per_process]
        steps = len(results[0]["steps"])
        for r in results:
            mine = r["mine"]
            # steps of both passes, the stopped one only as far as it was consumed
            assert [(e["pass"], e["step"]) for e in mine] == (
                [(0, s) for s in range(steps)] + [(1, 0), (1, 1)])
            assert all(set(e["ids"]) == {r["shard_index"]} for e in mine)
            for step in range(steps):  # what the devices of this process hold
                held = held_ids(r["steps"][step])
                assert mine[step]["ids"][r["shard_index"]] == [held[row] for row in sorted(held)]
            assert mine[steps]["ids"] == mine[0]["ids"]  # the second pass starts over
            assert r["after_clear"] == []
        gathered = results[0]["gathered"]
        groups = {r["shard_index"] for r in results}
        assert all(set(e["ids"]) == groups for e in gathered)
        for r in results[1:]:  # elsewhere: its own group's, as records() gave
            assert r["gathered"] == r["mine"]
        for r in results:
            for step in range(steps):
                assert gathered[step]["ids"][r["shard_index"]] == r["mine"][step]["ids"][
                    r["shard_index"]]
        delivered = [i for e in gathered[:steps] for g in sorted(e["ids"]) for i in e["ids"][g]]
        assert len(delivered) == len(set(delivered))
        if layout_name == "data_parallel":  # pad: every element, once
            assert sorted(delivered) == list(range(num_elements))


def test_record_of_a_missing_feature_names_it():
    import grain

    ds = grain.MapDataset.range(16).map(lambda i: {"x": np.float32(i)})
    loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=8, record="id")
    with pytest.raises(ValueError, match=r"record='id' names no top-level feature of the batch "
                       r"\(features: \['x'\]\)"):
        next(iter(loader))
    with pytest.raises(ValueError, match="build it with record="):
        jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=8).records()
