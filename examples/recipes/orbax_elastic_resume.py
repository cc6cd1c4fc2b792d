"""Recipe: an Orbax checkpoint holding the params and the loader together, resumed on another
number of processes with another global batch; every element is delivered exactly once.

Run A trains on 2 processes x 4 devices (data parallel, global batch 64) and saves an Orbax
checkpoint with the params and the loader (``jaxload.checkpoint``). Run B restarts on 4 processes x
2 devices (model replicas across processes, global batch 96), restores both, and continues at the
same row of the shuffled dataset. On the same topology the same code resumes exactly, batch for
batch. A Grain ``MapDataset`` (as here) and a tf.data pipeline split by elements resume on
another topology; other pipelines resume on the same one (see the Resuming guide).

  jaxload launch -n 2 --local-devices 4 -- python examples/recipes/orbax_elastic_resume.py A /tmp/elastic
  jaxload launch -n 4 --local-devices 2 -- python examples/recipes/orbax_elastic_resume.py B /tmp/elastic
On a cluster the checkpoint directory is shared storage (REAL HOST: gs://my-bucket/run-1).
"""

import sys

import jaxload

jaxload.initialize()

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import grain  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

run, root = sys.argv[1], Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/elastic").absolute()
N = 1000
ds = (grain.MapDataset.range(N).shuffle(seed=0)
      .map(lambda i: {"id": np.int32(i), "x": np.float32(i % 7)}))
if run == "A":
    layout, global_batch_size, steps = jaxload.data_parallel(), 64, 5
else:
    layout, global_batch_size, steps = jaxload.model_replicas_across_processes(2), 96, None
loader = jaxload.from_grain(ds, layout, global_batch_size=global_batch_size, remainder="pad")
replicated = jax.sharding.NamedSharding(layout.mesh, jax.sharding.PartitionSpec())


@jax.jit
def train_step(params, batch):
    x = jax.numpy.where(batch["mask"], batch["x"], 0.0)
    return {"sum": params["sum"] + x.sum(), "step": params["step"] + 1}


def ids(batch) -> list[int]:
    """The real (masked-in) element ids of a global batch, the same list on every process."""
    full = multihost_utils.process_allgather(batch, tiled=True)
    return full["id"][full["mask"]].tolist()


manager = ocp.CheckpointManager(root)
if run == "A":
    params = {"sum": jax.device_put(np.float32(0), replicated),
              "step": jax.device_put(np.int32(0), replicated)}
else:  # restore the params and the loader saved by run A on 2 processes
    abstract = {k: jax.ShapeDtypeStruct((), dtype, sharding=replicated)
                for k, dtype in (("sum", np.float32), ("step", np.int32))}
    restored = manager.restore(manager.latest_step(), args=ocp.args.Composite(
        params=ocp.args.StandardRestore(abstract), data=jaxload.checkpoint.CheckpointRestore(loader)))
    params = restored["params"]
    start = manager.item_metadata(manager.latest_step())["data"]["rows"]
    print(f"process {jax.process_index()} of {jax.process_count()}: restored params at step "
          f"{int(params['step'])} and the loader at global row {start}; loading group "
          f"{loader.plan.shard_index} of {loader.plan.shard_count}, {loader.plan.local_batch_size} "
          f"rows per step")

delivered, first = [], None
batches = iter(loader)
for batch in batches if steps is None else (next(batches) for _ in range(steps)):
    params = train_step(params, batch)
    delivered += ids(batch)
    first = first or delivered[:]
state = loader.get_state()
if run == "A":
    manager.save(int(params["step"]), args=ocp.args.Composite(
        params=ocp.args.StandardSave(params), data=jaxload.checkpoint.CheckpointSave(loader)))
    manager.wait_until_finished()
    print(f"process {jax.process_index()} of {jax.process_count()}: {steps} steps of "
          f"{global_batch_size} rows, saved at global row {state['rows']} (step "
          f"{int(params['step'])})")
    if jax.process_index() == 0:
        (root / "delivered_A.json").write_text(json.dumps(delivered))
elif jax.process_index() == 0:
    order = list(grain.MapDataset.range(N).shuffle(seed=0))
    before = json.loads((root / "delivered_A.json").read_text())
    both = before + delivered
    print(f"run B: {int(params['step']) - 5} steps of {global_batch_size} rows; its first step "
          f"holds rows {start}-{start + global_batch_size - 1} of the shuffled order: "
          f"{sorted(first) == sorted(order[start:start + global_batch_size])}")
    print(f"run A delivered {len(before)} elements, run B {len(delivered)}: {len(set(both))} "
          f"distinct of {N}, every element exactly once: {sorted(both) == list(range(N))}")
    assert sorted(both) == list(range(N))

# Output (run A on 2 processes x 4 CPU devices, then run B on 4 x 2):
# [1] process 1 of 2: 5 steps of 64 rows, saved at global row 320 (step 5)
# [3] process 3 of 4: restored params at step 5 and the loader at global row 320; loading group 1 of 2
# [0] run B: 8 steps of 96 rows; its first step holds rows 320-415 of the shuffled order: True
# [0] run A delivered 320 elements, run B 680: 1000 distinct of 1000, every element exactly once: True
