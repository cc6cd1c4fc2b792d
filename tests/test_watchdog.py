"""The watchdog over an in-memory store (simulated processes as threads, no cluster): a published
failure reaches every watchdog at once, a stuck read becomes a failure with its stack, malformed
alarms are named, and the thread costs one read per wake interval, whatever the step rate."""

from __future__ import annotations

import threading
import time

import pytest

from jaxload._src.agreement import PeerFailedError
from jaxload._src.failure_modes import KEPT, FailureModes
from jaxload._src.failures import Failure, PipelineStuckError, check_on_failure
from jaxload._src.transport import MemoryStore
from jaxload._src.watchdog import Watchdog


def _watchdogs(n: int, wake_s: float = 5.0) -> list[Watchdog]:
    dogs = [Watchdog(t, wake_s=wake_s) for t in MemoryStore().transports(n)]
    for dog in dogs:
        dog.opened("jaxload/pass", "raise", 0.0)
        dog.start()
    return dogs


def _until(condition, timeout_s: float = 5.0) -> float:
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout_s, "not within the timeout"
        time.sleep(0.005)
    return time.monotonic() - start


def test_a_published_failure_reaches_every_process_at_once():
    dogs = _watchdogs(8)
    failure = Failure(3, "loading", 60, "ValueError: corrupt record 121", "jaxload/pass")
    assert dogs[3].publish(failure)
    took = _until(lambda: all(d.failure is not None for d in dogs))
    assert took < 1.0  # woken by the write, not by the 5 s wake interval
    for p, dog in enumerate(dogs):
        error = dog.interruption("jaxload/pass")
        if p == 3:
            assert error is None  # the failing process raises its own exception
        else:
            assert isinstance(error, PeerFailedError)
            assert str(error) == ("process 3 failed while loading step 60: "
                                  "ValueError: corrupt record 121")
        assert dog.interruption("jaxload/another-pass") is None  # failures belong to a pass
    for dog in dogs:
        dog._stop()


def test_the_first_failure_of_a_pass_wins():
    dogs = _watchdogs(3)
    assert dogs[1].publish(Failure(1, "loading", 5, "ValueError: first", "jaxload/pass"))
    assert not dogs[2].publish(Failure(2, "assembling", 5, "ValueError: second", "jaxload/pass"))
    _until(lambda: dogs[0].failure is not None)
    assert "first" in str(dogs[0].interruption("jaxload/pass"))
    for dog in dogs:
        dog._stop()


def test_a_stuck_read_is_a_failure_with_the_stack_of_its_thread():
    dogs = _watchdogs(2, wake_s=0.2)
    release = threading.Event()

    def stuck_pipeline():
        with dogs[1].reading("jaxload/pass", 7, limit_s=0.3):
            release.wait(10)  # the pipeline's read

    reader = threading.Thread(target=stuck_pipeline, name="jaxload-prefetch")
    reader.start()
    _until(lambda: dogs[0].failure is not None)
    seen = str(dogs[0].interruption("jaxload/pass"))
    assert seen.startswith("process 1 failed while loading step 7: PipelineStuckError: its "
                           "pipeline is stuck: no batch after 0.3 s")
    assert "Stack of thread 'jaxload-prefetch'" in seen and "release.wait(10)" in seen
    assert isinstance(dogs[1].interruption("jaxload/pass"), PipelineStuckError)
    release.set()
    reader.join()
    for dog in dogs:
        dog._stop()


def _exiting() -> bool:
    return "jaxload-exit" in [t.name for t in threading.enumerate()]


def _peer_fails_in(exchange: str, opened_here: list[tuple[str, str, float, bool]]) -> Watchdog:
    """Process 0's watchdog after it opened (and closed, if so marked) ``opened_here`` and
    learned that process 1 failed in ``exchange`` (a pass with on_failure="raise")."""
    a, b = MemoryStore().transports(2)
    dog = Watchdog(a, wake_s=5.0)
    for name, on_failure, grace, closed in opened_here:
        dog.opened(name, on_failure, grace)
        if closed:
            dog.closed(name)
    dog.start()
    failing = Watchdog(b)
    failing.opened(exchange, "raise", 0.0)
    failing.publish(Failure(1, "loading", 0, "OSError: no such file", exchange))
    _until(lambda: dog.failure is not None)
    return dog


