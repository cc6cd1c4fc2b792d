"""A complete small training loop: linear regression on synthetic data, pure JAX, data parallel.

Each process feeds its loading group's rows from a tf.data pipeline; the loader checks on the
first step that every device holds the right rows. Run on one machine:
  jaxload launch -n 2 --local-devices 4 -- python examples/train.py
"""

import jaxload

jaxload.initialize()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from rich.progress import Progress  # noqa: E402

FEATURES, SAMPLES, GLOBAL_BATCH, EPOCHS, LR = 16, 8192, 256, 3, 0.05

rng = np.random.default_rng(0)  # the same synthetic dataset on every process
w_true = rng.normal(size=FEATURES).astype(np.float32)
x = rng.normal(size=(SAMPLES, FEATURES)).astype(np.float32)
y = (x @ w_true + 0.01 * rng.normal(size=SAMPLES)).astype(np.float32)
ds = tf.data.Dataset.from_tensor_slices({"x": x, "y": y})

layout = jaxload.data_parallel()
loader = jaxload.from_tf_data(ds, layout, global_batch_size=GLOBAL_BATCH)
replicated = jax.sharding.NamedSharding(layout.mesh, jax.sharding.PartitionSpec())
w = jax.device_put(np.zeros(FEATURES, np.float32), replicated)  # same value everywhere: fine


@jax.jit
def train_step(w, batch):
    def loss_fn(w):
        return jnp.mean((batch["x"] @ w - batch["y"]) ** 2)

    loss, grad = jax.value_and_grad(loss_fn)(w)
    return w - LR * grad, loss


steps_per_epoch = SAMPLES // GLOBAL_BATCH
losses = []
with Progress(disable=jax.process_index() != 0, transient=True) as progress:
    task = progress.add_task("training", total=EPOCHS * steps_per_epoch)
    for epoch in range(EPOCHS):
        for batch in loader:
            w, loss = train_step(w, batch)
            if not losses:
                losses.append(float(loss))
                if jax.process_index() == 0:
                    print(f"first step: loss {losses[0]:.5f}", flush=True)
            progress.advance(task)
        losses.append(float(loss))
        if jax.process_index() == 0:
            print(f"epoch {epoch}: loss {losses[-1]:.5f}", flush=True)

error = float(jnp.max(jnp.abs(w - w_true)))
if jax.process_index() == 0:
    print(f"max |w - w_true| = {error:.4f}")
assert losses[-1] < losses[0] and error < 0.05, (losses, error)

summary = loader.stats(all_processes=True)  # every process calls it: it exchanges the numbers
if jax.process_index() == 0:
    print(summary)
