"""jaxload.testing.cluster: processes started once, each call isolated, checked for what it left,
and a failing or hanging call ending the processes without poisoning the next call."""

from __future__ import annotations

import os
import time

import pytest

import jaxload.testing

KEPT = []  # what a call keeps alive past its end, on purpose


@pytest.fixture(scope="module")
def cluster():
    with jaxload.testing.cluster(num_processes=2, local_devices=2, timeout_s=120) as c:
        yield c


def whoami(word):
    import jax

    print(f"{word} from process {jax.process_index()}")
    return jax.process_index(), jax.device_count(), os.getpid()


def build_loader(name=None):
    import grain

    return jaxload.from_grain(grain.MapDataset.range(32), jaxload.data_parallel(),
                              global_batch_size=8, name=name, on_failure="raise")


def build_on_process_zero():
    """Builds a loader on process 0 only: its next loader built on that line would be
    ``loader@...#1`` there, ``loader@...`` on process 1."""
    import jax

    if jax.process_index() == 0:
        build_loader()
    return "built"


def full_pass():
    return sum(1 for _ in build_loader())


def leave_a_loader_open():
    batches = iter(build_loader(name="left_open"))
    next(batches)
    KEPT.append(batches)


def drop_a_loader_mid_pass():
    batches = iter(build_loader())
    next(batches)
    return "dropped"


def leave_a_key():
    import jax

    from jaxload._src import compat

    if jax.process_index() == 1:
        compat.distributed_client().key_value_set("jaxload/forgotten/1", "x")


def fail_a_pass_with_the_default_on_failure():
    """Process 1's pipeline fails: both processes raise, and with on_failure="exit" (the
    default) both would end ``exit_grace_s`` later."""
    import grain
    import jax

    def element(i):
        if jax.process_index() == 1 and i == 21:
            raise ValueError("corrupt record 21")
        return i

    loader = jaxload.from_grain(grain.MapDataset.range(64).map(element), jaxload.data_parallel(),
                                global_batch_size=8)
    try:
        list(loader)
    except Exception as e:  # noqa: BLE001 - which error each process saw
        return type(e).__name__


def fail_on_process_one():
    import jax

    if jax.process_index() == 1:
        raise ValueError("process one fails on purpose")
    return "fine"


def hang():
    time.sleep(3600)


def set_environment():
    os.environ["JAXLOAD_TEST_LEFT"] = "1"
    return os.environ.get("JAXLOAD_TEST_LEFT")


def read_environment():
    return os.environ.get("JAXLOAD_TEST_LEFT")


@pytest.mark.cluster
def test_calls_run_on_the_same_processes_with_their_own_output(cluster, capsys):
    first = cluster.run(whoami, "hello")
    assert [r[:2] for r in first] == [(0, 4), (1, 4)]
    assert capsys.readouterr().out.splitlines() == ["[0] hello from process 0",
                                                    "[1] hello from process 1"]
    second = cluster.run(whoami, "again")
    assert [r[2] for r in second] == [r[2] for r in first]  # the same processes
    assert cluster.outputs == ["again from process 0\n", "again from process 1\n"]


@pytest.mark.cluster
def test_each_call_starts_with_fresh_names(cluster):
    starts = cluster.starts
    assert cluster.run(build_on_process_zero) == ["built", "built"]
    assert cluster.run(full_pass) == [4, 4]
    assert cluster.run(full_pass) == [4, 4]
    assert cluster.starts == starts


@pytest.mark.cluster
def test_a_dropped_loader_is_closed_and_the_environment_restored(cluster):
    starts = cluster.starts
    assert cluster.run(drop_a_loader_mid_pass) == ["dropped", "dropped"]
    assert cluster.run(set_environment) == ["1", "1"]
    assert cluster.run(read_environment) == [None, None]
    assert cluster.starts == starts


@pytest.mark.cluster
def test_a_loader_left_open_is_named_and_the_next_call_works(cluster):
    with pytest.raises(jaxload.testing.ProcessesFailed) as e:
        cluster.run(leave_a_loader_open)
    message = str(e.value)
    assert "leave_a_loader_open left state behind" in message
    for process in (0, 1):
        assert (f"process {process}: loader pass 'jaxload/loader/left_open/pass/0' still open, "
                "thread 'jaxload-prefetch' still running") in message
    starts = cluster.starts
    assert cluster.run(full_pass) == [4, 4]
    assert cluster.starts == starts + 1  # new processes: the old ones held the open loader


@pytest.mark.cluster
def test_a_key_left_in_the_store_is_named(cluster):
    with pytest.raises(jaxload.testing.ProcessesFailed,
                       match=r"process 0: key 'jaxload/forgotten/1' in the coordination service"):
        cluster.run(leave_a_key)
    assert cluster.run(full_pass) == [4, 4]


@pytest.mark.cluster
def test_a_failure_that_would_end_the_processes_later_is_named(cluster):
    with pytest.raises(jaxload.testing.ProcessesFailed,
                       match=r"process 0: thread 'jaxload-exit' still running \(a failure with "
                             r"on_failure='exit' ends this process soon"):
        cluster.run(fail_a_pass_with_the_default_on_failure)
    assert cluster.run(full_pass) == [4, 4]


@pytest.mark.cluster
def test_a_failure_ends_the_processes_and_the_next_call_starts_new_ones(cluster):
    starts = cluster.starts
    with pytest.raises(jaxload.testing.ProcessesFailed) as e:
        cluster.run(fail_on_process_one)
    assert "process 1 exited with code 1 in fail_on_process_one" in str(e.value)
    assert "ValueError: process one fails on purpose" in e.value.logs[1]
    assert cluster.run(whoami, "after")[1][:2] == (1, 4)
    assert cluster.starts == starts + 1


@pytest.mark.cluster
def test_a_hang_ends_within_the_timeout(cluster):
    cluster.run(whoami, "warm")  # started: the timeout is the call's alone
    start = time.monotonic()
    with pytest.raises(jaxload.testing.ProcessesFailed,
                       match=r"timed out after 3 s in hang; processes \[0, 1\] still running"):
        cluster.run(hang, timeout_s=3)
    assert time.monotonic() - start < 3 + 5
    assert cluster.run(whoami, "after")[0][:2] == (0, 4)


def test_bad_arguments_are_refused_before_any_process():
    with pytest.raises(ValueError, match="num_processes must be a positive int"):
        jaxload.testing.cluster(num_processes=0, local_devices=2)
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        jaxload.testing.cluster(num_processes=2, local_devices=2, timeout_s=0)

    def local():
        return 1

    with pytest.raises(TypeError, match="must be a module-level function"):
        jaxload.testing.cluster(num_processes=2, local_devices=2).run(local)
