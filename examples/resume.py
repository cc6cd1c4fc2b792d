"""Resuming after an interruption: the loader's state next to an Orbax checkpoint.

Trains 6 steps, checkpoints params with Orbax and each process's loader state as JSON beside it,
then (as a restarted job would) builds everything afresh, restores both and trains on: the
batches after the restore are exactly the ones the first run would have seen next.
  jaxload launch -n 2 --local-devices 4 -- python examples/resume.py CHECKPOINT_DIR
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

root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/jaxload-resume").absolute()
ds = grain.MapDataset.range(4096).map(lambda i: {"x": np.float32(i), "id": np.int32(i)})
layout = jaxload.data_parallel()
replicated = jax.sharding.NamedSharding(layout.mesh, jax.sharding.PartitionSpec())


def first_ids(batch) -> list[int]:
    """The first element id on each of this process's devices."""
    return [int(np.asarray(s.data)[0]) for s in batch["id"].addressable_shards]


@jax.jit
def train_step(params, batch):
    return {"mean": 0.9 * params["mean"] + 0.1 * batch["x"].mean()}


def run(batches, params, steps):
    for _ in range(steps):
        batch = next(batches)
        params = train_step(params, batch)
    return params, first_ids(batch)


# The first job: 6 steps, then a checkpoint, then 2 more steps (what it would have seen next).
loader = jaxload.from_grain(ds, layout, global_batch_size=64)
batches = iter(loader)
params = {"mean": jax.device_put(np.float32(0), replicated)}
params, _ = run(batches, params, 6)
checkpointer = ocp.StandardCheckpointer()
checkpointer.save(root / "step_6" / "params", params, force=True)
checkpointer.wait_until_finished()
state_file = root / "step_6" / f"loader_{jax.process_index()}.json"
state_file.write_text(json.dumps(loader.get_state()))
_, would_see = run(batches, params, 2)

# The restarted job: a fresh loader and params, restored from the checkpoint.
restarted = jaxload.from_grain(ds, layout, global_batch_size=64)
restarted.set_state(json.loads(state_file.read_text()))
restored = checkpointer.restore(root / "step_6" / "params", params)
_, saw = run(iter(restarted), restored, 2)
state = json.loads(state_file.read_text())
print(f"process {jax.process_index()}: saved loader state {state['position']} at step "
      f"{state['step']}; 2 steps after the restore the devices start with ids {saw}, "
      f"the uninterrupted run had {would_see}")
assert saw == would_see
