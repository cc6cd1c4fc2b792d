"""A batch-size ramp-up: 16 rows per step for steps 0-2, 32 for steps 3-5, then 64, over a pass
of 203 samples (``remainder="pad"``), data parallel, one step compiled per size before any data.

Run on one machine as 2 processes x 4 fake CPU devices:
  jaxload launch -n 2 --local-devices 4 -- python examples/ramp_up.py
"""

import jaxload

jaxload.initialize()  # first: sets up jax.distributed

import grain  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

SCHEDULE = [(0, 16), (3, 32), (6, 64)]  # (first step, global batch size)

source = grain.MapDataset.range(203).map(lambda i: {"id": np.int32(i)})
loader = jaxload.from_grain(source, jaxload.data_parallel(), global_batch_size=SCHEDULE,
                            remainder="pad")


def step(batch):  # the sum of the real ids: the mask leaves the padding rows out
    return jnp.sum(jnp.where(batch["mask"], batch["id"], 0))


# one executable per size, compiled ahead of time from each size's batch spec
compiled = {first: jax.jit(step).lower(loader.batch_spec(first)).compile()
            for first, _ in SCHEDULE}
if jax.process_index() == 0:
    print(loader.plan.explain().split("Loading groups")[0].rstrip())

total = 0
for k, batch in enumerate(loader):
    total += int(compiled[max(f for f in compiled if f <= k)](batch))
    firsts = [int(np.asarray(s.data)[0]) for s in batch["id"].addressable_shards]
    print(f"step {k}: {batch['id'].shape[0]:>2} rows, first id on each of this process's "
          f"devices {firsts}")
print(f"sum of the ids delivered: {total} (0 + 1 + ... + 202 = {sum(range(203))})")
