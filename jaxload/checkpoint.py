"""The loader's state inside an Orbax checkpoint, next to the model state.

``CheckpointSave(loader)`` and ``CheckpointRestore(loader)`` are Orbax checkpoint args registered
for :class:`CheckpointHandler`, so they work in ``ocp.args.Composite`` with an
``ocp.CheckpointManager`` the way ``grain.checkpoint`` does. Each process writes its loader state
as ``process_{i}-of-{n}.json`` in the item's directory.

- The state is taken when ``CheckpointSave`` is built, i.e. at ``manager.save(...)``: an async
  save that finishes later still records the batches handed out before the call.
- On restore, a process of a run on the same topology reads its own file and continues exactly;
  a process of a run on another topology (process count, layout, global batch size) reads any
  process's file and continues at its global row (see :mod:`jaxload.state`).
- ``set_state`` validates what must not change (backend, remainder mode, the dataset's length
  where known) and names the value that differs.

Importing this module imports ``orbax.checkpoint`` (``pip install jaxload[orbax]``); ``import
jaxload`` alone does not.

Example:
  >>> import orbax.checkpoint as ocp
  >>> manager = ocp.CheckpointManager("/ckpt")
  >>> manager.save(step, args=ocp.args.Composite(
  ...     params=ocp.args.StandardSave(params), data=jaxload.checkpoint.CheckpointSave(loader)))
  >>> restored = manager.restore(manager.latest_step(), args=ocp.args.Composite(
  ...     params=ocp.args.StandardRestore(abstract_params),
  ...     data=jaxload.checkpoint.CheckpointRestore(loader)))
"""

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

from jaxload.loader import Loader

_FILE = re.compile(r"process_(\d+)-of-(\d+)\.json")


def state_file(directory: Any, process_index: int, process_count: int) -> epath.Path:
    """Where process ``process_index`` of ``process_count`` keeps its loader state."""
    return epath.Path(directory) / f"process_{process_index}-of-{process_count}.json"


def saved_state(directory: Any) -> dict:
    """The state this process continues from: its own file when the run has the same process
    count, otherwise the lowest-numbered process's (every process records the same global row).

    Example:
      >>> saved_state("/ckpt/6/data")["rows"]
      384
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
    """Saves and restores a :class:`~jaxload.Loader`'s state, one JSON file per process."""

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
    """Saves ``loader``'s state as it is now, when the args are built (async safe)."""

    loader: Loader
    state: dict = dataclasses.field(init=False, repr=False)

    def __post_init__(self):
        _check_loader("CheckpointSave", self.loader)
        self.state = self.loader.get_state()


@ocp.args.register_with_handler(CheckpointHandler, for_restore=True)
@dataclasses.dataclass
class CheckpointRestore(ocp.args.CheckpointArgs):
    """Restores the saved state into ``loader`` (``set_state``); its next pass continues there."""

    loader: Loader

    def __post_init__(self):
        _check_loader("CheckpointRestore", self.loader)


async def save_v1(loader: Loader, directory: Any):
    """Orbax v1 (``StatefulCheckpointable.save``): the state is taken now, on the calling thread;
    the returned awaitable writes this process's file once Orbax has created the directory."""
    state = loader.get_state()

    async def write() -> None:
        path = await directory.await_creation()
        state_file(path, jax.process_index(), jax.process_count()).write_text(
            json.dumps(state, indent=1))

    return write()


async def load_v1(loader: Loader, directory: Any):
    """Orbax v1 (``StatefulCheckpointable.load``): ``set_state`` from the saved state, also one
    saved on another process count (see :func:`saved_state`)."""
    loader.set_state(saved_state(directory))

    async def done() -> None:
        return None

    return done()


def _check_loader(args: str, loader: Any) -> None:
    if not isinstance(loader, Loader):
        raise TypeError(f"{args} expects a jaxload.Loader, got {type(loader).__name__}")
