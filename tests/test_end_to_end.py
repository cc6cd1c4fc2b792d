"""Real multi-process runs: every layout, tf.data and Grain, placement verified in the parent.

Each topology is started once (module-scoped fixture) and runs all of its scenarios; each
scenario is then verified as its own test. 95 elements over 2 loading groups of 8 rows per step
gives one group 6 full batches and the other 5, so the loaders must agree to stop at 5.
"""

from __future__ import annotations

import pytest

from placement import record_epoch, verify_epoch

# (backend, layout, num_elements, global_batch_size)
SCENARIOS = {
    (2, 4): [
        ("tf", "data_parallel", 100, 16),
        ("grain", "data_parallel", 95, 16),
        ("tf", "in_process", 95, 16),
        ("grain", "in_process", 100, 8),
    ],
    (4, 2): [
        ("tf", "across_processes", 95, 16),
        ("grain", "across_processes", 100, 8),
        ("grain", "data_parallel", 100, 16),
        ("grain", "across_processes", 96, 16, "process_index"),  # the bug the checks must catch
        ("tf", "across_processes", 95, 16, "load_once"),  # each row loaded once, resharded
        ("grain", "across_processes", 100, 8, "load_once"),
    ],
    (1, 8): [
        ("tf", "data_parallel", 50, 16),
        ("grain", "in_process", 50, 8),
    ],
    (1, 1): [
        ("tf", "data_parallel", 20, 4),
        ("grain", "data_parallel", 20, 3),
    ],
}


def run_scenarios(scenarios):
    return [record_epoch(*s) for s in scenarios]


@pytest.fixture(scope="module")
def topology_results(clusters):
    cache = {}

    def get(topology):
        if topology not in cache:
            processes, devices = topology
            per_process = clusters.run(
                run_scenarios, num_processes=processes, local_devices=devices,
                args=(SCENARIOS[topology],), timeout_s=240)
            cache[topology] = [[r[i] for r in per_process] for i in range(len(SCENARIOS[topology]))]
        return cache[topology]

    return get


@pytest.mark.parametrize(
    "topology,index",
    [(t, i) for t, scenarios in SCENARIOS.items() for i in range(len(scenarios))],
    ids=[f"{t[0]}x{t[1]}-{s[0]}-{s[1]}-{s[2]}el-gbs{s[3]}" + (f"-by-{s[4]}" if s[4:] else "")
         for t, scenarios in SCENARIOS.items() for s in scenarios],
)
@pytest.mark.cluster
def test_epoch_placement(topology_results, topology, index):
    _, layout, num_elements, global_batch_size, *shard_by = SCENARIOS[topology][index]
    results = topology_results(topology)[index]
    if shard_by == ["process_index"]:
        # processes 0 and 2 share replicas but read different elements: replicas disagree
        with pytest.raises(AssertionError, match=r"row \d+: device \d+ \(process [02]\) holds"):
            verify_epoch(results, num_elements, global_batch_size)
        return
    loaded = verify_epoch(results, num_elements, global_batch_size)
    if shard_by == ["load_once"]:  # each process read its own quarter; the reshard paired them
        assert [r["shard_index"] for r in results] == [0, 1, 2, 3]
        assert loaded[0] == loaded[2] and loaded[1] == loaded[3]
        assert not loaded[0] & loaded[1]
    elif layout == "across_processes":  # the guide's example: 0 and 2 load the same, 1 and 3
        assert [r["shard_index"] for r in results] == [0, 1, 0, 1]
        assert loaded[0] == loaded[2] and loaded[1] == loaded[3]
        assert not loaded[0] & loaded[1]
    else:  # every process is its own loading group
        assert [r["shard_index"] for r in results] == list(range(len(results)))
        for a in range(len(loaded)):
            for b in range(a):
                assert not loaded[a] & loaded[b]
