"""Where a loader's state is kept in a checkpoint directory, and Orbax v1's ``save``/``load``
of it (:class:`jaxload._src.checkpointable.Checkpointable` calls them); needs ``etils`` (Orbax's).

The loader is typed by what these functions use of it (:class:`Stateful`), so that this module
does not import :mod:`jaxload._src.loader`, which imports it through ``Checkpointable``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
import time
from collections.abc import Coroutine
from typing import Any, Protocol

import jax

from jaxload._src import compat, whereabouts

try:
    from etils import epath
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("jaxload.checkpoint needs orbax-checkpoint: pip install jaxload[orbax]") from e

_FILE = re.compile(r"process_(\d+)-of-(\d+)\.json")
_BESIDE = 1024  # a string of a state longer than this (a checkpoint's buffers) goes beside
_MARK = "jaxload.beside"  # a string written beside: {_MARK: [offset, length, "base64" or "text"]}
_CREATED_TIMEOUT_S = 60.0  # how long a process waits for the primary to create the directory
WRITTEN_TIMEOUT_S = 600.0  # how long a save waits for the slowest process's file (Orbax's own)


class Stateful(Protocol):
    """What is saved and restored: a :class:`~jaxload.Loader`."""

    def get_state(self) -> dict[str, Any]: ...

    def set_state(self, state: dict[str, Any]) -> None: ...


def state_file(directory: Any, process_index: int, process_count: int) -> epath.Path:
    """Where process ``process_index`` of ``process_count`` keeps its loader state.

    Example:
      >>> str(jaxload.checkpoint.state_file("/ckpt/1/data", 0, 2))
      '/ckpt/1/data/process_0-of-2.json'
    """
    return epath.Path(directory) / f"process_{process_index}-of-{process_count}.json"


def saved_state(directory: Any) -> dict[str, Any]:
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
    path = state_file(directory, jax.process_index(), jax.process_count())
    if not path.exists():
        files = sorted((int(m[1]), p) for p in epath.Path(directory).iterdir()
                       if (m := _FILE.fullmatch(p.name)))
        if not files:
            raise FileNotFoundError(
                f"no jaxload loader state (process_<i>-of-<n>.json) in {directory}")
        path = files[0][1]
    return read_state(path)


def write_state(file: Any, state: dict[str, Any]) -> None:
    """Writes ``state`` to ``file`` as JSON, each of its long strings (the buffers of a tf.data
    iterator checkpoint, base64) as bytes in a file of its own beside it (``.bin``), only where
    it has any.

    Example:
      >>> import tempfile
      >>> file = epath.Path(tempfile.mkdtemp()) / "process_0-of-1.json"
      >>> write_state(file, {"rows": 16, "position": {"state": "QUJD" * 20_000}})
      >>> len(file.read_text()) < 200, file.with_suffix(".bin").stat().length
      (True, 60000)
      >>> read_state(file)["position"]["state"] == "QUJD" * 20_000
      True
    """
    beside: list[bytes] = []
    written = [0]  # bytes of beside so far

    def out(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: out(v) for key, v in value.items()}
        if isinstance(value, list):
            return [out(v) for v in value]
        if not isinstance(value, str) or len(value) <= _BESIDE:
            return value
        try:
            data, kind = base64.b64decode(value, validate=True), "base64"
        except binascii.Error:
            data, kind = value.encode(), "text"
        beside.append(data)
        written[0] += len(data)
        return {_MARK: [written[0] - len(data), len(data), kind]}

    text = json.dumps(out(state), indent=1)
    if beside:
        file.with_suffix(".bin").write_bytes(b"".join(beside))
    file.write_text(text)


def read_state(file: Any) -> dict[str, Any]:
    """The state :func:`write_state` wrote to ``file``."""
    beside: list[bytes] = []

    def back(value: Any) -> Any:
        if isinstance(value, dict) and set(value) == {_MARK}:
            if not beside:
                beside.append(file.with_suffix(".bin").read_bytes())
            offset, length, kind = value[_MARK]
            data = beside[0][offset:offset + length]
            return base64.b64encode(data).decode("ascii") if kind == "base64" else data.decode()
        if isinstance(value, dict):
            return {key: back(v) for key, v in value.items()}
        return [back(v) for v in value] if isinstance(value, list) else value

    state: dict[str, Any] = back(json.loads(file.read_text()))
    return state


async def save_v1(loader: Stateful, directory: Any) -> Coroutine[Any, Any, None]:
    """Orbax v1 (``StatefulCheckpointable.save``): the state is taken now, on the calling thread;
    the returned awaitable writes this process's file once Orbax has created the directory, and
    returns once every process has written its own.

    Orbax's primary process commits the checkpoint (renames its temporary directory) as soon as
    its own background work is done, so a handler that writes on every process must wait for
    the others itself (Orbax's own PyTree handler does): otherwise a slower process writes into a
    directory already renamed, and the checkpoint lacks its file.

    Orbax calls it through :meth:`jaxload.Loader.save` (whose docstring has the example).
    """
    state = loader.get_state()
    # named alike on every process without a message: each counts its saves (the directory
    # keeps the name new where the count starts again, as between a warm test cluster's calls)
    count = whereabouts.CREATED.new("checkpoint-written", "").ordinal
    barrier = f"jaxload/checkpoint-written/{count}@{getattr(directory, 'path', directory)}"

    async def write() -> None:
        path = await directory.await_creation()
        file = state_file(path, jax.process_index(), jax.process_count())
        await asyncio.to_thread(_created, file.parent)
        await asyncio.to_thread(write_state, file, state)
        await asyncio.to_thread(_all_written, barrier)

    return write()


def _created(directory: Any) -> None:
    """Waits until ``directory`` exists: Orbax 0.11's ``await_creation`` can return on a
    process other than the primary before the primary has created it (bounded)."""
    deadline = time.monotonic() + _CREATED_TIMEOUT_S
    while not directory.exists():
        if time.monotonic() > deadline:
            raise FileNotFoundError(f"Orbax did not create {directory} within "
                                    f"{_CREATED_TIMEOUT_S:g} s")
        time.sleep(0.02)


def _all_written(barrier: str) -> None:
    """Waits until every process has written its file (JAX's barrier; nothing is kept in the
    store); at once on one process."""
    client = compat.distributed_client()
    if client is not None and jax.process_count() > 1:
        client.wait_at_barrier(barrier, int(WRITTEN_TIMEOUT_S * 1000))


async def load_v1(loader: Stateful, directory: Any) -> Coroutine[Any, Any, None]:
    """Orbax v1 (``StatefulCheckpointable.load``): ``set_state`` from the saved state, also one
    saved on another process count (see :func:`saved_state`).

    Orbax calls it through :meth:`jaxload.Loader.load` (whose docstring has the example).
    """
    loader.set_state(saved_state(directory))

    async def done() -> None:
        return None

    return done()
