"""The implementation of :mod:`jaxload.checkpoint` (its public names and documentation are there)."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import jax

try:
    import orbax.checkpoint as ocp
    from etils import epath
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("jaxload.checkpoint needs orbax-checkpoint: pip install jaxload[orbax]") from e

from jaxload._src.loader import Loader

_FILE = re.compile(r"process_(\d+)-of-(\d+)\.json")


def state_file(directory: Any, process_index: int, process_count: int) -> epath.Path:
    """Where process ``process_index`` of ``process_count`` keeps its loader state.

    Example:
      >>> str(jaxload.checkpoint.state_file("/ckpt/1/data", 0, 2))
      '/ckpt/1/data/process_0-of-2.json'
    """
    return epath.Path(directory) / f"process_{process_index}-of-{process_count}.json"


def saved_state(directory: Any) -> dict:
    """The state this process continues from: its own file when the run has the same process
    count, otherwise the lowest-numbered process's (every process records the same global row).

    Example:
      >>> import grain, json, tempfile
      >>> loader = jaxload.from_grain(grain.MapDataset.range(64), jaxload.data_parallel(),
      ...                             global_batch_size=16)
      >>> batches = iter(loader)
      >>> first, second = next(batches), next(batches)
      >>> directory = tempfile.mkdtemp()
      >>> path = jaxload.checkpoint.state_file(directory, 0, 2)  # as process 0 of 2 wrote it
      >>> chars = path.write_text(json.dumps(loader.get_state()))
      >>> jaxload.checkpoint.saved_state(directory)["rows"]      # read by 1 process of 1
      32
    """
    own = state_file(directory, jax.process_index(), jax.process_count())
    if own.exists():
        return json.loads(own.read_text())
    files = sorted((int(m[1]), p) for p in epath.Path(directory).iterdir()
                   if (m := _FILE.fullmatch(p.name)))
    if not files:
        raise FileNotFoundError(f"no jaxload loader state (process_<i>-of-<n>.json) in {directory}")
    return json.loads(files[0][1].read_text())


class CheckpointHandler(ocp.CheckpointHandler):  # Orbax's v0 API; v1: the Loader itself
    """Saves and restores a :class:`~jaxload.Loader`'s state, one JSON file per process.

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
        path.write_text(json.dumps(args.state, indent=1))

    def restore(self, directory: Any, args: CheckpointRestore) -> Loader:
        args.loader.set_state(saved_state(directory))
        return args.loader

    def metadata(self, directory: Any) -> dict:
        """The state of the lowest-numbered process (its global row, plan, backend, ...)."""
        return saved_state(directory)


@ocp.args.register_with_handler(CheckpointHandler, for_save=True)
@dataclasses.dataclass
class CheckpointSave(ocp.args.CheckpointArgs):
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
    state: dict = dataclasses.field(init=False, repr=False)

    def __post_init__(self):
        _check_loader("CheckpointSave", self.loader)
        self.state = self.loader.get_state()


@ocp.args.register_with_handler(CheckpointHandler, for_restore=True)
@dataclasses.dataclass
class CheckpointRestore(ocp.args.CheckpointArgs):
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

    def __post_init__(self):
        _check_loader("CheckpointRestore", self.loader)


async def save_v1(loader: Loader, directory: Any):
    """Orbax v1 (``StatefulCheckpointable.save``): the state is taken now, on the calling thread;
    the returned awaitable writes this process's file once Orbax has created the directory.

    Orbax calls it through :meth:`jaxload.Loader.save`.

    Example:
      >>> import grain, tempfile
      >>> import orbax.checkpoint as ocp
      >>> ds, layout = grain.MapDataset.range(64), jaxload.data_parallel()
      >>> loader = jaxload.from_grain(ds, layout, global_batch_size=16)
      >>> batches = iter(loader)
      >>> first = next(batches)
      >>> path = tempfile.mkdtemp() + "/step_1"
      >>> ocp.v1.save_checkpointables(path, {"loader": loader})   # calls save_v1(loader, ...)
      >>> jaxload.checkpoint.saved_state(path + "/loader")["rows"]
      16
    """
    state = loader.get_state()

    async def write() -> None:
        path = await directory.await_creation()
        state_file(path, jax.process_index(), jax.process_count()).write_text(
            json.dumps(state, indent=1))

    return write()


async def load_v1(loader: Loader, directory: Any):
    """Orbax v1 (``StatefulCheckpointable.load``): ``set_state`` from the saved state, also one
    saved on another process count (see :func:`saved_state`).

    Orbax calls it through :meth:`jaxload.Loader.load`.

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
      >>> restored = ocp.v1.load_checkpointables(path, {"loader": fresh})  # calls load_v1
      >>> print(np.asarray(next(iter(fresh)))[:4])
      [16 17 18 19]
    """
    loader.set_state(saved_state(directory))

    async def done() -> None:
        return None

    return done()


def _check_loader(args: str, loader: Any) -> None:
    if not isinstance(loader, Loader):
        raise TypeError(f"{args} expects a jaxload.Loader, got {type(loader).__name__}")
