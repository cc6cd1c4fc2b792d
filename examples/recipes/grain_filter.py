"""Recipe: a Grain MapDataset with a filter, split over several loading groups, every kept
record delivered exactly once.

A filter keeps an unknown number of records from each part, so jaxload cannot cut the
filtered dataset into steps by index for several loading groups (it refuses to). Split it
yourself before the filter and pass shard=False: each group filters its own part. The parts
keep different numbers of records, so remainder="pad" fills the short ones with rows of zeros
marked mask=False, and every process runs the same number of steps.

  jaxload launch -n 2 --local-devices 4 -- python examples/recipes/grain_filter.py
"""

import jaxload

jaxload.initialize()

import grain  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

GLOBAL_BATCH = 64
layout = jaxload.data_parallel()
plan = layout.plan(GLOBAL_BATCH)

records = grain.MapDataset.range(1000).shuffle(seed=0)  # the same order on every process
mine = (records[plan.shard_index::plan.shard_count]  # this loading group's part, then its filter
        .filter(lambda i: i % 3 != 0)
        .map(lambda i: {"id": np.int32(i), "x": np.float32(i) / 1000}))
loader = jaxload.from_grain(mine, layout, global_batch_size=GLOBAL_BATCH, shard=False,
                            remainder="pad")

kept, steps = [], 0
for batch in loader:
    steps += 1
    for ids, mask in zip(batch["id"].addressable_shards, batch["mask"].addressable_shards,
                         strict=True):
        kept += np.asarray(ids.data)[np.asarray(mask.data)].tolist()  # real rows only
everyone = multihost_utils.process_allgather(np.array([len(kept)]))
print(f"process {jax.process_index()}: {steps} steps, {len(kept)} kept records here "
      f"(of {len(records) // plan.shard_count}); all processes: {int(everyone.sum())} "
      f"= {sum(1 for i in range(1000) if i % 3 != 0)} kept of 1000")

# Output (2 processes x 4 CPU devices):
# [0] process 0: 11 steps, 347 kept records here (of 500); all processes: 666 = 666 kept of 1000
