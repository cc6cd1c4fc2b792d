"""The docstring examples: ``pytest --doctest-modules jaxload`` (or ``make doctest``).

They run in one process with 8 fake CPU devices, set here, at the repository root, because this
file is imported before ``jaxload`` (a ``jaxload/conftest.py`` would be imported after
``jaxload/__init__.py`` has imported JAX). The tests in ``tests/`` set the same in their own
conftest.

Each example sees ``jax``, ``jaxload`` and ``np`` (numpy) already imported, as the reference's
index page says; anything else it imports itself.
"""

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _doctest_imports(doctest_namespace):
    import jax
    import numpy as np

    import jaxload

    doctest_namespace.update(jax=jax, jaxload=jaxload, np=np)
