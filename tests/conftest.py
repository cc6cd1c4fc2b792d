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
