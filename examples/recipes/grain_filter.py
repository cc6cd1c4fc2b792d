"""Recipe: a Grain MapDataset with a filter, split over several loading groups, every kept
record delivered exactly once.

Pass the filtered dataset whole, as for one process. jaxload splits it by index, so each loading
group filters its own share (indices k, k + K, ...) and the groups keep different numbers of
records; remainder="pad" fills the short groups with rows of zeros marked mask=False, so every
process runs the same number of steps and every kept record arrives once. (With the default
remainder="drop" a pass ends when one group runs out, and a warning says what that drops.)

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
ds = (grain.MapDataset.range(1000).shuffle(seed=0)  # the same order on every process
      .filter(lambda i: i % 3 != 0)
      .map(lambda i: {"id": np.int32(i), "x": np.float32(i) / 1000}))
loader = jaxload.from_grain(ds, layout, global_batch_size=GLOBAL_BATCH, remainder="pad")

kept, steps = [], 0
for batch in loader:
    steps += 1
    for ids, mask in zip(batch["id"].addressable_shards, batch["mask"].addressable_shards,
                         strict=True):
        kept += np.asarray(ids.data)[np.asarray(mask.data)].tolist()  # real rows only
# how often each of the 1000 records arrived, summed over the processes
times = multihost_utils.process_allgather(np.bincount(kept, minlength=1000)).sum(axis=0)
expected = np.array([i % 3 != 0 for i in range(1000)])
print(f"process {jax.process_index()}: {steps} steps, {len(kept)} kept records on its devices; "
      f"all processes: each of the {expected.sum()} kept records once: "
      f"{bool((times == expected).all())}")
assert (times == expected).all()

# Output (2 processes x 4 CPU devices):
# [0] process 0: 11 steps, 347 kept records on its devices; all processes: each of the 666
# [1] process 1: 11 steps, 319 kept records on its devices; all processes: each of the 666
