"""In-process tests see 8 fake CPU devices; multi-process tests set up their own processes.

A test that starts processes (a cluster of JAX processes, or any subprocess) is marked
``@pytest.mark.cluster``; ``make test-fast`` runs the others (``-m "not cluster"``). An unmarked
test that starts one (itself or through a fixture) fails, naming the marker, so the fast
selection stays fast.
"""

import os
import platform
import subprocess

# platform.processor() runs `uname -p` once and caches it; h5py asks for it when TensorFlow is
# first imported, which may happen inside an unmarked test
platform.processor()
# numpy 2.0 runs `lscpu` when numpy.testing is first imported (scipy imports it under TensorFlow)
import numpy.testing  # noqa: E402, F401

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

_POPEN = subprocess.Popen


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before the test's fixtures are set up (a module fixture may start the cluster)."""
    if item.get_closest_marker("cluster") is not None:
        subprocess.Popen = _POPEN
        return

    def refuse(*args, **kwargs):
        raise AssertionError(f"{item.nodeid} starts a process: mark it @pytest.mark.cluster "
                             "(make test-fast runs only unmarked tests)")

    subprocess.Popen = refuse


def pytest_runtest_teardown(item):
    subprocess.Popen = _POPEN


def pytest_collection_modifyitems(items):
    """Under pytest-xdist (``make test`` runs two workers, ``--dist loadgroup``) every test on
    the warm clusters goes to one worker, which starts each cluster once; the tests with
    processes of their own, which mostly wait (for a watchdog, a heartbeat, a launcher), run
    beside them on the other."""
    for item in items:
        if "clusters" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("warm"))


class WarmClusters:
    """Warm clusters (``jaxload.testing.cluster``) shared by every test of the run, one per
    ``(num_processes, local_devices)``; the least recently used ends when a sixth is needed."""

    KEEP = 5

    def __init__(self):
        self._alive = {}

    def __call__(self, num_processes: int, local_devices: int):
        """The cluster of this shape, started on first use."""
        import jaxload.testing

        shape = (num_processes, local_devices)
        cluster = self._alive.pop(shape, None)
        while cluster is None and len(self._alive) >= self.KEEP:
            self._alive.pop(next(iter(self._alive))).close()
        if cluster is None:
            cluster = jaxload.testing.cluster(num_processes=num_processes,
                                              local_devices=local_devices, timeout_s=300)
        self._alive[shape] = cluster  # the most recently used last
        return cluster

    def run(self, fn, *, num_processes: int, local_devices: int, args=(), timeout_s=None):
        """As ``jaxload.testing.run``, on the warm cluster of this shape."""
        return self(num_processes, local_devices).run(fn, *args, timeout_s=timeout_s)

    def close(self):
        for cluster in self._alive.values():
            cluster.close()
        self._alive.clear()


@pytest.fixture(scope="session")
def clusters():
    """``clusters(2, 4).run(fn, *args)``, or ``clusters.run(fn, num_processes=2,
    local_devices=4, args=...)``: ``fn`` runs on warm processes shared by the whole run."""
    warm = WarmClusters()
    yield warm
    warm.close()
