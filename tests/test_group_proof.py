"""A loading group of several processes proves its rows every step (group_proof.py): unit tests
of the verdict, and real 2-process runs where one model replica spans both processes, so both
must hand out identical rows, with pipelines whose rows differ only from some step on."""

from __future__ import annotations

import numpy as np
import pytest

from jaxload._src import group_proof, protocol
from jaxload._src.comparisons import ReplicationError
from jaxload._src.protocol import Decision, Report
from placement import outcome


def test_digest_covers_dtype_shape_and_every_leaf():
    a = np.arange(8, dtype=np.int32)
    assert group_proof.digest([a]) == group_proof.digest([a.copy()])
    assert group_proof.digest([a]) != group_proof.digest([a.reshape(2, 4)])
    assert group_proof.digest([a]) != group_proof.digest([a.astype(np.int64)])
    assert group_proof.digest([a, a]) != group_proof.digest([a])
    assert len(group_proof.digest([a])) == 16


def test_the_first_differing_step_of_a_group_ends_the_pass():
    reports = {0: Report(ready=3, rows=["a", "b", "c"]), 1: Report(ready=3, rows=["a", "b", "x"]),
               2: Report(ready=3, rows=["q", "r", "s"]), 3: Report(ready=3, rows=["q", "r", "s"])}
    d = group_proof.verdict(Decision(count=3, more=True), reports, 10, [[0, 1], [2, 3]])
    assert (d.count, d.more) == (2, False)  # the two steps before it are handed out
    message = d.diverged
    assert message is not None and message.startswith("at step 12 the processes of loading group 0")
    assert "digest c on process [0]" in message and "digest x on process [1]" in message
    with pytest.raises(ReplicationError, match="at step 12"):
        group_proof.raise_if_diverged(d)
    # only the steps agreed on are compared: a difference after them waits for its round
    assert group_proof.verdict(Decision(count=2, more=True), reports, 10,
                               [[0, 1], [2, 3]]).diverged is None


def test_a_member_without_a_batch_where_the_other_has_one_differs():
    reports = {0: Report(ready=2, rows=["a", "b"]), 1: Report(ready=1, rows=["a"])}
    d = group_proof.verdict(Decision(count=2), reports, 0, [[0, 1]])
    assert d.count == 1 and "no rows (its data ended: padding) on process [1]" in str(d.diverged)


def test_groups_of_one_and_ended_decisions_are_left_alone():
    reports = {0: Report(ready=1, rows=["a"]), 1: Report(ready=1, rows=["b"])}
    assert group_proof.verdict(Decision(count=1), reports, 0, [[0], [1]]).diverged is None
    failed = Decision(error="process 1 failed")
    assert group_proof.verdict(failed, reports, 0, [[0, 1]]) is failed
    no_rows = {0: Report(ready=1), 1: Report(ready=1)}
    assert group_proof.verdict(Decision(count=1), no_rows, 0, [[0, 1]]).diverged is None


def test_a_proving_pass_of_known_length_agrees_window_by_window():
    rs = {p: Report(ready=1, digest="d", length=100) for p in range(2)}
    first = protocol.decide(rs, step=0, window=1, pad=False, ahead=True)
    assert (first.total, first.count, first.more, first.window) == (100, 1, True, 4)
    later = protocol.decide(rs, step=99, window=16, pad=False, total=100, ahead=True)
    assert (later.count, later.more) == (1, True)
    end = protocol.decide(rs, step=100, window=16, pad=False, total=100, ahead=True)
    assert (end.count, end.more) == (0, False)


def replicas():
    """One model replica spans both processes: one loading group of 2 processes, each loading
    every row of a global batch of 8."""
    import grain
    import jax
    import tensorflow as tf

    import jaxload

    p = jax.process_index()
    across = jaxload.model_replicas_across_processes(2)
    out = {}

    def handed(loader):
        steps = []
        try:
            for batch in loader:
                leaf = batch["x"] if isinstance(batch, dict) else batch
                steps.append(int(np.asarray(leaf.addressable_shards[0].data).ravel()[0]))
        except Exception as e:  # noqa: BLE001 - the test compares what each process saw
            return steps, f"{type(e).__name__}: {e}"
        return steps, None

    # Grain: process 1's rows 44-47 differ (step 5 holds rows 40-47; the first round compares
    # a few other elements, which agree)
    ds = grain.MapDataset.range(64).map(lambda i: np.int64(i + 1000 * (p == 1 and 44 <= i < 48)))
    out["grain"] = handed(jaxload.from_grain(ds, across, global_batch_size=8, on_failure="raise"))
    # tf.data, of known length: the same from element 44 on
    tds = tf.data.Dataset.range(64).map(lambda i: i + tf.cast(1000 * p, tf.int64) * tf.cast(
        i >= 44, tf.int64))
    out["tf"] = handed(jaxload.from_tf_data(tds, across, global_batch_size=8, on_failure="raise"))
    # a length that differs by process, padded: process 1 has 60 rows, its last batch 4
    tds = tf.data.Dataset.range(64 if p == 0 else 60).map(lambda i: {"x": i})
    out["length"] = handed(jaxload.from_tf_data(tds, across, global_batch_size=8,
                                                remainder="pad", on_failure="raise"))
    # the same data on both: every step, twice (a second pass of the same loader)
    loader = jaxload.from_grain(grain.MapDataset.range(64).map(np.int64), across,
                                global_batch_size=8, on_failure="raise")
    out["same"] = [handed(loader), handed(loader)]
    out["unseeded"] = outcome(lambda: len(list(jaxload.from_tf_data(
        tf.data.Dataset.range(64).map(lambda i: i + tf.random.uniform((), 0, 2, tf.int64)),
        across, global_batch_size=8, on_failure="raise"))))
    return out


@pytest.fixture(scope="module")
def seen(clusters):
    return clusters.run(replicas, num_processes=2, local_devices=2, timeout_s=180)


@pytest.mark.cluster
@pytest.mark.parametrize("backend", ["grain", "tf"])
def test_rows_that_differ_within_a_group_stop_both_processes_at_that_step(seen, backend):
    for p in range(2):
        steps, error = seen[p][backend]
        assert steps == [0, 8, 16, 24, 32], (p, steps)  # nothing from step 5 on
        assert error is not None and error.startswith(
            "ReplicationError: at step 5 the processes of loading group 0"), error
    assert seen[0][backend][1] == seen[1][backend][1]  # the same error on both


@pytest.mark.cluster
def test_a_length_that_differs_by_process_stops_at_the_first_padded_step(seen):
    for p in range(2):
        steps, error = seen[p]["length"]
        assert steps == [0, 8, 16, 24, 32, 40, 48], (p, steps)
        assert error is not None and "at step 7" in error and "padding" not in error, error


@pytest.mark.cluster
def test_identical_rows_pass_every_step_of_every_pass(seen):
    for p in range(2):
        assert seen[p]["same"] == [([0, 8, 16, 24, 32, 40, 48, 56], None)] * 2


@pytest.mark.cluster
def test_an_unseeded_random_op_is_refused_or_caught_the_same_on_both(seen):
    results = [seen[p]["unseeded"][0] for p in range(2)]
    assert results[0] == results[1]
    assert isinstance(results[0], str) and results[0].startswith(("ValueError", "ReplicationError"))
