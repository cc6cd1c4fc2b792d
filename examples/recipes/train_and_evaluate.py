"""Recipe: a training loop with an evaluation after each epoch, on a second loader.

The training loader drops the last partial batch (remainder="drop", the default) and
reshuffles each epoch; the evaluation loader pads it (remainder="pad"), so every one of the
1,000 validation rows counts exactly once: its batches carry a bool "mask", True on real rows,
and the metrics are sums over masked rows. Both loaders live for the whole run (build them
once); each `for batch in loader` is one pass.

  jaxload launch -n 2 --local-devices 4 -- python examples/recipes/train_and_evaluate.py
"""

import jaxload

jaxload.initialize()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

FEATURES, GLOBAL_BATCH, EPOCHS = 8, 256, 3
rng = np.random.default_rng(0)  # the same data on every process
w_true = rng.normal(size=FEATURES).astype(np.float32)


def split(rows):
    x = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    return {"x": x, "y": (x @ w_true).astype(np.float32)}


train_ds = tf.data.Dataset.from_tensor_slices(split(8192)).shuffle(8192, seed=0)
eval_ds = tf.data.Dataset.from_tensor_slices(split(1000))  # 1000: not a multiple of 256

layout = jaxload.data_parallel()
train = jaxload.from_tf_data(train_ds, layout, global_batch_size=GLOBAL_BATCH)
evaluate = jaxload.from_tf_data(eval_ds, layout, global_batch_size=GLOBAL_BATCH, remainder="pad")
replicated = jax.sharding.NamedSharding(layout.mesh, jax.sharding.PartitionSpec())
w = jax.device_put(np.zeros(FEATURES, np.float32), replicated)


@jax.jit
def train_step(w, batch):
    loss, grad = jax.value_and_grad(lambda w: jnp.mean((batch["x"] @ w - batch["y"]) ** 2))(w)
    return w - 0.002 * grad, loss


@jax.jit
def eval_step(w, batch):
    errors = jnp.where(batch["mask"], (batch["x"] @ w - batch["y"]) ** 2, 0.0)
    return errors.sum(), batch["mask"].sum()  # sums: the padding rows add nothing


for epoch in range(EPOCHS):
    for batch in train:
        w, loss = train_step(w, batch)
    total, rows = 0.0, 0
    for batch in evaluate:
        error, real = eval_step(w, batch)
        total, rows = total + float(error), rows + int(real)
    if jax.process_index() == 0:
        print(f"epoch {epoch}: train loss {float(loss):.4f}, eval loss {total / rows:.4f} "
              f"over {rows} rows")

# Output (2 processes x 4 CPU devices):
# [0] epoch 0: train loss
# [0] epoch 2: train loss
