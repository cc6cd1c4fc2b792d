"""The implementation of :mod:`jaxload.checkpoint` (its public names and documentation are there)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

try:
    import orbax.checkpoint as ocp
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("jaxload.checkpoint needs orbax-checkpoint: pip install jaxload[orbax]") from e

from jaxload._src.checkpoint_files import load_v1, save_v1, saved_state, state_file, write_state
from jaxload._src.loader import Loader

__all__ = ["CheckpointHandler", "CheckpointRestore", "CheckpointSave", "load_v1", "save_v1",
           "saved_state", "state_file"]


# Orbax's v0 API (v1: the Loader itself); orbax is untyped, so its base classes are Any
class CheckpointHandler(ocp.CheckpointHandler):  # type: ignore[misc]
    """Saves and restores a :class:`~jaxload.Loader`'s state, one JSON file per process (and
    beside it, where the state holds a tf.data checkpoint's buffers, their bytes: ``.bin``).

    Orbax uses it for :class:`CheckpointSave` and :class:`CheckpointRestore` (see the module's
    example); it can also be called directly.

    Example:
      >>> import grain, tempfile
      >>> import orbax.checkpoint as ocp
      >>> ds, layout = grain.MapDataset.range(64), jaxload.data_parallel()
      >>> loader = jaxload.from_grain(ds, layout, global_batch_size=16)
      >>> batches = iter(loader)
      >>> first = next(batches)
      >>> directory = tempfile.mkdtemp()
      >>> handler = jaxload.checkpoint.CheckpointHandler()
      >>> handler.save(directory, jaxload.checkpoint.CheckpointSave(loader))
      >>> handler.metadata(directory)["rows"]
      16
    """

    def save(self, directory: Any, args: CheckpointSave) -> None:
        path = state_file(directory, jax.process_index(), jax.process_count())
        write_state(path, args.state)

    def restore(self, directory: Any, args: CheckpointRestore) -> Loader:
        args.loader.set_state(saved_state(directory))
        return args.loader

    def metadata(self, directory: Any) -> dict[str, Any]:
        """The state of the lowest-numbered process (its global row, plan, backend, ...)."""
        return saved_state(directory)


@ocp.args.register_with_handler(CheckpointHandler, for_save=True)
@dataclasses.dataclass
class CheckpointSave(ocp.args.CheckpointArgs):  # type: ignore[misc]  # orbax is untyped
    """Saves ``loader``'s state as it is now, when the args are built (async safe).

    Example:
      >>> import grain, tempfile
      >>> import orbax.checkpoint as ocp
      >>> ds, layout = grain.MapDataset.range(64), jaxload.data_parallel()
      >>> loader = jaxload.from_grain(ds, layout, global_batch_size=16)
      >>> batches = iter(loader)
      >>> first = next(batches)
      >>> args = jaxload.checkpoint.CheckpointSave(loader)   # the state is taken here
      >>> second = next(batches)                            # not in this checkpoint
      >>> manager = ocp.CheckpointManager(tempfile.mkdtemp())
      >>> saved = manager.save(1, args=ocp.args.Composite(data=args))
      >>> manager.wait_until_finished()
      >>> args.state["rows"]
      16
    """

    loader: Loader
    state: dict[str, Any] = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        _check_loader("CheckpointSave", self.loader)
        self.state = self.loader.get_state()


@ocp.args.register_with_handler(CheckpointHandler, for_restore=True)
@dataclasses.dataclass
class CheckpointRestore(ocp.args.CheckpointArgs):  # type: ignore[misc]  # orbax is untyped
    """Restores the saved state into ``loader`` (``set_state``); its next pass continues there.

    Example:
      >>> import grain, tempfile
      >>> import orbax.checkpoint as ocp
      >>> ds, layout = grain.MapDataset.range(64), jaxload.data_parallel()
      >>> loader = jaxload.from_grain(ds, layout, global_batch_size=16)
      >>> batches = iter(loader)
      >>> first = next(batches)
      >>> manager = ocp.CheckpointManager(tempfile.mkdtemp())
      >>> saved = manager.save(1, args=ocp.args.Composite(
      ...     data=jaxload.checkpoint.CheckpointSave(loader)))
      >>> manager.wait_until_finished()
      >>> fresh = jaxload.from_grain(ds, layout, global_batch_size=16)
      >>> restored = manager.restore(1, args=ocp.args.Composite(
      ...     data=jaxload.checkpoint.CheckpointRestore(fresh)))
      >>> restored["data"] is fresh, np.asarray(next(iter(fresh)))[0]
      (True, np.int32(16))
    """

    loader: Loader

    def __post_init__(self) -> None:
        _check_loader("CheckpointRestore", self.loader)


def _check_loader(args: str, loader: Any) -> None:
    if not isinstance(loader, Loader):
        raise TypeError(f"{args} expects a jaxload.Loader, got {type(loader).__name__}")