def test_a_failure_learned_after_its_pass_closed_is_handled_as_that_pass_asked():
    # Process 0 leaves pass A (on_failure="raise") through the agreement before its watchdog
    # reads process 1's alarm, and has opened pass B (on_failure="exit") by then: the late
    # failure of A must not start B's exit timer (it would end process 0 after a failure the
    # program chose to catch).
    a, b = "jaxload/loader/a/pass/0", "jaxload/loader/b/pass/0"
    dog = _peer_fails_in(a, [(a, "raise", 0.0, True), (b, "exit", 3600.0, False)])
    assert dog.failure_mode == ("raise", 0.0) and not _exiting()
    assert dog.interruption(b) is None  # B goes on
    dog._stop()


def test_a_failure_learned_before_its_pass_opened_is_decided_when_it_opens():
    # Process 1 fails at the first step of pass B (on_failure="raise") before process 0 has
    # opened B; process 0's last pass A asked for "exit". B's mode decides, once B opens.
    a, b = "jaxload/loader/a/pass/0", "jaxload/loader/b/pass/0"
    dog = _peer_fails_in(b, [(a, "exit", 3600.0, True)])
    assert not _exiting()  # not decided yet
    dog.opened(b, "raise", 0.0)
    assert dog.failure_mode == ("raise", 0.0) and not _exiting()
    assert isinstance(dog.interruption(b), PeerFailedError)
    dog._stop()

    # the same failure where B asks for "exit": the timer starts when B opens
    dog = Watchdog(MemoryStore().transports(2)[0], wake_s=5.0)
    dog._learn(Failure(1, "loading", 0, "OSError: no such file", "jaxload/loader/c/pass/0"))
    assert not _exiting()
    dog._exiting = True  # the timer returns instead of ending this test process
    dog.opened("jaxload/loader/c/pass/0", "exit", 0.05)
    assert dog.failure_mode == ("exit", 0.05) and _exiting()
    _until(lambda: not _exiting())


def test_the_modes_of_closed_passes_are_bounded():
    modes = FailureModes()
    for k in range(1000):
        modes.opened(f"jaxload/loader/x/pass/{k}", "raise", 0.0)
        modes.closed(f"jaxload/loader/x/pass/{k}")
    assert len(modes) == KEPT and modes.known("jaxload/loader/x/pass/999")
    assert not modes.known("jaxload/loader/x/pass/0") and not modes.open


def test_reads_within_their_limit_are_not_failures():
    dogs = _watchdogs(2, wake_s=0.05)
    for step in range(20):
        with dogs[0].reading("jaxload/pass", step, limit_s=0.5):
            time.sleep(0.01)
    time.sleep(0.2)
    assert dogs[0].failure is None and dogs[1].failure is None
    for dog in dogs:
        dog._stop()


def test_a_malformed_alarm_names_its_key():
    store = MemoryStore()
    a, b = store.transports(2)
    dog = Watchdog(b, wake_s=5.0)
    dog.opened("jaxload/pass", "raise", 0.0)
    dog.start()
    a.set("jaxload/alarm/1", "{not json")
    _until(lambda: dog.failure is not None)
    assert "malformed value in 'jaxload/alarm/1'" in dog.failure.text
    dog._stop()


def test_the_thread_reads_once_per_wake_interval_and_stops_at_once():
    dogs = _watchdogs(2, wake_s=0.1)
    time.sleep(1.0)
    reads = dogs[0].rpcs
    assert 5 <= reads <= 12  # about 1 s / 0.1 s, independent of any step rate
    start = time.monotonic()
    dogs[0]._stop()  # woken by its own alarm key, not by the interval
    assert time.monotonic() - start < 0.1
    assert not dogs[0]._thread.is_alive()
    dogs[1]._stop()
    store_keys = dogs[0]._transport._store.values
    assert not [k for k in store_keys if k.startswith("jaxload/alarm")]


@pytest.mark.parametrize("on_failure,grace", [("exit", -1), ("sometimes", 1), ("raise", True)])
def test_bad_on_failure_options_are_refused(on_failure, grace):
    with pytest.raises(ValueError, match="on_failure|exit_grace_s"):
        check_on_failure(on_failure, grace)
