"""The implementation of :mod:`jaxload.testing` (its public names and documentation are there)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from jaxload._src.cluster import free_port, initialize, process_env
from jaxload._src.validate import is_positive_int
from jaxload._src.worker_target import check_not_loading, function_at, function_file

_TAIL_LINES = 30


class ProcessesFailed(RuntimeError):
    """A multi-process run failed or timed out. ``logs`` holds each process's full output.

    Example:
      >>> try:
      ...     jaxload.testing.run_script(["-c", "print('bye'); raise SystemExit(3)"],
      ...                                num_processes=1, local_devices=1)
      ... except jaxload.testing.ProcessesFailed as e:
      ...     print(e.returncodes, [log.strip() for log in e.logs])
      [3] ['bye']
    """

    def __init__(self, message: str, returncodes: list[int | None], logs: list[str],
                 ended_at: list[float | None] | None = None):
        super().__init__(message)
        self.returncodes = returncodes
        self.logs = logs
        self.ended_at = ended_at or [None] * len(returncodes)  # time.time() each one ended


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

    Example:
      Each process sees the cluster in its environment, which :func:`initialize` reads (this
      script does not start JAX):

      >>> script = ("import os; e = os.environ; "
      ...           "print(e['JAXLOAD_PROCESS_ID'], 'of', e['JAXLOAD_NUM_PROCESSES'], e['JAX_PLATFORMS'])")
      >>> outputs = jaxload.testing.run_script(["-c", script], num_processes=2, local_devices=4)
      >>> [out.strip() for out in outputs]
      ['0 of 2 cpu', '1 of 2 cpu']
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

    Example:
      In a test file (not run here: the examples run in one process, and a function defined in
      an example lives in no file the processes could load):

      >>> def where_am_i():
      ...     import jax
      ...     return jax.process_index(), jax.local_device_count(), jax.device_count()
      >>> jaxload.testing.run(where_am_i, num_processes=2, local_devices=4)  # doctest: +SKIP
      [(0, 4, 8), (1, 4, 8)]
    """
    source = function_file(fn)
    with tempfile.TemporaryDirectory(prefix="jaxload-run-") as tmp:
        args_file = Path(tmp, "args.pkl")
        args_file.write_bytes(pickle.dumps(tuple(args)))
        results = [Path(tmp, f"result{rank}.pkl") for rank in range(num_processes)]

        def command(rank: int) -> list[str]:
            return [sys.executable, "-m", "jaxload._src.testing", str(source), fn.__qualname__,
                    str(args_file), str(results[rank])]

        _launch(command, num_processes, local_devices, timeout_s)
        return [pickle.loads(r.read_bytes()) for r in results]


def launch(
    argv: Sequence[str],
    *,
    num_processes: int,
    local_devices: int,
    timeout_s: float = 3600,
    out: TextIO | None = None,
) -> int:
    """Runs ``argv`` in each process, streaming its lines prefixed with ``[process index]``.

    The command-line ``jaxload launch``. Returns 0 when every process succeeded; otherwise the
    others are killed, the last lines of every process are printed again, and the failing
    process's exit code is returned (124 on timeout, 128 + N for a signal N).

    Example:
      >>> import io, sys
      >>> out = io.StringIO()
      >>> jaxload.testing.launch([sys.executable, "-c", "print('hello')"], num_processes=2,
      ...                        local_devices=4, out=out)
      0
      >>> sorted(out.getvalue().splitlines())     # the processes' lines interleave
      ['[0] hello', '[1] hello']
    """
    _check_cluster(num_processes, local_devices)
    port = free_port()
    procs = [subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, text=True, errors="replace",
                              env=process_env(rank, num_processes, local_devices, port))
             for rank in range(num_processes)]
    pumps, tails = _stream(procs, out or sys.stdout)
    failure = _wait(procs, timeout_s, fail_fast=True)
    for t in pumps:
        t.join(timeout=5)
    if not failure:
        return 0
    message, rank = failure
    print(_describe(message, procs, ["\n".join(t) for t in tails]), file=sys.stderr, flush=True)
    if rank is None:
        return 124
    code = procs[rank].returncode
    return 128 - code if code < 0 else code


