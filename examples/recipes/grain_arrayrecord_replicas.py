"""Recipe: a grain.DataLoader with worker processes over ArrayRecord files, feeding model
replicas that span two processes.

The DataLoader shards and batches itself; jaxload gives it the shard options of this process's
loading group (the 2 processes of a replica get the same shard, so they load identical rows,
which jaxload proves every step) and checks its batch size against the plan. Its random
transform draws from the sampler's per-record seeds, the same on both processes of a group.

Grain's worker processes import this file again: everything that runs sits under
`if __name__ == "__main__":`, and the transforms are module-level classes.

On a cluster (4 hosts x 8 GPUs, one process per GPU, replicas of 2 hosts = 16 processes: set
MODEL_PROCESSES = 16 below, which makes 2 loading groups of 16 processes):
  srun --nodes=4 --ntasks-per-node=8 --gpus-per-task=1 \
      python grain_arrayrecord_replicas.py "/data/train-*.array_record"
On this machine (2 processes of 4 CPU devices: one replica group; stand-in files):
  jaxload launch -n 2 --local-devices 4 -- python examples/recipes/grain_arrayrecord_replicas.py
"""

import glob
import pickle
import sys

import grain
import numpy as np

import jaxload

GLOBAL_BATCH, WORKERS = 256, 2  # REAL HOST: WORKERS = 8 (one per spare core or so)
MODEL_PROCESSES = 2  # REAL HOST: 16 (a replica over 2 hosts of 8 GPUs, one process per GPU)


class Decode(grain.transforms.Map):
    def map(self, record):
        element = pickle.loads(record)
        return {"id": np.int32(element["id"]), "pixels": element["pixels"].astype(np.float32)}


class RandomFlip(grain.transforms.RandomMap):
    def random_map(self, element, rng):
        if rng.random() < 0.5:
            element["pixels"] = element["pixels"][::-1].copy()
        return element


def main():
    import absl.flags
    import jax
    import recipe_data  # stand-in files only: not needed on a real cluster

    jaxload.initialize()
    absl.flags.FLAGS.mark_as_parsed()  # Grain's worker processes read absl flags
    paths = sorted(glob.glob(sys.argv[1])) if len(sys.argv) > 1 else recipe_data.array_records()
    source = grain.sources.ArrayRecordDataSource(paths)

    layout = jaxload.model_replicas_across_processes(MODEL_PROCESSES)
    plan = layout.plan(GLOBAL_BATCH)
    sampler = grain.samplers.IndexSampler(
        num_records=len(source), shuffle=True, seed=0, num_epochs=1,
        shard_options=jaxload.grain_shard_options(layout, global_batch_size=GLOBAL_BATCH))
    data_loader = grain.DataLoader(
        data_source=source, sampler=sampler, worker_count=WORKERS,
        operations=[Decode(), RandomFlip(),
                    grain.transforms.Batch(plan.local_batch_size, drop_remainder=True)])
    loader = jaxload.from_grain(data_loader, layout, global_batch_size=GLOBAL_BATCH)

    ids, steps = set(), 0
    for batch in loader:
        steps += 1
        ids.update(int(i) for s in batch["id"].addressable_shards for i in np.asarray(s.data))
    print(f"process {jax.process_index()}: loading group {plan.shard_index} of "
          f"{plan.shard_count} {plan.loading_groups[plan.shard_index]}, {steps} steps of "
          f"{batch['pixels'].shape}, {len(ids)} distinct records on its devices")


if __name__ == "__main__":
    main()

# Output (2 processes x 4 CPU devices):
# [0] process 0: loading group 0 of 1 (0, 1), 16 steps of (256, 16), 4096 distinct records on its devices
# [1] process 1: loading group 0 of 1 (0, 1), 16 steps of (256, 16), 4096 distinct records on its devices
