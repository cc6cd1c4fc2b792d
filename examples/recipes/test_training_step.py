"""Recipe: a pytest suite that runs your own training step on 2 processes x 4 fake CPU devices.

jaxload.testing.cluster starts the processes once for the module (each joins a real
jax.distributed cluster, gloo collectives); each cluster.run(fn, *args) calls fn in every
process and returns the results in process order. fn must be a module-level function of an
importable file, as here. The processes call jaxload.initialize() themselves: fn must not.

  python -m pytest examples/recipes/test_training_step.py -q
"""

import numpy as np
import pytest

import jaxload.testing

FEATURES, SAMPLES, GLOBAL_BATCH = 4, 256, 32


def dataset():
    rng = np.random.default_rng(0)  # the same data on every process and in the test
    x = rng.normal(size=(SAMPLES, FEATURES)).astype(np.float32)
    return x, (x @ np.arange(1, FEATURES + 1, dtype=np.float32)).astype(np.float32)


def train_step(w, batch):
    """The code under test: one step of linear regression (the same function everywhere)."""
    import jax
    import jax.numpy as jnp

    loss, grad = jax.value_and_grad(lambda w: jnp.mean((batch["x"] @ w - batch["y"]) ** 2))(w)
    return w - 0.1 * grad, loss


def train_one_epoch():
    """Runs in every process: an epoch over a tf.data pipeline, data parallel."""
    import jax
    import tensorflow as tf

    x, y = dataset()
    layout = jaxload.data_parallel()
    loader = jaxload.from_tf_data(tf.data.Dataset.from_tensor_slices({"x": x, "y": y}), layout,
                                  global_batch_size=GLOBAL_BATCH)
    replicated = jax.sharding.NamedSharding(layout.mesh, jax.sharding.PartitionSpec())
    w = jax.device_put(np.zeros(FEATURES, np.float32), replicated)
    step = jax.jit(train_step)
    losses = []
    for batch in loader:  # a whole pass: nothing left open for the cluster's checks
        w, loss = step(w, batch)
        losses.append(float(loss))
    return losses, np.asarray(w.addressable_data(0))


@pytest.fixture(scope="module")
def cluster():
    with jaxload.testing.cluster(num_processes=2, local_devices=4, timeout_s=300) as c:
        yield c


def test_every_process_trains_the_same_model(cluster):
    (losses0, w0), (losses1, w1) = cluster.run(train_one_epoch)
    assert len(losses0) == SAMPLES // GLOBAL_BATCH
    assert losses0 == losses1 and np.array_equal(w0, w1)


def test_two_processes_match_one_process_in_numpy(cluster):
    (losses, w), _ = cluster.run(train_one_epoch)
    x, y = dataset()
    expected = np.zeros(FEATURES, np.float32)
    for start in range(0, SAMPLES, GLOBAL_BATCH):  # the same steps, in order, on one host
        bx, by = x[start:start + GLOBAL_BATCH], y[start:start + GLOBAL_BATCH]
        expected -= 0.1 * (2 / GLOBAL_BATCH) * bx.T @ (bx @ expected - by)
    np.testing.assert_allclose(w, expected, rtol=1e-4, atol=1e-5)
    assert losses[-1] < losses[0]

# Output:
# 2 passed
