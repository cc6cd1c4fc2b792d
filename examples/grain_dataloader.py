"""A grain.DataLoader with worker processes, sharded by loading group and batched per process.

  jaxload launch -n 2 --local-devices 4 -- python examples/grain_dataloader.py

The DataLoader shards and batches itself: its sampler gets the loading group's shard options
(jaxload.grain_shard_options), its last operation batches plan.local_batch_size rows. jaxload
checks both against the plan, then assembles global jax.Arrays. Sharding by process
(ShardByJaxProcess) is refused where a model replica spans processes.

Grain's worker processes import this file again: everything that runs (jaxload.initialize()
included) sits under `if __name__ == "__main__":`, or each worker would join the JAX cluster.
"""

import absl.flags
import grain
import jax
import numpy as np

import jaxload


class Squares(grain.sources.RandomAccessDataSource):
    """1000 records {"id", "x"}; module-level, so that worker processes can load it."""

    def __len__(self):
        return 1000

    def __getitem__(self, i):
        return {"id": np.int32(i), "x": np.full(4, i * i, np.float32)}


def data_loader(layout, global_batch_size, shard_options, worker_count=2):
    plan = layout.plan(global_batch_size)
    sampler = grain.samplers.IndexSampler(num_records=1000, num_epochs=1, shuffle=True, seed=0,
                                          shard_options=shard_options)
    return grain.DataLoader(
        data_source=Squares(), sampler=sampler, worker_count=worker_count,
        operations=[grain.transforms.Batch(plan.local_batch_size, drop_remainder=True)])


if __name__ == "__main__":
    jaxload.initialize()
    absl.flags.FLAGS.mark_as_parsed()  # Grain's worker processes read absl flags
    layout = jaxload.data_parallel()
    options = jaxload.grain_shard_options(layout, global_batch_size=64)
    loader = jaxload.from_grain(data_loader(layout, 64, options), layout, global_batch_size=64)
    ids = []
    for step, batch in enumerate(loader):
        if step == 0:
            first = [int(s.data[0]) for s in batch["id"].addressable_shards]
            print(f"process {jax.process_index()}: {options}; step 0, first id on each of its "
                  f"devices {first}")
        ids += [int(i) for s in batch["id"].addressable_shards for i in s.data]
    print(f"process {jax.process_index()}: {step + 1} steps, {len(ids)} rows loaded here, "
          f"{len(set(ids))} distinct")

    across = jaxload.model_replicas_across_processes(2)  # one replica on both processes
    wrong = grain.sharding.ShardByJaxProcess(drop_remainder=True)
    try:
        jaxload.from_grain(data_loader(across, 64, wrong, worker_count=0), across,
                           global_batch_size=64)
    except ValueError as e:
        print(f"process {jax.process_index()}: ShardByJaxProcess refused: {e}")
