"""One process of a warm test cluster (``python -m jaxload._src.warm_worker DIR``).

It sets up JAX once, then serves calls until its stdin closes: each line is a call's number
``n``; the call (``DIR/call<n>.pkl``: a function's file, its qualified name, its arguments and a
timeout) runs on a process made fresh (:func:`process_state.reset`), and its outcome goes to
``DIR/result<n>.<process>.pkl``: the function's result and what the call left behind. The
processes check their leftovers together: after all of them have ended their own, process 0
lists the keys left in the coordination service's store. An exception ends the process, with
its traceback on stderr (the cluster then starts afresh).
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

from jaxload._src import compat, process_state
from jaxload._src.cluster import initialize
from jaxload._src.worker_target import function_at


def serve(directory: Path) -> None:
    """Runs the calls named on stdin, one at a time, until stdin closes."""
    initialize()
    rank = int(os.environ.get("JAXLOAD_PROCESS_ID", "0"))
    environ, cwd = dict(os.environ), os.getcwd()
    _write(directory / f"ready.{rank}", b"")
    for line in sys.stdin:
        call = int(line)
        source, qualname, args, timeout_s = pickle.loads((directory / f"call{call}.pkl").read_bytes())
        result, left = _call(call, function_at(source, qualname), args, timeout_s)
        if os.environ != environ:
            os.environ.clear()
            os.environ.update(environ)
        os.chdir(cwd)
        _write(directory / f"result{call}.{rank}.pkl", pickle.dumps((result, left)))


def _call(call: int, fn: Any, args: tuple[Any, ...], timeout_s: float) -> tuple[Any, list[str]]:
    process_state.reset()
    with warnings.catch_warnings():  # filters as they were, and warnings told once told again
        result = fn(*args)
    sys.stdout.flush()
    sys.stderr.flush()
    left = process_state.leftovers(timeout_s)
    client = compat.distributed_client()
    if client is not None:  # every process has ended its own before process 0 looks at the store
        client.wait_at_barrier(f"jaxload-warm-call-{call}", int(timeout_s * 1000))
        if int(os.environ.get("JAXLOAD_PROCESS_ID", "0")) == 0:
            left += process_state.stray_keys(client)
    return result, left


def _write(path: Path, data: bytes) -> None:
    """Writes ``path`` whole or not at all: the cluster reads it as soon as it exists."""
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


if __name__ == "__main__":
    try:
        serve(Path(sys.argv[1]))
    except BaseException:  # noqa: BLE001 - shown to the cluster, which ends every process
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # not sys.exit: jax.distributed's shutdown would wait for the others
    os._exit(0)
