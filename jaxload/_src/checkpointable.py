"""Orbax v1's ``StatefulCheckpointable`` protocol for a loader: ``save`` and ``load``, written
with :mod:`jaxload._src.checkpoint_files` (imported only when Orbax calls them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from jaxload._src.checkpoint_files import Stateful


class Checkpointable:
    """A loader's ``save``/``load`` for ``ocp.v1.save_checkpointables`` /
    ``load_checkpointables``; the loader supplies ``get_state``/``set_state``."""

    async def save(self, directory: Any) -> Any:
        """Orbax v1's ``StatefulCheckpointable.save``: this process's state, taken now, written
        as ``process_<i>-of-<n>.json`` in ``directory``.

        Example:
          >>> import grain, os, tempfile
          >>> import orbax.checkpoint as ocp
          >>> loader = jaxload.from_grain(grain.MapDataset.range(64), jaxload.data_parallel(),
          ...                             global_batch_size=16)
          >>> batches = iter(loader)
          >>> first = next(batches)
          >>> path = tempfile.mkdtemp() + "/step_1"
          >>> params = {"w": np.ones(3, np.float32)}
          >>> ocp.v1.save_checkpointables(path, {"params": params, "loader": loader})
          >>> os.listdir(os.path.join(path, "loader"))
          ['process_0-of-1.json']
        """
        from jaxload._src import checkpoint_files  # imports etils: only when Orbax calls

        return await checkpoint_files.save_v1(cast("Stateful", self), directory)

    async def load(self, directory: Any) -> Any:
        """Orbax v1's ``StatefulCheckpointable.load``: ``set_state`` from the saved state (this
        process's, or on another process count the lowest-numbered process's).

        Example:
          >>> import grain, tempfile
          >>> import orbax.checkpoint as ocp
          >>> ds, layout = grain.MapDataset.range(64), jaxload.data_parallel()
          >>> loader = jaxload.from_grain(ds, layout, global_batch_size=16)
          >>> batches = iter(loader)
          >>> first = next(batches)
          >>> path = tempfile.mkdtemp() + "/step_1"
          >>> ocp.v1.save_checkpointables(path, {"loader": loader})
          >>> fresh = jaxload.from_grain(ds, layout, global_batch_size=16)
          >>> restored = ocp.v1.load_checkpointables(path, {"loader": fresh})
          >>> print(np.asarray(next(iter(fresh)))[:4])
          [16 17 18 19]
        """
        from jaxload._src import checkpoint_files  # imports etils: only when Orbax calls

        return await checkpoint_files.load_v1(cast("Stateful", self), directory)
