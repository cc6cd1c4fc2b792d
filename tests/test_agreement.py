"""Step agreement in real 2-process runs: uneven data, a failing process, mismatched batches,
a process that stops iterating. Every case must end promptly on every process, never hang."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import jaxload.testing
from placement import outcome


def scenarios():
    import grain
    import jax
    import numpy as np

    import jaxload
    from placement import make_loader

    p = jax.process_index()
    layout = jaxload.data_parallel()
    out = {}

    # Each process's pipeline is its own shard and they differ in length: 40 vs 100 elements.
    ids = range(p * 1000, p * 1000 + (40 if p == 0 else 100))
    loader = make_loader("tf", layout, ids, global_batch_size=16, shard=False, prefetch=0)
    out["uneven_steps"] = outcome(lambda: len(list(loader)))

    # more steps than one chunk of agreement keys (deleted chunk by chunk as the epoch goes)
    loader = jaxload.from_grain(grain.MapDataset.range(8 * 150), layout, global_batch_size=8)
    out["long"] = outcome(lambda: len(list(loader)))

    def failing(i):
        if p == 1 and i == 21:  # process 1 reads the odd elements; 21 is in its step 2
            raise ValueError("corrupt record 21")
        return np.float32(i)

    def trained(loader):  # a training step of 0.2 s; the failure comes in the middle
        steps = 0
        for _ in loader:
            time.sleep(0.2)
            steps += 1
        return steps

    loader = jaxload.from_grain(grain.MapDataset.range(64).map(failing), layout,
                                global_batch_size=8, timeout_s=60, on_failure="raise")
    out["failing"] = outcome(lambda: trained(loader))

    # process 1's elements have a different shape: the global batch cannot be formed
    ds = grain.MapDataset.range(16).map(lambda i: {"x": np.zeros(2 + p, np.float32)})
    loader = jaxload.from_grain(ds, layout, global_batch_size=8)
    out["mismatch"] = outcome(lambda: len(list(loader)))

    # every process stops after 3 steps of a long pass (prefetch running ahead), then the next
    # loader must work at once: no producer is left waiting for the others
    loader = jaxload.from_grain(grain.MapDataset.range(8 * 1000), layout, global_batch_size=8,
                                timeout_s=20)
    for step, _ in enumerate(loader):
        if step == 2:
            break
    after_break = jaxload.from_grain(grain.MapDataset.range(64), layout, global_batch_size=8)
    out["after_break"] = outcome(lambda: len(list(after_break)))

    # the same with load_once, whose reshard is a cross-process collective: one launched ahead
    # by a process whose peer has stopped would never complete
    across = jaxload.model_replicas_across_processes(2)
    loader = jaxload.from_grain(grain.MapDataset.range(8 * 1000).map(np.float32), across,
                                global_batch_size=8, timeout_s=20, load_once=True)
    for step, _ in enumerate(loader):
        if step == 2:
            break
    after_break = jaxload.from_grain(grain.MapDataset.range(64).map(np.float32), across,
                                     global_batch_size=8, load_once=True)
    out["after_break_load_once"] = outcome(lambda: len(list(after_break)))
    return out


def absent_peer():
    """Process 1 never iterates this loader: process 0 must give up after timeout_s. Process 0's
    keys of the pass stay in the store, so this runs on processes of its own."""
    import grain
    import jax

    import jaxload

    loader = jaxload.from_grain(grain.MapDataset.range(16), jaxload.data_parallel(),
                                global_batch_size=8, timeout_s=3)
    return {"absent_peer": outcome(lambda: len(list(loader))) if jax.process_index() == 0
            else None}


@pytest.fixture(scope="module")
def outcomes(clusters):
    warm = clusters.run(scenarios, num_processes=2, local_devices=2, timeout_s=180)
    cold = jaxload.testing.run(absent_peer, num_processes=2, local_devices=2, timeout_s=120)
    return [{**w, **c} for w, c in zip(warm, cold, strict=True)]


@pytest.mark.cluster
def test_uneven_pipelines_stop_together_at_the_shortest(outcomes):
    assert [o["uneven_steps"][0] for o in outcomes] == [5, 5]  # 40 // 8 local rows


@pytest.mark.cluster
def test_a_long_epoch_runs_every_step(outcomes):
    assert [o["long"][0] for o in outcomes] == [150, 150]


@pytest.mark.cluster
def test_breaking_early_on_every_process_leaves_nothing_waiting(outcomes):
    for o in outcomes:
        steps, elapsed = o["after_break"]
        assert steps == 8 and elapsed < 10


@pytest.mark.cluster
def test_breaking_early_with_load_once_leaves_no_collective_waiting(outcomes):
    for o in outcomes:
        steps, elapsed = o["after_break_load_once"]
        assert steps == 8 and elapsed < 10


@pytest.mark.cluster
def test_a_failing_process_stops_the_others_with_its_error(outcomes):
    own, _ = outcomes[1]["failing"]
    assert own.startswith("ValueError: corrupt record 21")
    seen, elapsed = outcomes[0]["failing"]
    assert seen.startswith("PeerFailedError: process 1 failed while loading step 2")
    assert "corrupt record 21" in seen
    assert elapsed < 30  # well inside timeout_s=60: the failure was announced, not timed out


@pytest.mark.cluster
def test_batches_that_differ_between_processes_are_reported(outcomes):
    for result, _ in (o["mismatch"] for o in outcomes):
        assert result.startswith("ValueError: at step 0 the processes' batches differ")
        assert "processes [0]: batch['x']:float32[2]" in result
        assert "processes [1]: batch['x']:float32[3]" in result


@pytest.mark.cluster
def test_a_process_that_stops_iterating_is_named_within_the_timeout(outcomes):
    result, elapsed = outcomes[0]["absent_peer"]
    assert result.startswith("PeerTimeoutError: process 0 waited for the other processes at step 0")
    assert "(timeout_s=3)" in result
    assert "processes [1] did not arrive" in result
    assert 2.5 < elapsed < 20


# When process 0 (the coordinator) dies, JAX's own error polling may terminate the survivor
# before the loader's barrier returns; either message tells the user what happened.
@pytest.mark.parametrize("victim,messages", [
    (1, ["PeerTimeoutError: process 0 waited for the other processes at step",
         # (process 1's prefetching thread may have arrived at the round before it was killed)
         "processes [1] did not arrive|the coordination service stopped answering|"
         "did not publish the decision"]),
    (0, ["PeerTimeoutError: process 1 waited for the other processes at step|"
         "Terminating process because the JAX distributed service detected fatal errors",
         "the coordinator (process 0) did not answer|another task died"]),
])
@pytest.mark.cluster
def test_a_killed_process_ends_the_survivor_with_a_readable_error(victim, messages):
    script = str(Path(__file__).parent / "scripts" / "lose_a_peer.py")
    start = time.monotonic()
    with pytest.raises(jaxload.testing.ProcessesFailed) as failed:
        jaxload.testing.run_script([script, str(victim)], num_processes=2, local_devices=2,
                                   timeout_s=120, fail_fast=False, heartbeat_timeout_s=20)
    elapsed = time.monotonic() - start
    survivor = 1 - victim
    assert failed.value.returncodes[victim] == -9
    assert failed.value.returncodes[survivor] not in (0, None)
    log = failed.value.logs[survivor]
    for alternatives in messages:
        assert any(m in log for m in alternatives.split("|")), (alternatives, log[-2000:])
    # detection within the loader's timeout_s=5 and its grace (5 / 4 + 2 s), exit within JAX's
    # heartbeat timeout of 20 s
    assert elapsed < 60, elapsed