def _stream(procs: list[subprocess.Popen[str]], out: TextIO
            ) -> tuple[list[threading.Thread], list[deque[str]]]:
    """Starts a thread per process that copies its lines to ``out``, prefixed with its index;
    returns the threads and, per process, its last lines."""
    tails: list[deque[str]] = [deque(maxlen=_TAIL_LINES) for _ in procs]
    lock = threading.Lock()

    def pump(rank: int, lines: Iterable[str]) -> None:
        for line in lines:
            tails[rank].append(line.rstrip("\n"))
            with lock:
                out.write(f"[{rank}] {line}")
                out.flush()

    pumps = [threading.Thread(target=pump, args=(rank, proc.stdout), daemon=True)
             for rank, proc in enumerate(procs)]
    for t in pumps:
        t.start()
    return pumps, tails


def _launch(command: Callable[[int], list[str]], num_processes: int, local_devices: int,
            timeout_s: float, fail_fast: bool = True,
            heartbeat_timeout_s: int | None = None) -> list[str]:
    _check_cluster(num_processes, local_devices)
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
        ended_at: list[float | None] = [None] * len(procs)
        failure = _wait(procs, timeout_s, fail_fast, ended_at)
        logs = [p.read_text(errors="replace") for p in log_paths]
    if failure:
        raise ProcessesFailed(_describe(failure[0], procs, logs), [p.returncode for p in procs],
                              logs, ended_at)
    return logs


def _check_cluster(num_processes: int, local_devices: int) -> None:
    check_not_loading("starting jaxload.testing processes")
    for name, value in (("num_processes", num_processes), ("local_devices", local_devices)):
        if not is_positive_int(value):
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def _wait(procs: Sequence[subprocess.Popen[Any]], timeout_s: float, fail_fast: bool,
          ended_at: list[float | None] | None = None) -> tuple[str, int | None] | None:
    """Waits for all processes; at the timeout (or the first failure) kills the rest.

    Returns None on success, else a message and the first failing process (None: timeout).
    ``ended_at`` receives the ``time.time()`` at which each process was seen to end by itself.
    """
    deadline = time.monotonic() + timeout_s
    failure: tuple[str, int | None] | None = None
    while failure is None:
        codes = [p.poll() for p in procs]
        if ended_at is not None:
            for rank, code in enumerate(codes):
                if code is not None and ended_at[rank] is None:
                    ended_at[rank] = time.time()
        if all(c == 0 for c in codes):
            return None
        bad = [rank for rank, c in enumerate(codes) if c not in (None, 0)]
        if bad and (fail_fast or None not in codes):
            failure = f"process {bad[0]} exited with code {codes[bad[0]]}", bad[0]
        elif time.monotonic() > deadline:
            running = [rank for rank, c in enumerate(codes) if c is None]
            failure = f"timed out after {timeout_s:g} s; processes {running} still running", None
        else:
            time.sleep(0.02)
    time.sleep(0.5)  # let the others print their own view of the failure
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()
    return failure


def _describe(failure: str, procs: Sequence[subprocess.Popen[Any]], logs: list[str]) -> str:
    parts = [f"multi-process run failed: {failure}"]
    for rank, (proc, log) in enumerate(zip(procs, logs, strict=True)):
        tail = "\n".join(log.splitlines()[-_TAIL_LINES:])
        parts.append(f"--- process {rank} (exit code {proc.returncode}), last lines ---\n{tail}")
    return "\n".join(parts)


def _worker(source: str, qualname: str, args_file: str, result_file: str) -> None:
    initialize()
    fn = function_at(source, qualname)
    result = fn(*pickle.loads(Path(args_file).read_bytes()))
    Path(result_file).write_bytes(pickle.dumps(result))


if __name__ == "__main__":
    _worker(*sys.argv[1:])
