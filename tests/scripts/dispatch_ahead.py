"""A training-like loop that dispatches steps far ahead and never waits on a step's output.

Each process has several CPU devices; every step all-reduces over all devices of all processes
(gloo). Usage: python dispatch_ahead.py STEPS [WAIT_EVERY]. Uses jax directly (the cluster's
coordinates come from the launcher's environment); prints "done STEPS" at the end.
"""

import os
import sys

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=os.environ["JAXLOAD_COORDINATOR"],
                           num_processes=int(os.environ["JAXLOAD_NUM_PROCESSES"]),
                           process_id=int(os.environ["JAXLOAD_PROCESS_ID"]))

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

steps = int(sys.argv[1])
wait_every = int(sys.argv[2]) if len(sys.argv) > 2 else 0
mesh = Mesh(np.array(jax.devices()), ("data",))
x = jax.make_array_from_process_local_data(
    NamedSharding(mesh, P("data")), np.ones((jax.local_device_count(), 256), np.float32),
    (jax.device_count(), 256))
w = jax.device_put(jnp.ones((256,), jnp.float32), NamedSharding(mesh, P()))


@jax.jit
def step(w, x):
    loss, grad = jax.value_and_grad(lambda w: jnp.mean((x @ w) ** 2))(w)  # all-reduces
    return w - 1e-6 * grad, loss


for i in range(steps):
    w, loss = step(w, x)
    if wait_every and i % wait_every == 0:
        loss.block_until_ready()
jax.block_until_ready(w)
print("done", steps, flush=True)
