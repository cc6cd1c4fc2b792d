"""The loader's state inside an Orbax checkpoint, next to the model state.

``CheckpointSave(loader)`` and ``CheckpointRestore(loader)`` are Orbax checkpoint args registered
for :class:`CheckpointHandler`, so they work in ``ocp.args.Composite`` with an
``ocp.CheckpointManager`` the way ``grain.checkpoint`` does. Each process writes its loader state
as ``process_{i}-of-{n}.json`` in the item's directory; where the state holds the buffers of a
tf.data iterator checkpoint (a shuffle that is not replayed: ``loader.explain()`` says), their
bytes go beside it, in ``process_{i}-of-{n}.bin``, not into the JSON.

- The state is taken when ``CheckpointSave`` is built, i.e. at ``manager.save(...)``: an async
  save that finishes later still records the batches handed out before the call.
- On restore, a process of a run on the same topology reads its own file and continues exactly;
  a process of a run on another topology (process count, layout, global batch size) reads any
  process's file and continues at its global row (see :mod:`jaxload._src.state`).
- ``set_state`` validates what must not change (backend, remainder mode, the dataset's length
  where known) and names the value that differs.

Importing this module imports ``orbax.checkpoint`` (``pip install jaxload[orbax]``); ``import
jaxload`` alone does not.

Example:
  >>> import grain, tempfile
  >>> import orbax.checkpoint as ocp
  >>> ds, layout = grain.MapDataset.range(64), jaxload.data_parallel()
  >>> loader = jaxload.from_grain(ds, layout, global_batch_size=16)
  >>> batches = iter(loader)
  >>> first = next(batches)
  >>> import jaxload.checkpoint
  >>> params = {"w": np.ones(3, np.float32)}
  >>> manager = ocp.CheckpointManager(tempfile.mkdtemp())
  >>> saved = manager.save(1, args=ocp.args.Composite(
  ...     params=ocp.args.StandardSave(params), data=jaxload.checkpoint.CheckpointSave(loader)))
  >>> manager.wait_until_finished()
  >>> fresh = jaxload.from_grain(ds, layout, global_batch_size=16)   # e.g. after a restart
  >>> restored = manager.restore(manager.latest_step(), args=ocp.args.Composite(
  ...     params=ocp.args.StandardRestore(params),
  ...     data=jaxload.checkpoint.CheckpointRestore(fresh)))
  >>> print(np.asarray(next(iter(fresh)))[:4])         # continues after the first batch
  [16 17 18 19]
"""

from jaxload._src import exports
from jaxload._src.checkpoint import (
    CheckpointHandler,
    CheckpointRestore,
    CheckpointSave,
    saved_state,
    state_file,
)

__all__ = (
    "CheckpointHandler",
    "CheckpointRestore",
    "CheckpointSave",
    "saved_state",
    "state_file",
)

exports.claim(__name__, globals(), __all__)
