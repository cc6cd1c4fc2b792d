"""Run a function or a script in N local processes x D fake CPU devices, as a real JAX cluster.

Each process gets ``XLA_FLAGS=--xla_force_host_platform_device_count=D`` before JAX is imported,
gloo CPU collectives, and ``jax.distributed`` on a free 127.0.0.1 port (a single process runs
without ``jax.distributed``). Every run has a timeout; if a process fails or the timeout passes,
all processes are killed and the error shows the tail of each process's output.

Example:
  >>> def shapes():
  ...     import jax
  ...     return jax.process_index(), jax.local_device_count(), jax.device_count()
  >>> jaxload.testing.run(shapes, num_processes=2, local_devices=4)
  [(0, 4, 8), (1, 4, 8)]
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_ENV_PROCESSES = "JAXLOAD_NUM_PROCESSES"
_ENV_PROCESS_ID = "JAXLOAD_PROCESS_ID"
_ENV_COORDINATOR = "JAXLOAD_COORDINATOR"
_ENV_HEARTBEAT = "JAXLOAD_HEARTBEAT_TIMEOUT_S"
_TAIL_LINES = 30


class ProcessesFailed(RuntimeError):
    """A multi-process run failed or timed out. ``logs`` holds each process's full output."""

    def __init__(self, message: str, returncodes: list[int | None], logs: list[str]):
        super().__init__(message)
        self.returncodes = returncodes
        self.logs = logs


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def initialize() -> None:
    """Inside a process started by this module: set up JAX's CPU cluster from the environment.

    Call it before any other JAX work in a script run by :func:`run_script`. It is a no-op for
    the JAX setup a single process needs (no ``jax.distributed``).
    """
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    num_processes = int(os.environ.get(_ENV_PROCESSES, "1"))
    if num_processes > 1:
        heartbeat = os.environ.get(_ENV_HEARTBEAT)
        jax.distributed.initialize(
            coordinator_address=os.environ[_ENV_COORDINATOR],
            num_processes=num_processes,
            process_id=int(os.environ[_ENV_PROCESS_ID]),
            initialization_timeout=60,
            **({"heartbeat_timeout_seconds": int(heartbeat)} if heartbeat else {}),
        )


def process_env(process_id: int, num_processes: int, local_devices: int, port: int,
                heartbeat_timeout_s: int | None = None) -> dict[str, str]:
    """The environment of one local process: fake CPU devices and the cluster's coordinates."""
    env = dict(os.environ)
    if heartbeat_timeout_s:
        env[_ENV_HEARTBEAT] = str(int(heartbeat_timeout_s))
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    env.update(
        XLA_FLAGS=" ".join(flags + [f"--xla_force_host_platform_device_count={local_devices}"]),
        JAX_PLATFORMS="cpu",
        PYTHONUNBUFFERED="1",
        TF_CPP_MIN_LOG_LEVEL=env.get("TF_CPP_MIN_LOG_LEVEL", "2"),
        **{
            _ENV_PROCESSES: str(num_processes),
            _ENV_PROCESS_ID: str(process_id),
            _ENV_COORDINATOR: f"127.0.0.1:{port}",
        },
    )
    return env


def run_script(
    argv: Sequence[str],
    *,
    num_processes: int,
    local_devices: int,
    timeout_s: float = 300,
    fail_fast: bool = True,
    heartbeat_timeout_s: int | None = None,
) -> list[str]:
    """Runs ``python *argv`` in each process (the script calls :func:`initialize`).

    Returns each process's output. Raises :class:`ProcessesFailed` if one exits non-zero or the
    timeout passes. With ``fail_fast`` (the default) the first failure kills the other
    processes; without it they run on until they exit or the timeout passes, to see how they
    react to the failure. ``heartbeat_timeout_s`` is passed to ``jax.distributed.initialize``:
    how soon the cluster notices a dead process (JAX's default: 100 s).
    """
    return _launch(lambda rank: [sys.executable, *argv], num_processes, local_devices, timeout_s,
                   fail_fast, heartbeat_timeout_s)


