"""Per-feature shardings, an eval batch smaller than the mesh, and a record of the ids.

Run on one machine as 2 processes x 4 fake CPU devices:
  jaxload launch -n 2 --local-devices 4 -- python examples/context_parallel.py

1. Context parallelism: a ``data=4 x seq=2`` mesh whose ``seq`` axis spans the processes. Each
   row's 8 tokens are split over ``seq``: both processes load the same rows (one loading group)
   and each hands its devices only its half of the tokens.
2. Eval with a global batch of 3 on 8 data-parallel devices: the batch is padded to 8 rows,
   ``mask`` False on the padding; process 1's rows are all padding, so it reads nothing.
3. ``record="id"``: which ids each loading group contributed at each step (a global batch of
   12 on 8 devices: 16 rows, process 0's 8 all real, process 1's 4 real and 4 padding).
"""

import jaxload

jaxload.initialize()  # first: sets up jax.distributed

import grain  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

me = jax.process_index()
source = grain.MapDataset.range(10).map(
    lambda i: {"id": np.int32(i), "tokens": (100 * i + np.arange(8)).astype(np.int32)})

# 1. tokens split over "seq", which spans the processes
devices = np.array(jax.devices()).reshape(jax.process_count(), -1).T  # rows: data, cols: seq
layout = jaxload.Layout(Mesh(devices, ("data", "seq")), "data", {"tokens": P("data", "seq")})
batch = next(iter(jaxload.from_grain(source, layout, global_batch_size=8)))
for shard in batch["tokens"].addressable_shards:
    rows, cols = shard.index
    print(f"process {me} device {shard.device.id}: rows {rows.start}-{rows.stop - 1}, tokens "
          f"{cols.start}-{cols.stop - 1}: {np.asarray(shard.data).tolist()}")

# 2. a global batch of 3 on 8 devices, padded to 8 rows
reads = []
counted = source.map(lambda e: reads.append(int(e["id"])) or e)
loader = jaxload.from_grain(counted, jaxload.data_parallel(), global_batch_size=3,
                            remainder="pad")
for step, batch in enumerate(loader):
    shards = batch["mask"].addressable_shards
    print(f"process {me} step {step}: rows {shards[0].index[0].start}-"
          f"{shards[-1].index[0].stop - 1}, mask "
          f"{[int(m) for s in shards for m in np.asarray(s.data)]}")
print(f"process {me} read ids {reads}")

# 3. the ids each loading group contributed, per step (global batch 12 of 20 ids: 16 rows)
loader = jaxload.from_grain(grain.MapDataset.range(20).map(lambda i: {"id": np.int32(i)}),
                            jaxload.data_parallel(), global_batch_size=12, remainder="pad",
                            record="id")
for _batch in loader:
    pass  # train_step(state, _batch)
records = loader.records(all_processes=True)
if me == 0:
    for entry in records:
        print(f"step {entry['step']}: ids by loading group {entry['ids']}")
