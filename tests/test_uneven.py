"""Loading groups whose pipelines have different lengths (shard=False): "drop" and "pad", in real
2x4 and 4x2 runs, tf.data and Grain, including model replicas across processes."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from placement import global_rows, make_layout, make_loader, record

# (backend, layout, elements per loading group, global_batch_size, remainder)
SCENARIOS = {
    (2, 4): [
        ("tf", "data_parallel", (100, 40), 16, "drop"),
        ("tf", "data_parallel", (100, 40), 16, "pad"),
        ("grain", "in_process", (100, 40), 16, "pad"),
        ("grain", "data_parallel", (37, 0), 16, "pad"),  # group 1 has no data at all
        ("grain", "data_parallel", (0, 0), 16, "pad"),
        ("tf", "data_parallel", (0, 0), 16, "drop"),
    ],
    (4, 2): [
        ("tf", "across_processes", (100, 40), 16, "pad"),
        ("grain", "across_processes", (100, 40), 16, "pad"),
        ("grain", "across_processes", (100, 40), 16, "drop"),
    ],
}


def group_ids(group: int, lengths) -> list[int]:
    return list(range(group * 1000, group * 1000 + lengths[group]))


def run_scenarios(scenarios):
    out = []
    for backend, layout_name, lengths, gbs, mode in scenarios:
        layout = make_layout(layout_name)
        group = layout.plan(gbs).shard_index
        loader = make_loader(backend, layout, group_ids(group, lengths), global_batch_size=gbs,
                             shard=False, remainder=mode)
        out.append([record(batch) for batch in loader])
    return out


@pytest.fixture(scope="module")
def runs(clusters):
    cache = {}

    def get(topology):
        if topology not in cache:
            per_process = clusters.run(run_scenarios, num_processes=topology[0],
                                       local_devices=topology[1],
                                       args=(SCENARIOS[topology],), timeout_s=240)
            cache[topology] = [[{"steps": r[i]} for r in per_process]
                               for i in range(len(SCENARIOS[topology]))]
        return cache[topology]

    return get


@pytest.mark.parametrize(
    "topology,index",
    [(t, i) for t, s in SCENARIOS.items() for i in range(len(s))],
    ids=[f"{t[0]}x{t[1]}-{s[0]}-{s[1]}-{s[2][0]}vs{s[2][1]}-{s[4]}"
         for t, ss in SCENARIOS.items() for s in ss],
)
@pytest.mark.cluster
def test_uneven_groups(runs, topology, index):
    _, _, lengths, gbs, mode = SCENARIOS[topology][index]
    results = runs(topology)[index]
    local = gbs // len(lengths)
    steps = {len(r["steps"]) for r in results}
    if mode == "drop":
        expected_steps = min(n // local for n in lengths)
    else:
        expected_steps = max(math.ceil(n / local) for n in lengths)
    assert steps == {expected_steps}, "every process runs the same number of steps"

    delivered = Counter()
    for step in range(expected_steps):
        ids = global_rows(step, "['id']", results)  # also asserts replicas hold the same rows
        x = global_rows(step, "['x']", results)
        assert sorted(ids) == list(range(gbs))
        if mode == "drop":
            assert "['mask']" not in results[0]["steps"][step]
            real = dict(ids)
        else:
            mask = global_rows(step, "['mask']", results)
            assert results[0]["steps"][step]["['mask']"]["shape"] == (gbs,)
            real = {row: i for row, i in ids.items() if mask[row]}
            for row in set(ids) - set(real):  # padding is zero-filled
                assert ids[row] == 0 and not np.any(x[row])
        for row, i in real.items():
            assert np.array_equal(x[row], i * 10 + np.arange(3))
        delivered.update(int(i) for i in real.values())

    assert max(delivered.values(), default=1) == 1, "an element was delivered twice"
    if mode == "drop":
        expected = {i for g in range(len(lengths)) for i in group_ids(g, lengths)[: expected_steps * local]}
    else:
        expected = {i for g in range(len(lengths)) for i in group_ids(g, lengths)}
    assert set(delivered) == expected
