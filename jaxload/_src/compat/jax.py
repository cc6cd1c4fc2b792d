"""JAX's internals that jaxload reads (see :mod:`jaxload._src.compat`)."""

from __future__ import annotations

from typing import Any


def distributed_client() -> Any:
    """JAX's coordination-service client of this process (None before
    ``jax.distributed.initialize``): ``jax._src.distributed.global_state.client``."""
    from jax._src import distributed

    return distributed.global_state.client


def thread_mesh() -> Any:
    """The mesh of ``with mesh:`` on this thread (the older context; empty where unused):
    ``jax._src.mesh.thread_resources.env.physical_mesh``. None where JAX no longer has it."""
    from jax._src import mesh as mesh_lib

    env = getattr(getattr(mesh_lib, "thread_resources", None), "env", None)
    return getattr(env, "physical_mesh", None)
