"""A warm test cluster: local JAX processes started once, running one call after another.

Starting a process that imports JAX (and TensorFlow) and joins a ``jax.distributed`` cluster
takes seconds; most multi-process tests then run well under a second of work. A
:class:`Cluster` starts its processes once (:mod:`jaxload._src.warm_worker`), hands each call
to all of them, and checks after each call that it left nothing behind. A call that fails,
hangs past its timeout or leaves state behind ends the processes; the next call starts new ones.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from jaxload._src.cluster import free_port, process_env
from jaxload._src.testing import ProcessesFailed, _check_cluster, _describe
from jaxload._src.worker_target import function_file

_GRACE_S = 0.5  # after a process fails, the others may print their own view of it
_POLL_S = 0.01
_CLOSE_S = 10.0  # how long processes told to stop may take before they are killed


def cluster(*, num_processes: int, local_devices: int, timeout_s: float = 300) -> Cluster:
    """A warm cluster: ``num_processes`` local processes x ``local_devices`` fake CPU devices,
    started once, that run one call after another (``cluster.run(fn, *args)``).

    As :func:`run` does for one call: each process sets up ``jax.distributed`` (gloo CPU
    collectives, a free 127.0.0.1 port) and ``fn`` must be a module-level function of a file
    (loaded again, by path, for each call) whose result pickles. But the processes, JAX and
    the modules they import stay: a call takes the time of its own work.

    Each call starts as in new processes: jaxload's names of loaders and exchanges, its watchdog
    and its store client are new, the warnings it tells once are told again, ``os.environ`` and
    the working directory are as at the start. After each call the cluster checks, in every
    process, that it left no loader pass open and no jaxload thread running, and that nothing
    is left under ``jaxload/`` in the coordination service's store; otherwise the call raises
    :class:`ProcessesFailed` naming what was left. A call that raises, exits, hangs past
    ``timeout_s`` or leaves state behind ends the processes (``ProcessesFailed`` with the tail
    of each process's output); the next call starts new ones. Each call's output is printed
    with each line prefixed ``[process index]``, where pytest captures it for the test, and
    kept in ``cluster.outputs``.

    State of your own (module globals of imported modules, ``jax.config``, device arrays, the
    compilation cache) stays between calls. A call that must end processes (a kill, a
    ``jaxload`` failure with ``on_failure="exit"``) needs processes of its own: :func:`run`.

    Example:
      A pytest fixture that keeps one cluster for a whole test module (not run here: the
      examples run in one process and define their functions in no file):

      >>> import pytest
      >>> @pytest.fixture(scope="module")
      ... def cluster():
      ...     with jaxload.testing.cluster(num_processes=2, local_devices=4) as c:
      ...         yield c
      >>> def where_am_i():                # module-level, in the test file
      ...     import jax
      ...     return jax.process_index(), jax.local_device_count(), jax.device_count()
      >>> def test_where(cluster):
      ...     assert cluster.run(where_am_i) == [(0, 4, 8), (1, 4, 8)]
      >>> with jaxload.testing.cluster(num_processes=2, local_devices=4) as c:  # doctest: +SKIP
      ...     print(c.run(where_am_i))
      ...     print(c.run(where_am_i))     # the same processes: no start, no JAX import
      [(0, 4, 8), (1, 4, 8)]
      [(0, 4, 8), (1, 4, 8)]
    """
    return Cluster(num_processes, local_devices, timeout_s)


class Cluster:
    """``num_processes`` local processes x ``local_devices`` fake CPU devices, started once.

    Made by :func:`cluster` (its documentation says what a call may expect). ``outputs`` is
    the last call's output (stdout and stderr) of each process; ``starts`` counts how many times
    the processes were started (once, plus once after each call that ended them).

    Example:
      Nothing starts before ``with`` or the first call; then ``starts`` tells whether a call
      ran on new processes (after a call that ended them):

      >>> c = jaxload.testing.cluster(num_processes=2, local_devices=4)
      >>> c.starts, c.outputs
      (0, [])
    """

    def __init__(self, num_processes: int, local_devices: int, timeout_s: float):
        _check_cluster(num_processes, local_devices)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self.num_processes, self.local_devices, self.timeout_s = (num_processes, local_devices,
                                                                  timeout_s)
        self.outputs: list[str] = []
        self.starts = 0
        self._procs: list[subprocess.Popen[bytes]] = []
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._logs: list[Path] = []
        self._ready = False
        self._calls = 0

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        """Starts the processes (they set up JAX while the caller goes on); a no-op if running."""
        if self._procs:
            return
        self._dir = tempfile.TemporaryDirectory(prefix="jaxload-cluster-")
        port = free_port()
        self._logs = [Path(self._dir.name, f"process{r}.log") for r in range(self.num_processes)]
        command = [sys.executable, "-m", "jaxload._src.warm_worker", self._dir.name]
        for rank, log_path in enumerate(self._logs):
            with open(log_path, "wb") as log:
                self._procs.append(subprocess.Popen(
                    command, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                    env=process_env(rank, self.num_processes, self.local_devices, port)))
        self._ready = False
        self.starts += 1

    def run(self, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None) -> list[Any]:
        """Calls ``fn(*args)`` in every process; returns the results, indexed by process.

        ``timeout_s`` (default: the cluster's) bounds the call, and the start before it.
        Raises :class:`ProcessesFailed` (the cluster's processes then end) if a process raises
        or exits, the timeout passes, or the call leaves state behind.
        """
        source = function_file(fn)
        timeout = self.timeout_s if timeout_s is None else timeout_s
        self.start()
        try:
            if not self._ready:
                self._wait_ready(timeout)
            return self._call(str(source), fn.__qualname__, tuple(args), timeout)
        except BaseException:  # a failure, a hang or an interrupt (pytest-timeout, Ctrl-C)
            self.close()
            raise

    def close(self) -> None:
        """Ends the processes: told to stop, killed if they have not after a few seconds."""
        procs, self._procs = self._procs, []
        for proc in procs:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()  # the process serves calls until its stdin closes
            except OSError:
                pass
        deadline = time.monotonic() + _CLOSE_S
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        _kill(procs)
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    # -- one call ------------------------------------------------------------------------------
    def _wait_ready(self, timeout_s: float) -> None:
        failure = self._wait_for("ready.{rank}", timeout_s, "starting")
        if failure is not None:
            self._fail(failure, [0] * self.num_processes)
        self._ready = True

    def _call(self, source: str, qualname: str, args: tuple[Any, ...], timeout_s: float
              ) -> list[Any]:
        call, self._calls = self._calls, self._calls + 1
        assert self._dir is not None
        Path(self._dir.name, f"call{call}.pkl").write_bytes(
            pickle.dumps((source, qualname, args, timeout_s)))
        offsets = [log.stat().st_size for log in self._logs]
        failure = None
        try:
            for proc in self._procs:
                assert proc.stdin is not None
                proc.stdin.write(f"{call}\n".encode())
                proc.stdin.flush()
        except OSError as e:
            failure = f"a process cannot take the call ({e})"
        failure = failure or self._wait_for(f"result{call}.{{rank}}.pkl", timeout_s, qualname)
        if failure is not None:
            self._fail(failure, offsets)
        self.outputs = self._show(offsets)
        outcomes = [pickle.loads(Path(self._dir.name, f"result{call}.{rank}.pkl").read_bytes())
                    for rank in range(self.num_processes)]
        left = [f"process {rank}: {', '.join(found)}"
                for rank, (_, found) in enumerate(outcomes) if found]
        if left:
            self._fail(f"{qualname} left state behind, which the next call would see "
                       f"(the processes end; the next call starts new ones): {'; '.join(left)}",
                       offsets, kill=True)
        return [result for result, _ in outcomes]

    def _wait_for(self, pattern: str, timeout_s: float, what: str) -> str | None:
        """Waits until every process has written ``pattern`` (``{rank}`` in it); otherwise,
        once a process exits or the timeout passes, kills them all and says why."""
        assert self._dir is not None
        paths = [Path(self._dir.name, pattern.format(rank=r)) for r in range(self.num_processes)]
        deadline = time.monotonic() + timeout_s
        while True:
            pending = [rank for rank, path in enumerate(paths) if not path.exists()]
            if not pending:
                return None
            codes = [p.poll() for p in self._procs]
            ended = [rank for rank, code in enumerate(codes) if code is not None]
            if ended:
                failure = f"process {ended[0]} exited with code {codes[ended[0]]} in {what}"
                break
            if time.monotonic() > deadline:
                failure = (f"timed out after {timeout_s:g} s in {what}; processes {pending} "
                           "still running")
                break
            time.sleep(_POLL_S)
        time.sleep(_GRACE_S)
        _kill(self._procs)
        return failure

    def _fail(self, failure: str, offsets: Sequence[int], kill: bool = False) -> None:
        """Raises :class:`ProcessesFailed` with every process's output since ``offsets``."""
        if kill:
            _kill(self._procs)
        logs = self._show(offsets)
        raise ProcessesFailed(_describe(failure, self._procs, logs),
                              [p.returncode for p in self._procs], logs)

    def _show(self, offsets: Sequence[int]) -> list[str]:
        """Each process's output since ``offsets``, also printed (pytest captures it per test)."""
        outputs = []
        for rank, (log, offset) in enumerate(zip(self._logs, offsets, strict=True)):
            with open(log, "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
            outputs.append(text)
            for line in text.splitlines():
                print(f"[{rank}] {line}")
        return outputs


def _kill(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        proc.wait()
