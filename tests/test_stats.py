"""loader.stats(): per-process totals, and the cross-process summary naming the slowest process."""

from __future__ import annotations

import json

import grain
import numpy as np
import pytest

import jaxload
import jaxload.testing


def slow_on_one_process(slow_process: int, delay_s: float):
    """Worker side: process ``slow_process``'s pipeline sleeps ``delay_s`` per element."""
    import time

    import jax

    def element(i):
        if jax.process_index() == slow_process:
            time.sleep(delay_s)
        return {"x": np.full(4, i, np.float32)}

    ds = grain.MapDataset.range(64).map(element)
    loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=16)
    steps = sum(1 for _ in loader)
    summary = loader.stats(all_processes=True)
    return dict(steps=steps, mine=loader.stats().as_dict(), slowest=summary.slowest,
                text=str(summary), count=summary.process_count,
                per_process={s.process_index: s.as_dict() for s in summary.per_process})


@pytest.mark.cluster
def test_summary_names_the_slow_process(clusters):
    results = clusters.run(slow_on_one_process, num_processes=2, local_devices=4,
                           args=(1, 0.02), timeout_s=120)
    for p, r in enumerate(results):
        assert r["steps"] == 4  # 64 elements, 8 per process per step
        mine = r["mine"]
        assert mine["process_index"] == p and mine["steps"] == 4
        assert mine["nbytes"] == 4 * 8 * 4 * 4  # steps x rows x 4 float32
        assert r["per_process"][p] == mine  # the summary carries each process's own numbers
        assert r["slowest"] == 1 and r["count"] == 2
        # the leader holds everyone's numbers; the others their own and the slowest's
        assert sorted(r["per_process"]) == ([0, 1] if p == 0 else [1])
        assert "slowest: process 1" in r["text"]
    slow, fast = results[1]["mine"], results[0]["mine"]
    # 32 elements slept 20 ms each, over at most 16 of Grain's reader threads
    assert slow["backend_s"] >= 0.02  # (Grain starts reading before the first request)
    assert fast["backend_s"] < slow["backend_s"] / 2
    json.dumps(results[0]["mine"])


@pytest.mark.parametrize("prefetch", [0, 2])
def test_single_process_stats(prefetch):
    ds = grain.MapDataset.range(40).map(lambda i: {"x": np.full(3, i, np.float32)})
    loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=8, prefetch=prefetch)
    assert loader.stats().steps == 0
    for _ in loader:
        pass
    stats = loader.stats()
    assert stats.steps == 5 and stats.nbytes == 5 * 8 * 3 * 4
    assert stats.wait_s > 0 and stats.backend_s > 0 and stats.assemble_s > 0
    assert stats.check_s > 0  # the first step's checks
    assert stats.elapsed_s >= stats.wait_s
    if prefetch == 0:
        assert stats.ready_sum == 0
    assert "process 0: 5 steps" in str(stats)
    summary = loader.stats(all_processes=True)
    assert summary.slowest == 0 and summary.of(0).steps == 5
    with pytest.raises(ValueError, match="part='load'"):
        stats.ms_per_step("load")