def run(
    fn: Callable[..., Any],
    *,
    num_processes: int,
    local_devices: int,
    args: Sequence[Any] = (),
    timeout_s: float = 300,
) -> list[Any]:
    """Calls ``fn(*args)`` in each process and returns the results, indexed by process.

    ``fn`` must be a module-level function of an importable file (it is loaded again, by path, in
    each process) and its result picklable. JAX is set up before ``fn`` runs.
    """
    source = Path(sys.modules[fn.__module__].__file__).resolve()
    with tempfile.TemporaryDirectory(prefix="jaxload-run-") as tmp:
        args_file = Path(tmp, "args.pkl")
        args_file.write_bytes(pickle.dumps(tuple(args)))
        results = [Path(tmp, f"result{rank}.pkl") for rank in range(num_processes)]

        def command(rank: int) -> list[str]:
            return [sys.executable, "-m", "jaxload.testing", str(source), fn.__qualname__,
                    str(args_file), str(results[rank])]

        _launch(command, num_processes, local_devices, timeout_s)
        return [pickle.loads(r.read_bytes()) for r in results]


def _launch(command: Callable[[int], list[str]], num_processes: int, local_devices: int,
            timeout_s: float, fail_fast: bool = True,
            heartbeat_timeout_s: int | None = None) -> list[str]:
    for name, value in (("num_processes", num_processes), ("local_devices", local_devices)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="jaxload-logs-") as tmp:
        log_paths = [Path(tmp, f"process{rank}.log") for rank in range(num_processes)]
        procs = []
        for rank, log_path in enumerate(log_paths):
            with open(log_path, "wb") as log:
                procs.append(subprocess.Popen(
                    command(rank), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=process_env(rank, num_processes, local_devices, port, heartbeat_timeout_s),
                ))
        failure = _wait(procs, timeout_s, fail_fast)
        logs = [p.read_text(errors="replace") for p in log_paths]
    if failure:
        raise ProcessesFailed(_describe(failure, procs, logs), [p.returncode for p in procs], logs)
    return logs


def _wait(procs: list[subprocess.Popen], timeout_s: float, fail_fast: bool) -> str | None:
    """Waits for all processes; at the timeout (or the first failure) kills the rest."""
    deadline = time.monotonic() + timeout_s
    failure = None
    while failure is None:
        codes = [p.poll() for p in procs]
        if all(c == 0 for c in codes):
            return None
        bad = [rank for rank, c in enumerate(codes) if c not in (None, 0)]
        if bad and (fail_fast or None not in codes):
            failure = f"process {bad[0]} exited with code {codes[bad[0]]}"
        elif time.monotonic() > deadline:
            running = [rank for rank, c in enumerate(codes) if c is None]
            failure = f"timed out after {timeout_s:g} s; processes {running} still running"
        else:
            time.sleep(0.02)
    time.sleep(0.5)  # let the others print their own view of the failure
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()
    return failure


def _describe(failure: str, procs: list[subprocess.Popen], logs: list[str]) -> str:
    parts = [f"multi-process run failed: {failure}"]
    for rank, (proc, log) in enumerate(zip(procs, logs, strict=True)):
        tail = "\n".join(log.splitlines()[-_TAIL_LINES:])
        parts.append(f"--- process {rank} (exit code {proc.returncode}), last lines ---\n{tail}")
    return "\n".join(parts)


def _worker(source: str, qualname: str, args_file: str, result_file: str) -> None:
    initialize()
    sys.path.insert(0, str(Path(source).parent))  # the file's own helper modules
    spec = importlib.util.spec_from_file_location(f"_jaxload_target_{Path(source).stem}", source)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    fn = module
    for part in qualname.split("."):
        fn = getattr(fn, part)
    result = fn(*pickle.loads(Path(args_file).read_bytes()))
    Path(result_file).write_bytes(pickle.dumps(result))


if __name__ == "__main__":
    _worker(*sys.argv[1:])
